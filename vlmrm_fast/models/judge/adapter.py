"""What a judge family supplies: its image processor's steps on the device, its vision tower's call,
and the positions of its language model. ``qwen.py`` and ``idefics.py`` implement it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch


class Adapter(Protocol):
    """A family's part of a judge, fixed for one input size.

    ``image_size`` (height, width): frames are resized to it before the family's own steps, so one
    input size gives one pixel shape, one image token count and one sequence length.
    ``pixel_shape``: one frame's pixel input, the rows of a judge's ``pixel_buffer``."""

    image_size: tuple[int, int]
    pixel_shape: tuple[int, ...]

    def pixels(self, frames: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """uint8 frames (N, 3, H, W) of ``image_size`` on the device -> pixel input (N, *pixel_shape): the family's
        Hugging Face image processor's steps, or those of them its vision call does not fold in (Qwen's patch
        embedding folds in the normalization), into ``out`` when given."""
        ...

    def as_processor_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """Pixel input (N, *pixel_shape) -> the processor's ``pixel_values`` (a family may keep its input more
        compactly: Qwen keeps the resized frame, its patch embedding normalizing it and cutting the patches)."""
        ...

    def encode(self, pixels: torch.Tensor) -> Any:
        """Pixel input (N, *pixel_shape) -> the vision tower's output, which the language model's forward
        takes as ``mm_encoder_outputs={"image": ...}``."""
        ...

    def positions(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """The position ids of a whole prompt (the processor's ``inputs`` for one image), in the layout the
        language model takes; None where the model's default (token index) is right."""
        ...
