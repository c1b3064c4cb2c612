"""ViCLIP (InternVideo's video CLIP, trained on InternVid), written here from its architecture.

The video tower is CLIP's vision transformer made spatio-temporal: each of the 8 frames is cut
into patches, each patch gets the spatial position embedding of its place and the temporal
embedding of its frame, and one class token attends over all frames' patches at once (8 x 196
tokens + 1 for ViT-B/16 at 224 px). The text tower is CLIP's, with a 32-token context and CLIP's
BPE tokenizer (open_clip's ``SimpleTokenizer``, whose vocabulary ships inside open_clip; the
released code tokenizes with the same vocabulary, cleaning and truncation).

The modules carry the parameter names of the released checkpoints (``ViClip-InternVid-10M-FLT.pth``
and the ``ViCLIP-{L,B}_*.pth`` files: ``{"model": state_dict}`` of ``vision_encoder.*``,
``text_encoder.*`` and ``temp``), so a checkpoint maps onto them name for name. Only the attention
differs in form (one fused scaled-dot-product call instead of ``nn.MultiheadAttention``, reading
the same ``in_proj``/``out_proj`` weights) and the token order (frame-major here, patch-major
there: attention does not depend on the order).
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.nn.functional as F
from open_clip.constants import IMAGENET_MEAN, IMAGENET_STD
from torch import nn

from vlmrm_fast.frames.preprocess import PreprocessSpec
from vlmrm_fast.models.random_init import _LocalGenerator
from vlmrm_fast.models.video.base import VideoModel, VideoModelInfo


@dataclasses.dataclass(frozen=True)
class ViCLIPConfig:
    image_size: int
    patch_size: int
    vision_width: int
    vision_layers: int
    vision_heads: int
    embed_dim: int  # the video tower's output and the text projection's
    text_width: int
    text_layers: int
    text_heads: int
    num_frames: int = 8
    context_length: int = 32
    vocab_size: int = 49408  # CLIP's BPE: 49,152 merges and bytes + start and end tokens


@dataclasses.dataclass(frozen=True)
class Entry:
    info: VideoModelInfo
    config: ViCLIPConfig


def _entry(name: str, config: ViCLIPConfig, *, tiny: bool = False) -> Entry:
    # The released code's test transform as it ran (torchvision before 0.17 resized tensors without antialiasing),
    # and the paper's repository's: a squash to 224 x 224 by bicubic interpolation without antialiasing, ImageNet's
    # mean and std (docs/video-models.md).
    preprocess = PreprocessSpec(
        size=config.image_size, mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="bicubic", resize_mode="paper"
    )
    patches = (config.image_size // config.patch_size) ** 2
    info = VideoModelInfo(
        name,
        config.num_frames,
        preprocess,
        embed_dim=config.embed_dim,
        tiny=tiny,
        frame_features=(patches, config.vision_width),  # a frame's patch embeddings, with their places
    )
    return Entry(info, config)


MODELS: dict[str, Entry] = {
    entry.info.name: entry
    for entry in (
        _entry("viclip-b16", ViCLIPConfig(224, 16, 768, 12, 12, 512, 512, 12, 8)),
        _entry("viclip-l14", ViCLIPConfig(224, 14, 1024, 24, 16, 768, 768, 12, 12)),
        # A few thousand parameters besides the token table: tests and smoke runs.
        _entry("viclip-tiny", ViCLIPConfig(64, 16, 32, 2, 2, 32, 32, 2, 2), tiny=True),
    )
}


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 1.702).mul_(x)  # x * sigmoid(1.702 x), in one temporary


class Attention(nn.Module):
    """Multi-head self-attention holding ``nn.MultiheadAttention``'s weights (``in_proj_*``, ``out_proj``)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.randn(3 * width, width) * width**-0.5)
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width))
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, causal: bool, outputs: int | None = None) -> torch.Tensor:
        """(N, L, W) -> (N, L, W); with ``outputs``, only the first ``outputs`` tokens' (N, outputs, W), each
        still attending to every token (not with ``causal``)."""
        n, length, width = x.shape
        heads, dim = self.heads, width // self.heads
        if outputs is None:
            qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias).view(n, length, 3, heads, dim)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
        else:
            assert not causal
            weight, bias = self.in_proj_weight, self.in_proj_bias
            kv = F.linear(x, weight[width:], bias[width:]).view(n, length, 2, heads, dim)
            k, v = kv.permute(2, 0, 3, 1, 4)
            q = F.linear(x[:, :outputs], weight[:width], bias[:width]).view(n, outputs, heads, dim).transpose(1, 2)
            length = outputs
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out_proj(out.transpose(1, 2).reshape(n, length, width))


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.gelu = QuickGELU()
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor, causal: bool = False, outputs: int | None = None) -> torch.Tensor:
        """(N, L, W) -> (N, L, W), or the first ``outputs`` tokens' (N, outputs, W) (see :class:`Attention`)."""
        x = (x if outputs is None else x[:, :outputs]) + self.attn(self.ln_1(x), causal, outputs)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int):
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualAttentionBlock(width, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor, causal: bool = False, outputs: int | None = None) -> torch.Tensor:
        """(N, L, W) -> (N, L, W); with ``outputs``, the first ``outputs`` tokens' (N, outputs, W) only, which the
        last block computes alone (the others' outputs there would be read by no one)."""
        last = len(self.resblocks) - 1
        for i, block in enumerate(self.resblocks):
            x = block(x, causal, outputs if i == last else None)
        return x


class PatchEmbedding(nn.Module):
    """The released tower's ``Conv3d`` with a kernel of one frame, run as a 2D convolution of each frame:
    its weight keeps the released (W, 3, 1, p, p) shape."""

    def __init__(self, width: int, patch: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, 3, 1, patch, patch) * (3 * patch * patch) ** -0.5)
        self.patch = patch

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """(M, 3, S, S) -> (M, g*g, W)"""
        return F.conv2d(frames, self.weight.squeeze(2), stride=self.patch).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    """The video tower: (N, T, 3, S, S) -> (N, embed_dim)."""

    def __init__(self, config: ViCLIPConfig):
        super().__init__()
        width, patch = config.vision_width, config.patch_size
        grid = config.image_size // patch
        scale = width**-0.5
        self.conv1 = PatchEmbedding(width, patch)
        self.class_embedding = nn.Parameter(torch.randn(width) * scale)
        self.positional_embedding = nn.Parameter(torch.randn(grid * grid + 1, width) * scale)
        self.temporal_positional_embedding = nn.Parameter(torch.randn(1, config.num_frames, width) * scale)
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Transformer(width, config.vision_layers, config.vision_heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(torch.randn(width, config.embed_dim) * scale)

    def frame_features(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames (M, 3, S, S) -> their patches' embeddings with the embedding of each patch's place (M, g*g, W):
        all the tower computes of a frame before the frames of its window meet."""
        return self.conv1(frames) + self.positional_embedding[1:]

    def window_features(self, patches: torch.Tensor) -> torch.Tensor:
        """Windows of :meth:`frame_features` (N, T, g*g, W), oldest first -> (N, embed_dim)."""
        n, t, count, width = patches.shape
        x = torch.empty((n, 1 + t * count, width), dtype=patches.dtype, device=patches.device)
        x[:, 0] = self.class_embedding + self.positional_embedding[0]  # the class token, then every frame's patches
        torch.add(patches, self.temporal_positional_embedding.unsqueeze(2), out=x[:, 1:].view(n, t, count, width))
        x = self.transformer(self.ln_pre(x), outputs=1)  # the class token's output is the window's
        return self.ln_post(x[:, 0]) @ self.proj

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        n, t = pixels.shape[:2]
        return self.window_features(self.frame_features(pixels.flatten(0, 1)).unflatten(0, (n, t)))


class TextTransformer(nn.Module):
    """CLIP's text tower with a causal mask, read at the end token: (P, context) tokens -> (P, embed_dim)."""

    def __init__(self, config: ViCLIPConfig):
        super().__init__()
        width = config.text_width
        self.token_embedding = nn.Embedding(config.vocab_size, width)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        self.positional_embedding = nn.Parameter(torch.randn(config.context_length, width) * 0.01)
        self.transformer = Transformer(width, config.text_layers, config.text_heads)
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.randn(width, config.embed_dim) * width**-0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(tokens) + self.positional_embedding
        x = self.ln_final(self.transformer(x, causal=True))
        # The end token has the highest id of CLIP's vocabulary; padding is 0.
        return x[torch.arange(x.shape[0], device=x.device), tokens.argmax(dim=-1)] @ self.text_projection


class ViCLIP(VideoModel):
    def __init__(self, info: VideoModelInfo, config: ViCLIPConfig):
        super().__init__()
        import open_clip

        self.info = info
        self.config = config
        self.vision_encoder = VisionTransformer(config)
        self.text_encoder = TextTransformer(config)
        self.temp = nn.Parameter(torch.tensor(0.01))  # the contrastive temperature: logits = cos / temp
        self.tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=config.context_length)

    @property
    def logit_scale(self) -> float:  # type: ignore[override]
        return 1.0 / float(self.temp.detach().float())

    def frame_features(self, frames: torch.Tensor) -> torch.Tensor:
        return self.vision_encoder.frame_features(frames)

    def window_features(self, features: torch.Tensor) -> torch.Tensor:
        return self.vision_encoder.window_features(features)

    def _text_features(self, prompts: list[str]) -> torch.Tensor:
        from vlmrm_fast.models.clip.prompts import check_prompt_lengths

        check_prompt_lengths(self.tokenizer, prompts)
        return self.text_encoder(self.tokenizer(prompts).to(self.device))


def load(name: str, *, checkpoint: str | os.PathLike | None, seed: int) -> ViCLIP:
    entry = MODELS[name]
    with _LocalGenerator(torch.Generator().manual_seed(seed)):
        model = ViCLIP(entry.info, entry.config)
    if checkpoint is not None:
        model.load_state_dict(read_checkpoint(model, checkpoint))
    return model


def read_checkpoint(model: ViCLIP, checkpoint: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict of a released ViCLIP file, checked against ``model`` name by name and shape by shape."""
    from vlmrm_fast.models.video.checkpoints import mismatch_message, read_state_dict

    name = model.info.name
    state = read_state_dict(checkpoint, name, wrapper_key="model")
    expected = model.state_dict()
    problem = mismatch_message(state, expected)
    if problem:
        fix = f"give a released ViCLIP file ({{'model': vision_encoder.*, text_encoder.*, temp}}) of {name}'s size"
        other = _size_of(state)
        if other and other != name:
            fix = f"it holds {other}'s weights: load it as {other!r}"
        raise ValueError(f"checkpoint {str(checkpoint)!r} does not fit {name}: {problem}; {fix}")
    return state


def _size_of(state: dict[str, torch.Tensor]) -> str | None:
    """The registered ViCLIP whose patch embedding and depth a state dict has, if any."""
    conv = state.get("vision_encoder.conv1.weight")
    if conv is None:
        return None
    layers = len({k.split(".")[3] for k in state if k.startswith("vision_encoder.transformer.resblocks.")})
    for name, entry in MODELS.items():
        c = entry.config
        if tuple(conv.shape) == (c.vision_width, 3, 1, c.patch_size, c.patch_size) and layers == c.vision_layers:
            return name
    return None


def tokens_per_window(name: str) -> int:
    """The tokens one window's class token attends over: every frame's patches, and itself."""
    c = MODELS[name].config
    return c.num_frames * (c.image_size // c.patch_size) ** 2 + 1
