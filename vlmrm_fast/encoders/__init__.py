"""CLIP image-tower backends behind one option: ``backend="torch" | "compile" | "tensorrt" | "auto"``."""

from __future__ import annotations

from typing import Any

import torch

from vlmrm_fast.encoders.base import ImageEncoder, resolve_precision
from vlmrm_fast.encoders.torch_eager import TorchImageEncoder

BACKENDS = ("auto", "torch")


def make_image_encoder(
    clip: Any,
    backend: str = "auto",
    *,
    device: torch.device,
    precision: str = "auto",
    batch_size: int | None = None,
    **options: Any,
) -> ImageEncoder:
    """An encoder for ``clip`` (a :class:`~vlmrm_fast.reward.clip_loading.LoadedClip`)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is unknown; use one of {BACKENDS}")
    if options:
        raise TypeError(f"unexpected encoder option(s) {sorted(options)} for backend {backend!r}")
    dtype = resolve_precision(precision, device)
    return TorchImageEncoder(
        clip.model.visual,
        device=device,
        dtype=dtype,
        image_size=clip.preprocess.size,
        embed_dim=clip.embed_dim,
    )


__all__ = ["BACKENDS", "ImageEncoder", "make_image_encoder"]
