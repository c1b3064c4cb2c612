"""X-CLIP (Microsoft's video CLIP) through Hugging Face transformers' ``XCLIPModel``: the optional
``video`` extra (``pip install 'vlmrm-fast[video]'``).

Each frame goes through CLIP's vision transformer on its own (with X-CLIP's cross-frame message
tokens), a small multi-frame integration transformer pools the frames' class tokens into the
video embedding, and the text embedding is conditioned on the video: a prompt generator attends
from each prompt's embedding to the window's patch features and adds the result. So X-CLIP's own
similarity between a window and a prompt uses a text embedding made for that window; what
``XCLIPModel.get_text_features`` gives (and :meth:`encode_text` here) is the text embedding
before the prompt, which the model never compared with videos in training.

A reward therefore takes the text embeddings per window from :meth:`encode_video_and_text` (the
model's ``text_embeds`` in ``XCLIPModel.forward``, for every prompt and window) and computes its
formula with each window's own target and baseline embeddings (docs/video-models.md).

Tokens: CLIP's BPE vocabulary through open_clip's ``SimpleTokenizer`` (it ships inside open_clip;
X-CLIP's released processor uses the same vocabulary through ``CLIPTokenizer``), with a 77-token
context. The text tower is read at the first end token behind a causal mask, so the padding
after it (0 here, the end token there) changes nothing.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from open_clip.constants import IMAGENET_MEAN, IMAGENET_STD

from vlmrm_fast.frames.preprocess import PreprocessSpec
from vlmrm_fast.models.errors import MissingDependencyError
from vlmrm_fast.models.random_init import _LocalGenerator
from vlmrm_fast.models.video.base import VideoModel, VideoModelInfo, check_prompts

EXTRA = "video"


@dataclasses.dataclass(frozen=True)
class Entry:
    info: VideoModelInfo
    text: dict[str, Any]  # XCLIPTextConfig's fields that differ from its defaults
    vision: dict[str, Any]  # XCLIPVisionConfig's
    top: dict[str, Any]  # XCLIPConfig's own (projection, prompt generator)
    hub_id: str | None  # where the published weights are


def _entry(name: str, text: dict, vision: dict, top: dict, hub_id: str | None, *, tiny: bool = False) -> Entry:
    size, frames = vision.get("image_size", 224), vision.get("num_frames", 8)
    # The released processor (VideoMAEImageProcessor as converted): the shortest side to the input size by
    # bilinear resampling, a centre crop, ImageNet's mean and std.
    preprocess = PreprocessSpec(
        size=size, mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="bilinear", resize_mode="shortest"
    )
    info = VideoModelInfo(
        name, frames, preprocess, embed_dim=top.get("projection_dim", 512), conditions_text=True, extra=EXTRA, tiny=tiny
    )
    return Entry(info, text, vision, top, hub_id)


_LARGE_TEXT = {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12}
_LARGE_VISION = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "mit_hidden_size": 768,
    "mit_intermediate_size": 3072,
}
MODELS: dict[str, Entry] = {
    entry.info.name: entry
    for entry in (
        _entry("xclip-base-patch32", {}, {"patch_size": 32}, {}, "microsoft/xclip-base-patch32"),
        _entry("xclip-base-patch16", {}, {"patch_size": 16}, {}, "microsoft/xclip-base-patch16"),
        _entry(
            "xclip-large-patch14",
            _LARGE_TEXT,
            {**_LARGE_VISION, "patch_size": 14},
            {"projection_dim": 768},
            "microsoft/xclip-large-patch14",
        ),
        _entry(
            "xclip-tiny",
            {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2},
            {
                "image_size": 64,
                "patch_size": 16,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "mit_hidden_size": 16,
                "mit_intermediate_size": 32,
                "mit_num_attention_heads": 2,
            },
            {"projection_dim": 16, "prompt_num_attention_heads": 2},
            None,
            tiny=True,
        ),
    )
}


def require_transformers(name: str) -> Any:
    """transformers, or one line naming the extra that brings it."""
    try:
        import transformers
    except ImportError as exc:
        raise MissingDependencyError(
            f"{name} needs transformers (X-CLIP is transformers' XCLIPModel), which is not installed: "
            f"pip install 'vlmrm-fast[{EXTRA}]' (from a checkout: pip install '.[{EXTRA}]')"
        ) from exc
    return transformers


def xclip_config(name: str) -> Any:
    """transformers' ``XCLIPConfig`` of the registered model ``name``."""
    transformers = require_transformers(name)
    entry = MODELS[name]
    return transformers.XCLIPConfig(text_config=dict(entry.text), vision_config=dict(entry.vision), **entry.top)


class XCLIP(VideoModel):
    def __init__(self, info: VideoModelInfo, model: Any):
        super().__init__()
        import open_clip

        self.info = info
        self.model = model
        context = int(model.config.text_config.max_position_embeddings)
        self.tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=context)

    @property
    def logit_scale(self) -> float:  # type: ignore[override]
        return float(self.model.logit_scale.detach().float().exp())

    def _frames(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, T, 3, S, S) -> the video embedding (N, D) before normalisation, and every frame's tokens."""
        n, t = pixels.shape[:2]
        vision = self.model.vision_model(pixel_values=pixels.flatten(0, 1))
        frames = self.model.visual_projection(vision.pooler_output).view(n, t, -1)
        return self.model.mit(frames).pooler_output, vision.last_hidden_state

    def window_features(self, features: torch.Tensor) -> torch.Tensor:
        return self._frames(features)[0]

    def _text_features(self, prompts: list[str]) -> torch.Tensor:
        from vlmrm_fast.models.clip.prompts import check_prompt_lengths

        check_prompt_lengths(self.tokenizer, prompts)
        tokens = self.tokenizer(prompts).to(self.device)
        return self.model.text_projection(self.model.text_model(input_ids=tokens).pooler_output)

    @torch.inference_mode()
    def encode_video_and_text(self, pixels: torch.Tensor, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows and prompts -> ``(N, D)`` video and ``(N, P, D)`` text embeddings, L2-normalised:
        each prompt's embedding made for each window by the prompt generator, as ``XCLIPModel.forward``
        computes them."""
        pixels, prompts = self.check_windows(pixels), check_prompts(prompts)
        n, t = pixels.shape[:2]
        model = self.model
        video, tokens = self._frames(pixels)
        patches = model.prompts_visual_layernorm(tokens[:, 1:]) @ model.prompts_visual_projection
        patches = patches.view(n, t, -1, patches.shape[-1]).mean(dim=1)  # the window's patch features
        text = self._text_features(prompts).unsqueeze(0).expand(n, -1, -1)
        text = text + model.prompts_generator(text, patches)
        return F.normalize(video, dim=-1), F.normalize(text, dim=-1)


def load(name: str, *, checkpoint: str | os.PathLike | None, seed: int) -> XCLIP:
    entry = MODELS[name]
    transformers = require_transformers(name)
    config = xclip_config(name)
    if checkpoint is None:
        with _LocalGenerator(torch.Generator().manual_seed(seed)):
            model = transformers.XCLIPModel(config)
    else:
        model = _from_pretrained(transformers, name, str(checkpoint))
        _check_config(name, model.config, config, str(checkpoint))
    model.eval()
    return XCLIP(entry.info, model)


def _from_pretrained(transformers: Any, name: str, checkpoint: str) -> Any:
    try:
        return transformers.XCLIPModel.from_pretrained(checkpoint)
    except OSError as exc:
        hub_id = MODELS[name].hub_id or "microsoft/xclip-base-patch32"
        raise OSError(
            f"X-CLIP checkpoint {checkpoint!r} is neither a folder of a saved XCLIPModel nor a hub repository in "
            f"the Hugging Face cache ({str(exc).strip().splitlines()[0][:160]}): download it where the hub is "
            f"reachable (hf download {hub_id}) or give the folder"
        ) from exc


_CHECKED = (
    ("vision_config", "image_size"),
    ("vision_config", "patch_size"),
    ("vision_config", "num_frames"),
    ("vision_config", "hidden_size"),
    ("vision_config", "num_hidden_layers"),
    ("text_config", "hidden_size"),
    ("projection_dim",),
)


def _check_config(name: str, loaded: Any, expected: Any, checkpoint: str) -> None:
    """A checkpoint of another X-CLIP than ``name`` is refused, naming the registered one it is."""

    def read(config: Any, path: tuple[str, ...]) -> Any:
        for part in path:
            config = getattr(config, part)
        return config

    differ = [".".join(p) for p in _CHECKED if read(loaded, p) != read(expected, p)]
    if not differ:
        return
    same = [other for other in MODELS if all(read(loaded, p) == read(xclip_config(other), p) for p in _CHECKED)]
    fix = f"load it as {same[0]!r}" if same else f"give a checkpoint of {name}"
    field = differ[0]
    raise ValueError(
        f"checkpoint {checkpoint!r} is another X-CLIP than {name} ({field} {read(loaded, tuple(field.split('.')))}, "
        f"{name} has {read(expected, tuple(field.split('.')))}): {fix}"
    )
