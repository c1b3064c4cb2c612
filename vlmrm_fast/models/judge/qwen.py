"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL as judges.

Their image processor resizes a frame to a multiple of ``patch_size * merge_size`` pixels within its
pixel bounds (``smart_resize``), normalizes it and cuts it into patches of ``3 x temporal_patch_size x
patch_size^2`` values (a still image repeated over the temporal patch), laid out merge window by merge
window; the vision tower runs all frames' patches as one sequence, each frame attending within itself,
and merges 2 x 2 patches into one token.

A judge's pixel input is the frame as the processor resizes it, as float, channels last (N, H, W, 3):
one conversion of the uint8 frame. The normalization and the patches are the patch embedding's: a frame
is a still image, so the 3D convolution over its repeated temporal copies is the same sum of products
as a 2D convolution of stride ``patch_size`` with the kernel summed over its temporal taps, and the
normalization ``x * scale + shift`` per channel, under that linear map, is the kernel scaled per channel
applied to the frame less its mean (:class:`StillPatchEmbed`, in float32 whatever the model's precision);
its output is put in the processor's merge-window order. :meth:`QwenAdapter.as_processor_pixels` normalizes the pixel input and cuts the
processor's patches from it, which a test compares with the processor's. The language model places tokens with multimodal RoPE (temporal, height
and width positions), which :meth:`QwenAdapter.positions` takes from the model's own ``get_rope_index``
for the whole prompt.

The vision tower runs as transformers wrote it, with two changes for a judge's fixed frame size:

- what depends only on the frames' grid (the rotary position ids, the sequence boundaries, Qwen2.5-VL's
  window order, Qwen3-VL's position-embedding interpolation) is computed once per batch size by
  transformers' own ``vision_utils`` helpers and passed in, as transformers provides for precomputed
  inputs, instead of in every pass (a python loop over the frames, and host reads);
- each block's attention is :class:`PackedVisionAttention`: transformers' SDPA path runs one attention
  call per frame (a python loop of N small calls, on a GPU N kernel launches, in every block) and
  rotates queries and keys in five passes each; every frame of a judge has the same number of patches,
  so the frames run as one batch of equal sequences, the same arithmetic in one call, after one rotation
  of queries and keys together (a complex product, their rows kept interleaved). Segments of unequal length (Qwen2.5-VL's windows at an image's edges) run
  one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class PackedVisionAttention(nn.Module):
    """A Qwen vision block's attention (transformers' ``VisionAttention``, same weights, same forward
    arguments) for sequences packed one after another (``cu_seqlens``), each attending within itself;
    equal segments run as one batch.

    The rotary embedding, ``x * cos + rotate_half(x) * sin`` (in float32, as transformers computes it),
    turns each pair of a head's values ``(x[i], x[i + dim/2])`` by the angle whose cosine and sine are
    ``cos[i]``, ``sin[i]`` (both halves of ``cos`` and ``sin`` repeat the same angles): a complex product.
    So the projection's query and key rows of each head are kept interleaved, ``i, i + dim/2, ...`` (a
    copy of its weight, not saved), which makes every pair adjacent, and queries and keys turn in one
    complex multiplication. Queries and keys with the same order of values within a head give the same
    dot products, so the attention is unchanged; values keep their order. A projection whose weight is
    no plain tensor (FP8's quantized weights) is run as it is, its halves turned in place."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, attention: Any):
        super().__init__()
        self.qkv: nn.Linear = attention.qkv  # the weights keep their names
        self.proj: nn.Linear = attention.proj
        self.num_heads = heads = int(attention.num_heads)
        self.head_dim = dim = int(attention.head_dim)
        self.scaling = float(attention.scaling)
        self.interleaved = type(self.qkv.weight.data) is torch.Tensor
        weight = bias = None
        if self.interleaved:
            half = torch.arange(dim // 2)
            within = torch.stack([half, half + dim // 2], dim=1).flatten()  # 0, dim/2, 1, dim/2 + 1, ...
            queries_keys = (torch.arange(2 * heads)[:, None] * dim + within).flatten()
            rows = torch.cat([queries_keys, torch.arange(2 * heads * dim, 3 * heads * dim)]).to(self.qkv.weight.device)
            weight = self.qkv.weight.detach()[rows].clone()
            bias = None if self.qkv.bias is None else self.qkv.bias.detach()[rows].clone()
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        cu_seqlens: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        assert position_embeddings is not None
        length, heads, dim = hidden_states.shape[0], self.num_heads, self.head_dim
        cos, sin = position_embeddings
        if self.interleaved:
            qkv = F.linear(hidden_states, self.weight, self.bias).view(length, 3 * heads, dim)
            turn = torch.complex(cos[:, : dim // 2].float(), sin[:, : dim // 2].float())[:, None]  # (T, 1, dim/2)
            pairs = torch.view_as_complex(qkv[:, : 2 * heads].float().unflatten(-1, (dim // 2, 2)))
            rotated = torch.view_as_real(pairs * turn).flatten(-2).to(qkv.dtype)  # (T, 2 x heads, dim)
        else:
            qkv = self.qkv(hidden_states).view(length, 3 * heads, dim)
            rotated = _rotate_halves(qkv[:, : 2 * heads], cos, sin).to(qkv.dtype)
        lengths = _segment_lengths(cu_seqlens)
        if len(set(lengths)) == 1:
            count, each = len(lengths), lengths[0]
            q, k = (
                rotated.view(count, each, 2, heads, dim).permute(2, 0, 3, 1, 4).unbind(0)
            )  # (count, heads, each, dim)
            v = qkv[:, 2 * heads :].view(count, each, heads, dim).transpose(1, 2)
            out = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)  # (count, heads, each, dim)
            out = out.transpose(1, 2).reshape(length, heads * dim)
        else:
            q, k = rotated.view(length, 2, heads, dim).permute(1, 2, 0, 3).unbind(0)  # (heads, T, dim)
            v = qkv[:, 2 * heads :].transpose(0, 1)
            parts = [
                F.scaled_dot_product_attention(q, k, v, scale=self.scaling)
                for q, k, v in zip(*(t.split(lengths, dim=1) for t in (q, k, v)))
            ]
            out = torch.cat(parts, dim=1).transpose(0, 1).reshape(length, heads * dim)
        return self.proj(out)


def _rotate_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` of ``x`` (T, heads, dim) by ``cos``, ``sin`` (T, dim), in float32, where
    ``rotate_half(x)`` is ``(-second half, first half)`` of each head."""
    x = x.float()
    cos, sin = cos.float()[:, None], sin.float()[:, None]
    out = x * cos
    half = x.shape[-1] // 2
    out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1.0)
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out


_LENGTHS: dict[int, tuple[torch.Tensor, list[int]]] = {}


def _segment_lengths(cu_seqlens: torch.Tensor) -> list[int]:
    """The lengths of the packed sequences, read from the device once per tensor: a judge passes the same
    ``cu_seqlens`` tensors to every pass (two where some blocks attend in windows), so the tower waits for
    the device once, not once per block and pass."""
    key = id(cu_seqlens)
    cached = _LENGTHS.get(key)
    if cached is not None and cached[0] is cu_seqlens:
        return cached[1]
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    if len(_LENGTHS) >= 8:
        _LENGTHS.clear()
    _LENGTHS[key] = (cu_seqlens, lengths)  # the tensor is held, so its id cannot be reused while cached
    return lengths


class QuickGELU(nn.Module):
    """transformers' ``QuickGELUActivation``, ``x * sigmoid(1.702 x)``, in one temporary instead of two (the
    values are the same)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 1.702).mul_(x)


class StillPatchEmbed(nn.Module):
    """Qwen's patch embedding for still frames, the processor's normalization folded in: frames as the
    processor resized them (N, H, W, 3), float values 0-255, through a 2D convolution of stride
    ``patch_size`` whose kernel is the 3D convolution's summed over its temporal taps and scaled per
    channel by the normalization; the patches' embeddings in the processor's merge-window order
    (N x patches, embed_dim). The processor's ``(M, 3 x temporal x patch^2)`` patches (a video, or the
    reference path) still go through the family's own forward. It holds the same ``proj`` (the weights
    keep their names) and the folded kernel as a buffer that is not saved.

    The normalization ``x * scale + shift`` is ``(x - center) * scale`` with ``center = -shift / scale``
    (the mean in pixel values): the frame is centred in float32 first, so what is multiplied is the
    normalized value's size, as in transformers' path, and the bias is the convolution's own, not added
    to a large constant that the products then cancel (folding the shift into the bias and rounding both
    to bf16 made near-grey frames' embeddings 5-50x less accurate than transformers' bf16 path). The
    convolution runs in float32 with the folded kernel in float32 (a kernel summed over the temporal taps
    and scaled is no bf16 number) and its output takes the model's dtype: the embedding is as accurate as
    the float32 rounding of the normalized frame, ahead of transformers' bf16 path, which rounds the
    normalized frame to bf16 (a test compares both with a float64 reference). It is 0.1% of the tower's
    work."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    center: torch.Tensor

    def __init__(self, embed: Any, merge_size: int, scale: torch.Tensor, shift: torch.Tensor):
        super().__init__()
        self.proj: nn.Conv3d = embed.proj
        for name in ("in_channels", "temporal_patch_size", "patch_size", "embed_dim"):
            setattr(self, name, getattr(embed, name))  # what the family's forward reads
        self.merge_size = int(merge_size)
        self.stride = int(embed.patch_size)
        self._family_forward = type(embed).forward
        kernel = self.proj.weight.detach().double().sum(dim=2)  # (embed_dim, channels, patch, patch)
        scale, shift = (v.to(kernel.device, torch.float64) for v in (scale, shift))
        self.register_buffer("weight", (kernel * scale[None, :, None, None]).float(), persistent=False)
        bias = None if self.proj.bias is None else self.proj.bias.detach().float()
        self.register_buffer("bias", bias, persistent=False)
        self.register_buffer("center", (-shift / scale).float(), persistent=False)
        self.register_buffer("video_weight", None, persistent=False)
        self.register_buffer("video_center", None, persistent=False)

    def fold_video(self, scale: torch.Tensor, shift: torch.Tensor) -> None:
        """Folds a video processor's normalization (``x * scale + shift`` per channel) into the kernel of frames
        taken ``temporal_patch_size`` at a time (a Qwen video's temporal patch): the 3D convolution's taps side by
        side over the channels, (E, taps x channels, patch, patch), so that one 2D convolution of the frames'
        channels stacked embeds each group of frames."""
        kernel = self.proj.weight.detach().double().permute(0, 2, 1, 3, 4)  # (E, taps, channels, patch, patch)
        scale, shift = (v.to(kernel.device, torch.float64) for v in (scale, shift))
        folded = (kernel * scale[None, None, :, None, None]).flatten(1, 2).float()
        self.video_weight, self.video_center = folded, (-shift / scale).float()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.dim() == 5 and self.video_weight is not None:  # groups of frames (N, taps, H, W, 3)
            frames = (hidden_states.float() - self.video_center).permute(0, 1, 4, 2, 3).flatten(1, 2)
            return self._merge_order(F.conv2d(frames, self.video_weight, self.bias, stride=self.stride))
        if hidden_states.dim() != 4:
            return self._family_forward(self, hidden_states)
        frames = (hidden_states.float() - self.center).permute(0, 3, 1, 2)  # channels last in memory
        return self._merge_order(F.conv2d(frames, self.weight, self.bias, stride=self.stride))  # float32

    def _merge_order(self, out: torch.Tensor) -> torch.Tensor:
        """The convolution's output (N, E, gh, gw) in the model's dtype, in the processor's merge-window order."""
        n, e, gh, gw = out.shape
        m = self.merge_size
        out = out.to(self.proj.weight.dtype).permute(0, 2, 3, 1).reshape(n, gh // m, m, gw // m, m, e).transpose(2, 3)
        return out.reshape(n * gh * gw, e)


class QwenAdapter:
    """The Qwen families' part of a judge for frames of ``image_size`` (see the module docstring)."""

    def __init__(self, model: Any, processor: Any, image_size: tuple[int, int]):
        self.model = model
        self.image_processor = ip = processor.image_processor
        self.image_size = image_size
        self.visual = visual = model.model.visual
        # The processor's rescale and normalization, x * scale + shift per channel, which the patch embedding
        # folds in.
        mean = torch.tensor(ip.image_mean if ip.do_normalize else [0.0] * 3, dtype=torch.float64)
        std = torch.tensor(ip.image_std if ip.do_normalize else [1.0] * 3, dtype=torch.float64)
        rescale = ip.rescale_factor if ip.do_rescale else 1.0
        self.scale, self.shift = rescale / std, -mean / std
        if not isinstance(visual.patch_embed, StillPatchEmbed):
            visual.patch_embed = StillPatchEmbed(visual.patch_embed, visual.spatial_merge_size, self.scale, self.shift)
        from transformers.activations import QuickGELUActivation

        from vlmrm_fast.models.judge.contract import check_contract, vision_attention_problems

        check_contract(type(model).__name__, model.config.model_type, vision_attention_problems(visual.blocks[0].attn))
        for block in visual.blocks:
            sdpa = visual.config._attn_implementation == "sdpa"  # flash attention takes the packed layout itself
            if sdpa and not isinstance(block.attn, PackedVisionAttention):
                block.attn = PackedVisionAttention(block.attn)
            if isinstance(getattr(block.mlp, "act", None), QuickGELUActivation):  # Qwen2-VL's
                block.mlp.act = QuickGELU()
        height, width = self._resized_size(image_size)
        self.pixel_shape = (height, width, 3)
        self.grid = (1, height // ip.patch_size, width // ip.patch_size)  # (temporal, height, width) patches
        self._vision_inputs: dict[tuple[tuple[int, int, int], int, torch.device], dict[str, Any]] = {}
        self.video_processor: Any = getattr(processor, "video_processor", None)
        self.frames_per_token = 1  # a video's frames per temporal patch, from its processor
        if self.video_processor is not None:
            vp = self.video_processor
            mean = torch.tensor(vp.image_mean if vp.do_normalize else [0.0] * 3, dtype=torch.float64)
            std = torch.tensor(vp.image_std if vp.do_normalize else [1.0] * 3, dtype=torch.float64)
            visual.patch_embed.fold_video((vp.rescale_factor if vp.do_rescale else 1.0) / std, -mean / std)
            self.frames_per_token = int(vp.temporal_patch_size)

    def _resized_size(self, size: tuple[int, int]) -> tuple[int, int]:
        ip = self.image_processor
        if not ip.do_resize:
            return size
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        return smart_resize(*size, ip.patch_size * ip.merge_size, ip.size.shortest_edge, ip.size.longest_edge)

    def pixels(self, frames: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        ip = self.image_processor
        images = frames
        if ip.do_resize and tuple(images.shape[-2:]) != self.pixel_shape[:2]:
            images = ip.resize(images, size=ip.size, resample=ip.resample, factor=ip.patch_size * ip.merge_size)
        if out is None:
            out = torch.empty((images.shape[0], *self.pixel_shape), dtype=torch.float32, device=images.device)
        return out.copy_(images.permute(0, 2, 3, 1))  # uint8 -> float, channels last: whole numbers, exact in bf16

    def as_processor_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """Pixels (N, H, W, 3) -> the processor's normalized patches (N x patches, 3 x temporal x patch^2): merge
        window by merge window, then channel, temporal copy, row and column of a patch."""
        ip = self.image_processor
        n, h, w, c = pixels.shape
        p, m, t = ip.patch_size, ip.merge_size, ip.temporal_patch_size
        scale, shift = (v.to(pixels.device, torch.float32) for v in (self.scale, self.shift))
        normalized = torch.addcmul(shift, pixels.float(), scale)  # in float32, as the processor computes it
        patches = normalized.permute(0, 3, 1, 2).reshape(n, c, h // p // m, m, p, w // p // m, m, p)
        still = patches.permute(0, 2, 5, 3, 6, 1, 4, 7).reshape(-1, c, 1, p * p)
        return still.expand(-1, -1, t, -1).reshape(still.shape[0], -1)

    def vision_inputs(
        self, n: int, device: torch.device, grid_thw: tuple[int, int, int] | None = None
    ) -> dict[str, Any]:
        """The vision tower's inputs that depend only on the grid of ``n`` frames (``grid_thw`` each, default the
        judge's frame's; made once per batch size, by transformers' helpers): ``image_grid_thw`` and the
        precomputed tensors its forward takes as keywords."""
        grid_thw = grid_thw or self.grid
        key = (grid_thw, n, device)
        if key not in self._vision_inputs:
            from transformers import vision_utils as vu
            from transformers.utils.generic import get_max_seqlen

            visual = self.visual
            grid = torch.tensor([grid_thw] * n, dtype=torch.long, device=device)
            merge = visual.spatial_merge_size
            inputs: dict[str, Any] = {"image_grid_thw": grid}
            inputs["position_ids"] = vu.get_vision_position_ids(grid, merge)
            inputs["cu_seqlens"], inputs["max_seqlen"] = vu.get_vision_attention_seqlens(grid, visual.config)
            if hasattr(visual, "fullatt_block_indexes"):  # Qwen2.5-VL: windows of attention in most blocks
                inputs["window_index"], windows = vu.get_vision_window_index(
                    grid, merge, visual.window_size, visual.patch_size
                )
                inputs["cu_window_seqlens"] = windows
                inputs["max_window_seqlen"] = get_max_seqlen(windows, visual.config)
            if hasattr(visual, "pos_embed"):  # Qwen3-VL: a learned position grid resampled to the frame's
                inputs["interp_indices"], inputs["interp_weights"] = vu.get_vision_interpolation_indices_and_weights(
                    grid,
                    visual.num_grid_per_side,
                    mode=visual.interpolation_mode,
                    align_corners=visual.interpolation_align_corners,
                    spatial_merge_size=merge,
                )
            self._vision_inputs[key] = {k: v for k, v in inputs.items() if v is not None}
        return self._vision_inputs[key]

    def encode(self, pixels: torch.Tensor) -> Any:
        inputs = self.vision_inputs(pixels.shape[0], pixels.device)
        return self.model.model.get_image_features(pixel_values=pixels, return_dict=True, **inputs)

    # ------------------------------------------------------------------ video: frames in groups
    def video_frames(self, frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """uint8 frames (N, 3, H, W) on the device -> a video's frames as its processor resizes them to ``size``
        (the height and width its grid gives), float, channels last (N, h, w, 3)."""
        from transformers.image_processing_backends import TorchvisionBackend
        from transformers.image_utils import SizeDict

        vp = self.video_processor
        if vp.do_resize and tuple(frames.shape[-2:]) != tuple(size):
            frames = TorchvisionBackend.resize(
                vp, frames, SizeDict(height=size[0], width=size[1]), resample=vp.resample
            )
        return frames.permute(0, 2, 3, 1).float()

    def encode_frame_groups(self, groups: torch.Tensor) -> Any:
        """Groups of a video's frames (N, frames_per_token, h, w, 3) (:meth:`video_frames`) -> the vision tower's output,
        one item per group: a video's tower attends within each group of frames, so a video's output is its groups'
        outputs one after another."""
        n, _, h, w, _ = groups.shape
        grid = (1, h // self.image_processor.patch_size, w // self.image_processor.patch_size)
        inputs = self.vision_inputs(n, groups.device, grid)
        return self.model.model.get_image_features(pixel_values=groups, return_dict=True, **inputs)

    def positions(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        grids = {
            key: inputs[key] for key in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if key in inputs
        }
        positions, _ = self.model.model.get_rope_index(
            inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"], **grids
        )
        return positions
