"""SmolVLM and Idefics3 as judges.

Their image processor resizes a frame so that its longest edge is the processor's ``size``, then (with
image splitting) to whole tiles of ``max_image_size``, cuts those tiles out and appends the frame
resized to one tile (the global image); the vision tower encodes each tile and a pixel shuffle cuts
its tokens by ``scale_factor^2``. The prompt holds a row/column marker and the image tokens of each
tile. Positions are the token index (the model's default), so the cached prefix needs no positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class IdeficsAdapter:
    """SmolVLM's and Idefics3's part of a judge for frames of ``image_size`` (see the module docstring)."""

    def __init__(self, model: Any, processor: Any, image_size: tuple[int, int]):
        self.model = model
        self.image_processor = processor.image_processor
        self.image_size = image_size
        self.pixel_shape = tuple(self.pixels(torch.zeros((1, 3, *image_size), dtype=torch.uint8)).shape[1:])

    def pixels(self, frames: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        from transformers.image_utils import SizeDict

        ip = self.image_processor
        tile = ip.max_image_size["longest_edge"]
        images = frames
        if ip.do_resize:
            images = ip.resize(images, ip.size, resample=ip.resample)
        if ip.do_image_splitting:
            images = ip.resize_for_vision_encoder(images, tile, resample=ip.resample)
            images, _, _ = ip.split_images(images, max_image_size=ip.max_image_size, resample=ip.resample)
        else:
            images = ip.resize(images, SizeDict(height=tile, width=tile), resample=ip.resample)[:, None]
        pixels = ip.rescale_and_normalize(
            images, ip.do_rescale, ip.rescale_factor, ip.do_normalize, ip.image_mean, ip.image_std
        )
        return pixels if out is None else out.copy_(pixels)

    def as_processor_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """The processor's layout, which the judge keeps: (N, tiles, 3, tile, tile)."""
        return pixels

    def encode(self, pixels: torch.Tensor) -> Any:
        return self.model.model.get_image_features(pixel_values=pixels, return_dict=True)

    def positions(self, inputs: Mapping[str, torch.Tensor]) -> None:
        return None
