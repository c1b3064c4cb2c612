"""The CLIP image tower in eager PyTorch: bf16/fp16/FP8 on the GPU, fp32 on the CPU."""

from __future__ import annotations

import torch

from vlmrm_fast.encoders.base import ImageEncoder


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
    ):
        """``visual`` is prepared already (:func:`~vlmrm_fast.encoders.tower.prepare_image_tower`)."""
        self.device = torch.device(device)
        self.input_dtype = dtype
        self.precision = precision or str(dtype).replace("torch.", "")
        self.image_size = image_size
        self.embed_dim = embed_dim
        self.visual = visual

    @torch.inference_mode()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.visual(pixels)

    def close(self) -> None:
        self.visual = None
