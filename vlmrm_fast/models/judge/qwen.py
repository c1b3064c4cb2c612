"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL as judges.

Their image processor resizes a frame to a multiple of ``patch_size * merge_size`` pixels within its
pixel bounds (``smart_resize``), normalizes it and cuts it into patches of ``3 x temporal_patch_size x
patch_size^2`` values (a still image repeated over the temporal patch), laid out merge window by merge
window; the vision tower runs all frames' patches as one sequence, each frame attending within itself,
and merges 2 x 2 patches into one token. The language model places tokens with multimodal RoPE
(temporal, height and width positions), which :meth:`QwenAdapter.positions` takes from the model's
own ``get_rope_index`` for the whole prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class QwenAdapter:
    """The Qwen families' part of a judge for frames of ``image_size`` (see the module docstring)."""

    def __init__(self, model: Any, processor: Any, image_size: tuple[int, int]):
        self.model = model
        self.image_processor = processor.image_processor
        self.image_size = image_size
        probe = self._patches(torch.zeros((1, 3, *image_size), dtype=torch.uint8))
        self.pixel_shape = tuple(probe[0].shape[1:])
        self.grid = (1, probe[1], probe[2])  # (temporal, height, width) patches of one frame

    def _patches(self, frames: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        ip = self.image_processor
        images = frames
        if ip.do_resize:
            images = ip.resize(images, size=ip.size, resample=ip.resample, factor=ip.patch_size * ip.merge_size)
        images = ip.rescale_and_normalize(
            images, ip.do_rescale, ip.rescale_factor, ip.do_normalize, ip.image_mean, ip.image_std
        )
        return ip.patchify(
            images, patch_size=ip.patch_size, merge_size=ip.merge_size, temporal_patch_size=ip.temporal_patch_size
        )

    def pixels(self, frames: torch.Tensor) -> torch.Tensor:
        return self._patches(frames)[0]

    def encode(self, pixels: torch.Tensor) -> Any:
        n = pixels.shape[0]
        grid = torch.tensor([self.grid], dtype=torch.long, device=pixels.device).expand(n, 3)
        return self.model.model.get_image_features(
            pixel_values=pixels.reshape(-1, pixels.shape[-1]), image_grid_thw=grid, return_dict=True
        )

    def positions(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        positions, _ = self.model.model.get_rope_index(
            inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
        )
        return positions
