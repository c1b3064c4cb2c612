"""``vlmrm-fast export``: build a TensorRT engine into the engine cache ahead of time, or write the ONNX file alone."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from vlmrm_fast.encoders.base import resolve_precision
from vlmrm_fast.encoders.tensorrt_engine import DEFAULT_WORKSPACE_GIB


def export_encoder(
    model: str,
    pretrained: str | None = None,
    *,
    checkpoint: str | os.PathLike | None = None,
    batch_size: int | None = None,
    precision: str = "auto",
    onnx_only: str | os.PathLike | None = None,
    engine_cache_dir: str | os.PathLike | None = None,
    device: str | torch.device = "auto",
    workspace_gib: float = DEFAULT_WORKSPACE_GIB,
    rebuild: bool = False,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """Returns the engine's path in the cache, or with ``onnx_only`` the ONNX file written there.

    With ``onnx_only`` everything runs on the CPU: ``precision`` "auto" means fp32 and
    ``batch_size`` None gives a dynamic batch axis. An engine needs a CUDA GPU, TensorRT
    and a ``batch_size``; the reward model finds it when loaded with the same model,
    weights, batch size and precision.
    """
    from vlmrm_fast.device import resolve_device
    from vlmrm_fast.reward.clip_loading import load_clip

    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if onnx_only is not None:
        from vlmrm_fast.encoders.onnx_export import export_image_tower

        clip = load_clip(model, pretrained, checkpoint=checkpoint, device=torch.device("cpu"), seed=seed)
        return export_image_tower(
            clip.model.visual,
            onnx_only,
            image_size=clip.preprocess.size,
            precision="fp32" if precision == "auto" else precision,
            batch_size=batch_size,
        )

    from vlmrm_fast.encoders.tensorrt_engine import make_tensorrt_encoder, require_tensorrt

    if batch_size is None:
        raise ValueError("an engine runs one fixed batch size: pass --batch-size N (batch_size=N)")
    resolved = resolve_device(device)
    if resolved.type != "cuda":
        raise RuntimeError(
            "building a TensorRT engine needs a CUDA GPU (engines are specific to the GPU model); "
            "on this machine, --onnx-only OUT.onnx writes the ONNX file"
        )
    require_tensorrt()
    dtype = resolve_precision(precision, resolved)
    clip = load_clip(model, pretrained, checkpoint=checkpoint, device=resolved, seed=seed)
    encoder = make_tensorrt_encoder(
        clip,
        device=resolved,
        dtype=dtype,
        batch_size=batch_size,
        engine_cache_dir=engine_cache_dir,
        workspace_gib=workspace_gib,
        rebuild_engine=rebuild,
        progress=progress,
    )
    try:
        return encoder.engine_path
    finally:
        encoder.close()
