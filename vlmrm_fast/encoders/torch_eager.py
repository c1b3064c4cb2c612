"""The CLIP image tower in eager PyTorch: bf16/fp16/FP8 on the GPU, fp32 on the CPU."""

from __future__ import annotations

from typing import Any

import torch

from vlmrm_fast.encoders.base import Backend, ImageEncoder
from vlmrm_fast.encoders.fp8 import DEFAULT_FP8_SCALING, FP8_OPTIONS
from vlmrm_fast.encoders.precision import Precision
from vlmrm_fast.encoders.tower import prepare_clip_tower


class TorchImageEncoder(ImageEncoder):
    backend = "torch"

    def __init__(
        self,
        visual: torch.nn.Module,
        *,
        device: torch.device,
        dtype: torch.dtype,
        image_size: int,
        embed_dim: int,
        precision: str | None = None,
        fp8_scaling: str | None = None,
    ):
        """``visual`` is prepared already (:func:`~vlmrm_fast.encoders.tower.prepare_image_tower`)."""
        self.device = torch.device(device)
        self.input_dtype = dtype
        self.precision = precision or str(dtype).replace("torch.", "")
        self.fp8_scaling = fp8_scaling
        self.image_size = image_size
        self.embed_dim = embed_dim
        self.visual = visual

    @torch.inference_mode()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.visual(pixels)

    def close(self) -> None:
        self.visual = None


def make_torch_encoder(
    clip: Any,
    *,
    device: torch.device,
    precision: Precision,
    batch_size: int | None = None,
    attention: str = "open_clip",
    fp8_scaling: str | None = None,
    fp8_calibration: Any = None,
) -> TorchImageEncoder:
    """The eager backend for ``clip`` (a LoadedClip); ``batch_size`` is not needed (any batch runs).

    ``attention`` "open_clip" keeps the model's nn.MultiheadAttention, which eager torch runs on its
    fused fast path (encoders/attention.py)."""
    visual = prepare_clip_tower(
        clip,
        device=device,
        precision=precision,
        attention=attention,
        fp8_scaling=fp8_scaling,
        fp8_calibration=fp8_calibration,
    )
    return TorchImageEncoder(
        visual,
        device=device,
        dtype=precision.dtype,
        precision=precision.name,
        fp8_scaling=(fp8_scaling or DEFAULT_FP8_SCALING) if precision.fp8 else None,
        image_size=clip.preprocess.size,
        embed_dim=clip.embed_dim,
    )


BACKEND = Backend(
    name="torch",
    summary="eager PyTorch, any batch size",
    make=make_torch_encoder,
    options=("attention", *FP8_OPTIONS),
    auto_rank=2,
    auto_devices=None,
)
