"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL as judges.

Their image processor resizes a frame to a multiple of ``patch_size * merge_size`` pixels within its
pixel bounds (``smart_resize``), normalizes it and cuts it into patches of ``3 x temporal_patch_size x
patch_size^2`` values (a still image repeated over the temporal patch), laid out merge window by merge
window; the vision tower runs all frames' patches as one sequence, each frame attending within itself,
and merges 2 x 2 patches into one token.

A frame is a still image, so the judge keeps one temporal copy of each patch (``3 x patch_size^2``
values: half the processor's) and embeds it with the patch embedding's kernel summed over its temporal
taps (:class:`StillPatchEmbed`, a matrix product: the same sum of products as the 3D convolution over
the repeated copies, which on a CPU took ten times longer). The resize is the processor's own; the
normalization and the patch layout are computed here in one pass over the frame
(:meth:`QwenAdapter.as_processor_pixels` gives the processor's layout back, which a test compares). The language model places tokens with multimodal RoPE
(temporal, height and width positions), which :meth:`QwenAdapter.positions` takes from the model's
own ``get_rope_index`` for the whole prompt.

The vision tower's attention over the packed frames is transformers' own with one change of schedule:
its SDPA path runs one attention call per frame (a python loop of N small calls, on a GPU N kernel
launches, in every block), while every frame of a judge has the same number of patches. :func:`packed_sdpa`, registered with
transformers' ``AttentionInterface`` and given the packed (flash-attention) calling convention, runs the
frames as one batch of equal sequences, the same arithmetic in one call; segments of unequal length
(Qwen2.5-VL's windows at the image's edges) run one by one, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

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
    lengths = _segment_lengths(cu_seq_lens_q)
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


_LENGTHS: dict[int, tuple[torch.Tensor, list[int]]] = {}


def _segment_lengths(cu_seqlens: torch.Tensor) -> list[int]:
    """The lengths of the packed sequences, read from the device once per tensor: the vision tower passes one
    ``cu_seqlens`` tensor to all its blocks (two where some blocks attend in windows), so a pass waits for
    the device once or twice, not once per block."""
    key = id(cu_seqlens)
    cached = _LENGTHS.get(key)
    if cached is not None and cached[0] is cu_seqlens:
        return cached[1]
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    if len(_LENGTHS) >= 4:
        _LENGTHS.clear()
    _LENGTHS[key] = (cu_seqlens, lengths)  # the tensor is held, so its id cannot be reused while cached
    return lengths


def use_packed_attention(vision_tower: Any) -> None:
    """Runs ``vision_tower``'s attention through :func:`packed_sdpa` where it runs SDPA."""
    from transformers import AttentionInterface

    if vision_tower.config._attn_implementation != "sdpa":
        return  # flash attention takes the packed layout itself; eager stays as asked
    AttentionInterface.register(PACKED_ATTENTION, packed_sdpa)
    vision_tower.config._attn_implementation = PACKED_ATTENTION


class StillPatchEmbed(nn.Module):
    """Qwen's patch embedding for still images: ``(M, 3 x patch^2)`` patches through the 3D convolution's
    kernel summed over its temporal taps; the processor's ``(M, 3 x temporal x patch^2)`` patches (a video,
    or the reference path) still go through the family's own forward. It holds the same ``proj`` (the
    weights keep their names) and its summed kernel as a buffer that is not saved."""

    weight: torch.Tensor

    def __init__(self, embed: Any):
        super().__init__()
        self.proj: nn.Conv3d = embed.proj
        for name in ("in_channels", "temporal_patch_size", "patch_size", "embed_dim"):
            setattr(self, name, getattr(embed, name))  # what the family's forward reads
        self._family_forward = type(embed).forward
        self.still_dim = int(embed.in_channels) * int(embed.patch_size) ** 2
        weight = self.proj.weight.detach().float().sum(dim=2).flatten(1)  # (embed_dim, channels x patch^2)
        self.register_buffer("weight", weight.to(self.proj.weight.dtype), persistent=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.shape[-1] != self.still_dim:
            return self._family_forward(self, hidden_states)
        return F.linear(hidden_states.to(self.weight.dtype), self.weight, self.proj.bias)


class QwenAdapter:
    """The Qwen families' part of a judge for frames of ``image_size`` (see the module docstring)."""

    def __init__(self, model: Any, processor: Any, image_size: tuple[int, int]):
        self.model = model
        self.image_processor = ip = processor.image_processor
        self.image_size = image_size
        visual = model.model.visual
        use_packed_attention(visual)
        if not isinstance(visual.patch_embed, StillPatchEmbed):
            visual.patch_embed = StillPatchEmbed(visual.patch_embed)
        # The processor's rescale and normalization as one multiply-add per channel: x * scale + shift.
        mean = torch.tensor(ip.image_mean if ip.do_normalize else [0.0] * 3, dtype=torch.float64)
        std = torch.tensor(ip.image_std if ip.do_normalize else [1.0] * 3, dtype=torch.float64)
        rescale = ip.rescale_factor if ip.do_rescale else 1.0
        self._scale = (rescale / std).float()[:, None]
        self._shift = (-mean / std).float()[:, None]
        probe = self.pixels(torch.zeros((1, 3, *image_size), dtype=torch.uint8))
        self.pixel_shape = tuple(probe.shape[1:])
        height, width = self._resized_size(image_size)
        self.grid = (1, height // ip.patch_size, width // ip.patch_size)  # (temporal, height, width) patches
        self._grids: dict[tuple[int, torch.device], torch.Tensor] = {}

    def _resized_size(self, size: tuple[int, int]) -> tuple[int, int]:
        ip = self.image_processor
        if not ip.do_resize:
            return size
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        return smart_resize(*size, ip.patch_size * ip.merge_size, ip.size.shortest_edge, ip.size.longest_edge)

    def pixels(self, frames: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        ip = self.image_processor
        images = frames
        if ip.do_resize:
            images = ip.resize(images, size=ip.size, resample=ip.resample, factor=ip.patch_size * ip.merge_size)
        n, c, h, w = images.shape
        p, m = ip.patch_size, ip.merge_size
        if out is None or out.dtype != torch.float32:
            out = torch.empty((n, (h // p) * (w // p), c * p * p), dtype=torch.float32, device=images.device)
        # The processor's order: merge window by merge window, then channel, row and column of a patch. The
        # frames are gathered into that order and converted to float in one copy, then scaled in place.
        patches = out.view(n, h // p // m, w // p // m, m, m, c, p, p)
        patches.copy_(images.reshape(n, c, h // p // m, m, p, w // p // m, m, p).permute(0, 2, 5, 3, 6, 1, 4, 7))
        scale, shift = self._scale.to(out.device), self._shift.to(out.device)
        by_channel = out.view(n, -1, c, p * p)
        torch.addcmul(shift, by_channel, scale, out=by_channel)
        return out

    def as_processor_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """Pixels (N, patches, 3 x patch^2) -> the processor's (N x patches, 3 x temporal x patch^2)."""
        n, count, dim = pixels.shape
        channels = self.image_processor.temporal_patch_size
        still = pixels.reshape(n * count, 3, 1, dim // 3)
        return still.expand(-1, -1, channels, -1).reshape(n * count, -1)

    def encode(self, pixels: torch.Tensor) -> Any:
        n = pixels.shape[0]
        key = (n, pixels.device)
        if key not in self._grids:  # made once per batch size: no host-to-device copy per batch
            self._grids[key] = torch.tensor([self.grid] * n, dtype=torch.long, device=pixels.device)
        grid = self._grids[key]
        return self.model.model.get_image_features(
            pixel_values=pixels.reshape(-1, pixels.shape[-1]), image_grid_thw=grid, return_dict=True
        )

    def positions(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        positions, _ = self.model.model.get_rope_index(
            inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
        )
        return positions
