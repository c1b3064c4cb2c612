"""Tiny members of each open_clip family, built offline with random weights.

Each is the family's own architecture (the same open_clip config, the same timm model factory,
the same pooling, text tower and tokenizer kind) at a tiny width and depth and a small image, and
carries the preprocess_cfg of one of the family's pretrained tags (with the tiny image size): so
the tests exercise every family's code path and preprocessing in seconds on a CPU.

SigLIP's tokenizer lives on the Hugging Face hub; :func:`make_tokenizer_folder` writes a small
one (a word-level ``tokenizers`` model saved through transformers) that the tests load offline.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest


@dataclasses.dataclass(frozen=True)
class TinyFamily:
    key: str  # models.families key
    real: str  # the open_clip architecture it shrinks
    tag: str  # the pretrained tag whose preprocessing it takes
    image_size: int
    timm_overrides: dict[str, Any] | None  # None: an open_clip (not timm) tower, shrunk in its config

    @property
    def name(self) -> str:
        return f"tiny-{self.real}"

    @property
    def needs(self) -> tuple[str, ...]:
        return ("timm",) + (("transformers",) if self.key == "siglip" else ()) if self.timm_overrides else ()


TINY_VIT = dict(embed_dim=32, depth=1, num_heads=2)
FAMILIES = [
    TinyFamily("siglip", "ViT-B-16-SigLIP2-256", "webli", 64, dict(TINY_VIT, img_size=64)),
    TinyFamily("siglip", "ViT-B-16-SigLIP", "webli", 64, dict(TINY_VIT, img_size=64)),
    TinyFamily("pe", "PE-Core-L-14-336", "meta", 56, dict(TINY_VIT, img_size=56)),
    TinyFamily("eva", "EVA02-L-14-336", "merged2b_s6b_b61k", 56, dict(TINY_VIT, img_size=56)),
    TinyFamily("eva", "EVA01-g-14", "laion400m_s11b_b41k", 56, dict(TINY_VIT, img_size=56)),
    TinyFamily(
        "mobileclip", "MobileCLIP2-S4", "dfndr2b", 64, dict(layers=(1, 1, 1, 1, 1), embed_dims=(8, 16, 32, 32, 64))
    ),
    TinyFamily("mobileclip", "MobileCLIP-S1", "datacompdr", 64, dict(layers=(1, 1, 1, 1), embed_dims=(8, 16, 32, 64))),
    TinyFamily("vitamin", "ViTamin-L", "datacomp1b", 64, "vitamin"),  # type: ignore[arg-type]
    TinyFamily(
        "convnext",
        "convnext_large_d_320",
        "laion2b_s29b_b131k_ft_soup",
        64,
        dict(depths=(1, 1, 1, 1), dims=(8, 16, 32, 32)),
    ),
    TinyFamily("coca", "coca_ViT-B-32", "laion2b_s13b_b90k", 64, None),
]
BY_NAME = {family.name: family for family in FAMILIES}

#: words of the test tokenizer (and of the prompts the tests use)
WORDS = "a the robot humanoid kneeling standing lying on ground floor red blue photo of car hill top bottom".split()


def require(family: TinyFamily) -> None:
    """Skips, naming the extra, when a package the family needs is missing (CI installs the extras)."""
    extras = {"timm": "timm", "transformers": "siglip"}
    for package in family.needs:
        pytest.importorskip(package, reason=f"{package} is not installed: pip install '.[{extras[package]}]'")


def _vitamin_overrides() -> dict[str, Any]:
    from timm.models.vitamin import VitCfg, VitConvCfg

    embed = VitCfg(
        embed_dim=(8, 16, 32),
        depths=(1, 1, 1),
        stem_width=8,
        conv_cfg=VitConvCfg(norm_layer="layernorm2d", norm_eps=1e-6),
        head_type="1d",
    )
    return dict(TINY_VIT, img_size=64, embed_cfg=embed)


def _register_timm(base: str, overrides: dict[str, Any]) -> str:
    import timm
    from timm.models import _registry

    name = f"{base}_vlmrmtiny"
    if name in _registry._model_entrypoints:
        return name
    original = timm.models.model_entrypoint(base)

    def factory(pretrained: bool = False, **kwargs: Any):
        return original(pretrained=False, **{**overrides, **kwargs})

    factory.__name__ = name
    factory.__qualname__ = name
    factory.__module__ = __name__
    timm.models.register_model(factory)
    return name


def _shrink_text(text: dict[str, Any]) -> None:
    text.update(width=32, heads=2, layers=1)
    if text.get("hf_tokenizer_name"):
        text["vocab_size"] = 64  # the test tokenizer's vocabulary fits


def register(family: TinyFamily) -> str:
    """Registers the tiny architecture with open_clip (through the package); returns its name."""
    import open_clip

    from vlmrm_fast.models.clip import register_model_config

    require(family)
    config = copy.deepcopy(open_clip.get_model_config(family.real))
    vision = config["vision_cfg"]
    if family.timm_overrides is None:  # CoCa: open_clip's own ViT and multimodal decoder
        vision.update(image_size=family.image_size, layers=1, width=32, head_width=16, attn_pooler_heads=2)
        config["multimodal_cfg"].update(width=32, heads=2, layers=1)
    else:
        overrides = _vitamin_overrides() if family.timm_overrides == "vitamin" else family.timm_overrides
        vision.update(
            image_size=family.image_size, timm_model_name=_register_timm(vision["timm_model_name"], overrides)
        )
    config["embed_dim"] = 32
    _shrink_text(config["text_cfg"])
    pcfg = open_clip.get_pretrained_cfg(family.real, family.tag)
    preprocess = {k: pcfg[k] for k in ("mean", "std", "interpolation", "resize_mode")}
    register_model_config(
        family.name, {"model_cfg": config, "preprocess_cfg": {**preprocess, "size": family.image_size}}
    )
    return family.name


def make_tokenizer_folder(folder: Path) -> Path:
    """A small word-level Hugging Face tokenizer saved as save_pretrained writes one (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<pad>", "</s>", "<unk>", *WORDS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)
    return folder
