"""``vlmrm-fast export``: a model's image tower built into a TensorRT engine in the engine cache ahead of time, or
written as an ONNX file alone (a command over models/ and encoders/, so it sits here, above encoders)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from vlmrm_fast.checks import positive_int
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
    from vlmrm_fast.models.clip import load_clip
    from vlmrm_fast.runtime.device import resolve_device

    batch_size = positive_int(batch_size, "batch_size", allow_none=True)
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

    from vlmrm_fast.encoders.precision import resolve
    from vlmrm_fast.encoders.tensorrt_engine import (
        BACKEND,
        make_tensorrt_encoder,
        require_cuda_device,
        require_tensorrt,
    )

    if batch_size is None:
        raise ValueError("an engine runs one fixed batch size: pass --batch-size N (batch_size=N)")
    resolved = require_cuda_device(resolve_device(device))
    require_tensorrt()
    if not BACKEND.runs(precision):
        raise ValueError(
            f"precision {precision!r}: a TensorRT engine is built in 'auto', {', '.join(map(repr, BACKEND.precisions))}"
        )
    dtype = resolve(precision, resolved).dtype
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


def check_writable_file(path: str | os.PathLike, option: str) -> None:
    """A ValueError of one line, before any work, when ``path`` cannot be written (a read-only folder, a
    folder that cannot be made): naming ``option``, the reason and the fix."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{option} {target}: is a folder; give the path of a file to write")
    probe = target.parent / f".{target.name}.write_probe.{os.getpid()}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"{option} {target}: cannot write there ({exc.strerror}); choose a writable folder") from None


def _run_export(args: argparse.Namespace) -> int:
    if args.onnx_only:
        check_writable_file(args.onnx_only, "--onnx-only")  # before the model loads
    path = export_encoder(
        args.model,
        args.pretrained,
        checkpoint=args.checkpoint,
        batch_size=args.batch_size,
        precision=args.precision,
        onnx_only=args.onnx_only,
        engine_cache_dir=args.cache_dir,
        device=args.device,
        workspace_gib=args.workspace_gib,
        rebuild=args.rebuild,
        seed=args.seed,
    )
    size = sum(p.stat().st_size for p in (path, Path(f"{path}.data")) if p.exists())
    print(f"{'ONNX' if args.onnx_only else 'engine'}: {path} ({size / 2**20:.1f} MiB)")
    return 0


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="build the TensorRT engine of a CLIP image tower into the engine cache (or write its ONNX file)",
        description="Builds the TensorRT engine the reward model would build on first use, so training starts at once. "
        "With --onnx-only, writes the ONNX export instead (works on the CPU).",
    )
    p.add_argument("model", help="open_clip model name, 'name/tag', 'hf-hub:org/repo' or 'vlmrm-tiny'")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--pretrained", metavar="TAG", help="open_clip pretrained tag (e.g. laion2b_s32b_b82k)")
    weights.add_argument("--checkpoint", metavar="FILE", help="local weights file")
    p.add_argument("--batch-size", type=int, metavar="N", help="the fixed batch the engine runs (required for engines)")
    p.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp16", "fp32"),
        default="auto",
        help="engine precision (auto: bf16 where the GPU has it, else fp16; fp32 with --onnx-only)",
    )
    p.add_argument("--onnx-only", metavar="OUT.onnx", help="write the ONNX export here and stop (no GPU needed)")
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="engine cache (default $VLMRM_FAST_ENGINE_CACHE or ~/.cache/vlmrm_fast/engines)",
    )
    p.add_argument("--device", default="auto", help="CUDA device to build for (default: auto)")
    p.add_argument("--workspace-gib", type=float, default=8.0, help="TensorRT builder workspace limit (GiB)")
    p.add_argument("--rebuild", action="store_true", help="build even when a valid engine is cached")
    p.add_argument("--seed", type=int, default=0, help="seed of random weights (models without pretrained weights)")
    p.set_defaults(func=_run_export, setup=True)
