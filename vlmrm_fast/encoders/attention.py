"""Self-attention of open_clip's image tower as one QKV linear layer, scaled_dot_product_attention
and the output linear layer, with the layouts spelled out.

open_clip's default ViT block holds an ``nn.MultiheadAttention``. In eager inference torch takes
that module's fast path (``torch._native_multi_head_attention``), but under ``torch.compile`` dynamo
traces the general ``F.multi_head_attention_forward`` instead: it transposes the input to
sequence-first, copies the packed QKV projection into a contiguous (3, L, N, E) tensor, runs
``scaled_dot_product_attention`` and transposes back. :class:`FusedSelfAttention` computes the same
with views only: the (N, L, 3E) projection is read in place as q, k, v of shape (N, H, L, E/H),
and the attention output is read back as (N, L, E) for the output projection.

Its two projections are ``nn.Linear`` modules (the MultiheadAttention keeps the QKV weight as a
bare parameter), so the FP8 conversion (:mod:`vlmrm_fast.encoders.fp8`) reaches all four linear
layers of a block. The rewrite shares the original parameters; it changes no weight.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn


class FusedSelfAttention(nn.Module):
    """Drop-in for a batch-first, self-attention-only ``nn.MultiheadAttention`` (no masks, no bias_k/v)."""

    def __init__(self, mha: nn.MultiheadAttention):
        super().__init__()
        reason = _unsupported(mha)
        if reason:
            raise ValueError(f"cannot fuse this MultiheadAttention: {reason}")
        self.embed_dim, self.num_heads = mha.embed_dim, mha.num_heads
        self.head_dim = mha.embed_dim // mha.num_heads
        weight = mha.in_proj_weight
        self.qkv = nn.Linear(
            self.embed_dim,
            3 * self.embed_dim,
            bias=mha.in_proj_bias is not None,
            device=weight.device,
            dtype=weight.dtype,
        )
        self.qkv.weight = mha.in_proj_weight  # shared, not copied
        if mha.in_proj_bias is not None:
            self.qkv.bias = mha.in_proj_bias
        self.out_proj = mha.out_proj

    def forward(self, query, key=None, value=None, need_weights: bool = False, attn_mask=None, **unused):
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError("FusedSelfAttention computes self-attention only (key and value must be the query)")
        if attn_mask is not None or need_weights:
            raise ValueError("FusedSelfAttention takes no attention mask and returns no weights")
        n, length, _ = query.shape
        qkv = self.qkv(query).view(n, length, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (N, H, L, E/H) views of the projection
        out = F.scaled_dot_product_attention(q, k, v)
        out = out.transpose(1, 2).reshape(n, length, self.embed_dim)
        return self.out_proj(out), None

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


def _unsupported(mha: nn.MultiheadAttention) -> str | None:
    if not mha.batch_first:
        return "it is not batch_first"
    if not mha._qkv_same_embed_dim or mha.in_proj_weight is None:
        return "q, k and v have separate projection weights"
    if mha.bias_k is not None or mha.bias_v is not None or mha.add_zero_attn:
        return "it has bias_k/bias_v or add_zero_attn"
    if mha.embed_dim % mha.num_heads:
        return "embed_dim is not a multiple of num_heads"
    return None


def fuse_attention(visual: nn.Module) -> int:
    """Replaces, in place, every self-attention ``nn.MultiheadAttention`` of the tower's transformer
    blocks (open_clip's ``block.attn``) by a :class:`FusedSelfAttention`; returns how many.

    Blocks of other kinds (open_clip's CustomResidualAttentionBlock already calls
    ``scaled_dot_product_attention``; attentional poolers attend across) are left as they are.
    """
    blocks = getattr(getattr(visual, "transformer", None), "resblocks", None) or ()
    replaced = 0
    for block in blocks:
        attn = getattr(block, "attn", None)
        if isinstance(attn, nn.MultiheadAttention) and not hasattr(block, "ln_1_kv") and _unsupported(attn) is None:
            block.attn = FusedSelfAttention(attn)
            replaced += 1
    return replaced
