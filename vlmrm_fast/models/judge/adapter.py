"""What a judge family supplies: its image processor's steps on the device, its vision tower's call,
and the positions of its language model. ``qwen.py`` and ``idefics.py`` implement it.

A vision tower's output is read per item (a frame, or a pair of frames of a Qwen video) by
:func:`stack_vision`, as one tensor (items, levels, tokens, width): the tokens the language model takes in
place of the item's image or video tokens, and for Qwen3-VL the deepstack features its first layers add
there. :func:`unstack_vision` makes the language model's ``mm_encoder_outputs`` of any items again, in any
order: so an episode's frames are encoded once each and kept, and a window or a prompt of several frames
is assembled from what was kept."""

from __future__ import annotations

import dataclasses
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


def stack_vision(vision: Any) -> torch.Tensor:
    """A vision tower's output (``pooler_output``: one tensor (tokens, width) per item; Qwen3-VL's
    ``deepstack_features``: one such tuple per level) as one tensor (items, 1 + levels, tokens, width)."""
    levels = [vision.pooler_output, *(getattr(vision, "deepstack_features", None) or [])]
    return torch.stack([torch.stack(list(level)) for level in levels], dim=1)


def unstack_vision(features: torch.Tensor, like: Any) -> Any:
    """Items' stacked features (items, 1 + levels, tokens, width) (:func:`stack_vision`) as the output of the tower
    that ``like`` came from (its class), for the language model's ``mm_encoder_outputs``: the items' tokens in
    order, as one tensor per level."""
    width = features.shape[-1]
    fields: dict[str, Any] = {"pooler_output": (features[:, 0].reshape(-1, width),)}
    if any(f.name == "deepstack_features" for f in dataclasses.fields(like)):
        fields["deepstack_features"] = [
            (features[:, level].reshape(-1, width),) for level in range(1, features.shape[1])
        ]
    return type(like)(**fields)
