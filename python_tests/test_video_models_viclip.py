"""ViCLIP against a plain reference of the released architecture, loaded from a checkpoint in the
released layout; its tokens against the released tokenizer's rule; its preprocessing against the
released test transform.

The reference below is written as InternVideo's ViCLIP code lays the model out (module for module, so
its state dict has the released checkpoints' key names), as plainly as possible: ``nn.Conv3d`` with a
one-frame kernel, each frame's patches given their spatial and temporal position embeddings one frame at
a time, the tokens in the released order (patch-major, frames innermost), torch's
``nn.MultiheadAttention`` on sequence-first tensors, an explicit additive causal mask for the text.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np
import pytest
import torch
from kernel_references import random_frames
from torch import nn
from torchvision import transforms

from vlmrm_fast.failures import expected_failure
from vlmrm_fast.frames.preprocess import FramePreprocessor
from vlmrm_fast.models.clip.prompts import PromptTruncatedWarning
from vlmrm_fast.models.video import flops_per_window, load_video_model, video_model_info
from vlmrm_fast.models.video.viclip import MODELS, ViCLIPConfig, tokens_per_window

TINY = "viclip-tiny"
ATOL = 1e-4  # fp32, the same weights: only the summation order differs


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class Block(nn.Module):
    def __init__(self, width: int, heads: int, mask: torch.Tensor | None = None):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            OrderedDict(c_fc=nn.Linear(width, 4 * width), gelu=QuickGELU(), c_proj=nn.Linear(4 * width, width))
        )
        self.ln_2 = nn.LayerNorm(width)
        self.mask = mask

    def forward(self, x):  # (L, N, W)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, need_weights=False, attn_mask=self.mask)[0]
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, mask: torch.Tensor | None = None):
        super().__init__()
        self.resblocks = nn.Sequential(*[Block(width, heads, mask) for _ in range(layers)])

    def forward(self, x):
        return self.resblocks(x)


class ReferenceVision(nn.Module):
    def __init__(self, c: ViCLIPConfig):
        super().__init__()
        w, p = c.vision_width, c.patch_size
        self.conv1 = nn.Conv3d(3, w, (1, p, p), (1, p, p), bias=False)
        self.class_embedding = nn.Parameter(torch.empty(w))
        self.positional_embedding = nn.Parameter(torch.empty((c.image_size // p) ** 2 + 1, w))
        self.temporal_positional_embedding = nn.Parameter(torch.empty(1, c.num_frames, w))
        self.ln_pre = nn.LayerNorm(w)
        self.transformer = Transformer(w, c.vision_layers, c.vision_heads)
        self.ln_post = nn.LayerNorm(w)
        self.proj = nn.Parameter(torch.empty(w, c.embed_dim))

    def forward(self, video):  # (N, T, 3, S, S)
        x = self.conv1(video.permute(0, 2, 1, 3, 4))  # (N, W, T, g, g)
        n, _, t = x.shape[:3]
        per_frame = []
        for i in range(t):
            tokens = x[:, :, i].flatten(2).transpose(1, 2)  # (N, g*g, W): this frame's patches
            tokens = tokens + self.positional_embedding[1:] + self.temporal_positional_embedding[0, i]
            per_frame.append(tokens)
        patches = torch.stack(per_frame, dim=2).flatten(1, 2)  # patch-major, frames innermost
        cls = (self.class_embedding + self.positional_embedding[0]).expand(n, 1, -1)
        x = self.ln_pre(torch.cat([cls, patches], dim=1))
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        return self.ln_post(x[:, 0]) @ self.proj


class ReferenceText(nn.Module):
    def __init__(self, c: ViCLIPConfig):
        super().__init__()
        mask = torch.full((c.context_length, c.context_length), float("-inf")).triu(1)
        self.transformer = Transformer(c.text_width, c.text_layers, c.text_heads, mask)
        self.token_embedding = nn.Embedding(c.vocab_size, c.text_width)
        self.positional_embedding = nn.Parameter(torch.empty(c.context_length, c.text_width))
        self.ln_final = nn.LayerNorm(c.text_width)
        self.text_projection = nn.Parameter(torch.empty(c.text_width, c.embed_dim))

    def forward(self, tokens):
        x = self.token_embedding(tokens) + self.positional_embedding
        x = self.ln_final(self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2))
        return x[torch.arange(len(tokens)), tokens.argmax(dim=-1)] @ self.text_projection


class ReferenceViCLIP(nn.Module):
    def __init__(self, c: ViCLIPConfig):
        super().__init__()
        self.vision_encoder = ReferenceVision(c)
        self.text_encoder = ReferenceText(c)
        self.temp = nn.Parameter(torch.tensor(1 / 100.0))


@functools.cache
def reference(seed: int = 0) -> ReferenceViCLIP:
    """The reference with random weights: every tensor drawn, LayerNorm gains around 1."""
    model = ReferenceViCLIP(MODELS[TINY].config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            noise = torch.randn(tensor.shape, generator=generator)
            tensor.copy_(1 + 0.1 * noise if name.endswith(("ln_1.weight", "ln_2.weight")) else 0.2 * noise)
        model.temp.fill_(0.05)
    return model.eval()


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("viclip") / "ViClip-tiny.pth"
    torch.save({"model": reference().state_dict()}, path)  # the released files wrap the state dict so
    return str(path)


def released_tokens(prompts: list[str], context: int = 32) -> torch.Tensor:
    """The released tokenizer's rule: start token, the BPE tokens, end token; cut to the context with the
    end token last; zeros after."""
    import open_clip

    bpe = open_clip.tokenizer.SimpleTokenizer()
    start, end = bpe.encoder["<start_of_text>"], bpe.encoder["<end_of_text>"]
    out = torch.zeros(len(prompts), context, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        tokens = [start, *bpe.encode(prompt), end]
        if len(tokens) > context:
            tokens = tokens[:context]
            tokens[-1] = end
        out[row, : len(tokens)] = torch.tensor(tokens)
    return out


def windows(n: int = 3, seed: int = 1) -> torch.Tensor:
    c = MODELS[TINY].config
    return torch.randn(n, c.num_frames, 3, c.image_size, c.image_size, generator=torch.Generator().manual_seed(seed))


def test_the_reference_has_the_released_key_names():
    keys = set(reference().state_dict())
    assert {
        "temp",
        "vision_encoder.conv1.weight",
        "vision_encoder.temporal_positional_embedding",
        "vision_encoder.transformer.resblocks.1.attn.in_proj_weight",
        "vision_encoder.transformer.resblocks.1.attn.out_proj.bias",
        "vision_encoder.transformer.resblocks.0.mlp.c_fc.weight",
        "vision_encoder.proj",
        "text_encoder.token_embedding.weight",
        "text_encoder.transformer.resblocks.0.ln_2.bias",
        "text_encoder.text_projection",
    } <= keys
    assert tuple(reference().state_dict()["vision_encoder.conv1.weight"].shape) == (32, 3, 1, 16, 16)


def test_a_released_checkpoint_maps_name_for_name_and_encodes_windows_as_the_reference(released):
    model = load_video_model(TINY, checkpoint=released)
    ref = reference()
    x = windows()
    with torch.no_grad():
        expected = torch.nn.functional.normalize(ref.vision_encoder(x), dim=-1)
    torch.testing.assert_close(model.encode_video(x), expected, atol=ATOL, rtol=0)
    assert model.logit_scale == pytest.approx(20.0)  # 1 / temp


def test_prompts_encode_as_the_reference_with_the_released_tokens(released):
    model = load_video_model(TINY, checkpoint=released)
    long = " ".join(["a humanoid robot doing a cartwheel"] * 8)  # far beyond the 32-token context
    prompts = ["a humanoid robot kneeling", "A Humanoid  robot, doing the splits!", long]
    torch.testing.assert_close(model.tokenizer(prompts), released_tokens(prompts))
    with torch.no_grad():
        expected = torch.nn.functional.normalize(reference().text_encoder(released_tokens(prompts)), dim=-1)
    with pytest.warns(PromptTruncatedWarning, match="the text encoder reads 32"):
        got = model.encode_text(prompts)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


def test_a_checkpoint_with_other_keys_is_refused_naming_them(tmp_path):
    state = dict(reference().state_dict())
    state.pop("vision_encoder.proj")
    state["vision_encoder.head.weight"] = torch.zeros(2)
    path = tmp_path / "renamed.pth"
    torch.save({"model": state}, path)
    with pytest.raises(ValueError) as exc:
        load_video_model(TINY, checkpoint=str(path))
    text = str(exc.value)
    assert "\n" not in text and expected_failure(exc.value)
    assert text == (
        f"checkpoint {str(path)!r} does not fit viclip-tiny: 1 missing key (vision_encoder.proj), 1 unexpected key "
        "(vision_encoder.head.weight); give a released ViCLIP file ({'model': vision_encoder.*, text_encoder.*, temp}) "
        "of viclip-tiny's size"
    )


def test_a_checkpoint_of_another_size_names_the_model_it_fits(tmp_path):
    # The keys of a ViT-B/16 ViCLIP (12 layers, 768 wide, 16 px patches), with small stand-in tensors besides.
    b16 = {f"vision_encoder.transformer.resblocks.{i}.ln_1.weight": torch.zeros(1) for i in range(12)}
    b16["vision_encoder.conv1.weight"] = torch.zeros(768, 3, 1, 16, 16)
    path = tmp_path / "b16.pth"
    torch.save({"model": b16}, path)
    with pytest.raises(
        ValueError, match=r"does not fit viclip-tiny: .* it holds viclip-b16's weights: load it as 'viclip-b16'"
    ):
        load_video_model(TINY, checkpoint=str(path))
    state = dict(reference().state_dict())
    state["vision_encoder.proj"] = torch.zeros(32, 8)
    torch.save(state, path)  # unwrapped is read too
    with pytest.raises(ValueError, match=r"vision_encoder.proj has shape \(32, 8\), expected \(32, 32\)"):
        load_video_model(TINY, checkpoint=str(path))


def smooth_frames(height: int, width: int) -> np.ndarray:
    """A picture without noise: sines in each channel (as rendered scenes are, away from their edges)."""
    y, x = np.mgrid[0:height, 0:width]
    channels = [np.sin(x / 7.0 + c) * np.cos(y / 11.0) * 120 + 128 for c in range(3)]
    return np.ascontiguousarray(np.stack(channels, axis=-1).astype(np.uint8)[None])


def test_preprocessing_is_the_paper_repositorys_and_the_released_test_transform():
    """ViCLIP's frames are squashed to the input size by bicubic interpolation without antialiasing, with
    ImageNet's mean and std: the paper's repository's ViCLIP transform (torchvision's Resize((S, S)) on
    float frames; ``PreprocessSpec.paper_transform``), to the FMA rounding of PyTorch's vectorized
    kernels, and the released test transform as it ran before torchvision 0.17 antialiased tensors
    (the same on uint8 frames, rounded and clipped to uint8 after the resize). Frames of the input
    size are not resized: the same values."""
    spec = video_model_info(TINY).preprocess
    assert (spec.resize_mode, spec.interpolation, spec.mean) == ("paper", "bicubic", (0.485, 0.456, 0.406))
    released = transforms.Compose(
        [
            transforms.Resize(
                (spec.size, spec.size), interpolation=transforms.InterpolationMode.BICUBIC, antialias=False
            ),
            transforms.Lambda(lambda x: x.float().div(255.0)),
            transforms.Normalize(spec.mean, spec.std),
        ]
    )
    ours = FramePreprocessor(spec, torch.device("cpu"))

    def grey_levels(frames: np.ndarray) -> torch.Tensor:
        expected = released(torch.from_numpy(frames).permute(0, 3, 1, 2))
        return (ours(frames) - expected).abs() * torch.tensor(spec.std).view(3, 1, 1) * 255

    same = random_frames(4, spec.size, spec.size, seed=0)
    assert float(grey_levels(same).max()) < 1e-3
    for height, width in ((100, 80), (480, 480)):
        noise = random_frames(2, height, width, seed=1)
        torch.testing.assert_close(ours(noise), spec.paper_transform()(noise), atol=2e-4, rtol=0)
        assert float(grey_levels(smooth_frames(height, width)).max()) <= 0.5 + 1e-3  # uint8 rounding
        # on noise, bicubic overshoot past 0 and 255 is clipped there, kept here
        assert float(grey_levels(noise).mean()) < 1


def test_flops_of_a_window_at_224_px():
    """One window attends over all 8 frames' tokens at once: ~0.36 TFLOP for ViT-B/16, ~1.7 for ViT-L/14 through
    the whole tower; the last block computes the class token's output alone (the window's embedding), which
    leaves 0.333 and 1.593."""
    assert tokens_per_window("viclip-b16") == 8 * 196 + 1 and tokens_per_window("viclip-l14") == 8 * 256 + 1
    assert flops_per_window("viclip-b16") == pytest.approx(0.333e12, rel=0.01)
    assert flops_per_window("viclip-l14") == pytest.approx(1.593e12, rel=0.01)
