"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL as judges.

Their image processor resizes a frame to a multiple of ``patch_size * merge_size`` pixels within its
pixel bounds (``smart_resize``), normalizes it and cuts it into patches of ``3 x temporal_patch_size x
patch_size^2`` values (a still image repeated over the temporal patch), laid out merge window by merge
window; the vision tower runs all frames' patches as one sequence, each frame attending within itself,
and merges 2 x 2 patches into one token. The language model places tokens with multimodal RoPE
(temporal, height and width positions), which :meth:`QwenAdapter.positions` takes from the model's
own ``get_rope_index`` for the whole prompt.

The vision tower's attention over the packed frames is transformers' own with one change of schedule:
its SDPA path runs one attention call per frame (a python loop of N small calls in every block), while
every frame of a judge has the same number of patches. :func:`packed_sdpa`, registered with
transformers' ``AttentionInterface`` and given the packed (flash-attention) calling convention, runs the
frames as one batch of equal sequences, the same arithmetic in one call; segments of unequal length
(Qwen2.5-VL's windows at the image's edges) run one by one, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

#: The name the vision towers' packed attention is registered under: transformers hands the packed layout
#: (cumulative sequence lengths) to implementations whose name holds "flash".
PACKED_ATTENTION = "flash_layout_sdpa"


def packed_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    scaling: float | None = None,
    dropout: float = 0.0,
    cu_seq_lens_q: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Non-causal attention of (1, heads, T, dim) query, key and value holding sequences one after another
    (``cu_seq_lens_q``: their cumulative lengths), each attending within itself -> (1, T, heads, dim)."""
    assert cu_seq_lens_q is not None and attention_mask is None
    lengths = (cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]).tolist()
    heads, dim = query.shape[1], query.shape[-1]
    if len(set(lengths)) == 1:
        n, length = len(lengths), lengths[0]
        q, k, v = (t[0].unflatten(1, (n, length)).transpose(0, 1) for t in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)  # (n, heads, length, dim)
        return out.transpose(1, 2).reshape(1, n * length, heads, dim), None
    parts = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)
        for q, k, v in zip(*(t.split(lengths, dim=2) for t in (query, key, value)))
    ]
    return torch.cat(parts, dim=2).transpose(1, 2), None


def use_packed_attention(vision_tower: Any) -> None:
    """Runs ``vision_tower``'s attention through :func:`packed_sdpa` (where it runs SDPA)."""
    from transformers import AttentionInterface

    if vision_tower.config._attn_implementation != "sdpa":
        return  # flash attention takes the packed layout itself; eager stays as asked
    AttentionInterface.register(PACKED_ATTENTION, packed_sdpa)
    vision_tower.config._attn_implementation = PACKED_ATTENTION


class QwenAdapter:
    """The Qwen families' part of a judge for frames of ``image_size`` (see the module docstring)."""

    def __init__(self, model: Any, processor: Any, image_size: tuple[int, int]):
        self.model = model
        self.image_processor = processor.image_processor
        self.image_size = image_size
        use_packed_attention(model.model.visual)
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
