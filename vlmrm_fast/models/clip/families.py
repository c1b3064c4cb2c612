"""The model families open_clip ships, what each needs installed, and what each costs per image.

A family is recognised from the architecture's open_clip config (its towers), not from its name,
so a config registered under any name (a tiny test model, a user's own) gets its family's
handling: SigLIP's sigmoid bias, MobileCLIP's reparameterization, the packages a tower needs.

    family_of(name)           the Family of an open_clip architecture
    check_requirements(name)  refuses, naming the extra to install, when a tower's package is missing
    describe(name)            input size, embedding size, image-tower parameters and FLOPs per image,
                              computed on the meta device (no memory, no weights)
    model_table()             the table of every architecture, shipped with the package
                              (model_table.json, written by tools/generate_model_table.py)
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from functools import cache
from pathlib import Path
from typing import Any

from vlmrm_fast.models.errors import MissingDependencyError, installed

MODEL_TABLE = Path(__file__).parent / "model_table.json"


@dataclasses.dataclass(frozen=True)
class Family:
    key: str
    name: str
    example: str
    what: str


FAMILIES: tuple[Family, ...] = (
    Family("clip", "CLIP ViT", "ViT-L-14", "OpenAI-style ViT towers (OpenAI, LAION, DataComp, DFN, MetaCLIP)"),
    Family("resnet", "CLIP ResNet", "RN50", "OpenAI's modified ResNets"),
    Family(
        "siglip",
        "SigLIP / SigLIP2",
        "ViT-B-16-SigLIP2-256",
        "timm ViT with attention pooling; mean/std 0.5, squash resize; sigmoid logits with a bias; "
        "Hugging Face tokenizer",
    ),
    Family("pe", "Perception Encoder", "PE-Core-L-14-336", "timm ViT with RoPE and attention pooling; 0.5 mean/std"),
    Family("eva", "EVA02 / EVA01", "EVA02-L-14-336", "timm EVA towers"),
    Family(
        "mobileclip",
        "MobileCLIP / MobileCLIP2",
        "MobileCLIP2-S4",
        "timm FastViT/MCi towers, reparameterized for inference; bilinear resize",
    ),
    Family("vitamin", "ViTamin", "ViTamin-L", "timm hybrid (MBConv stem + ViT) towers"),
    Family("convnext", "ConvNeXt", "convnext_large_d_320", "timm ConvNeXt towers"),
    Family("coca", "CoCa", "coca_ViT-B-32", "contrastive captioners: a ViT with an attentional pooler"),
    Family(
        "timm",
        "other timm towers",
        "swin_base_patch4_window7_224",
        "other timm image towers (Swin, relative-position ViTs)",
    ),
    Family(
        "hf-text",
        "Hugging Face text towers",
        "xlm-roberta-base-ViT-B-32",
        "multilingual text towers from transformers (their text config comes from the hub)",
    ),
)
_BY_KEY = {family.key: family for family in FAMILIES}

#: extra that brings each optional package (pyproject.toml's optional-dependencies)
EXTRAS = {"timm": "timm", "transformers": "siglip"}


def model_config(name: str) -> dict[str, Any] | None:
    """open_clip's config of a built-in or registered architecture (None for hub or folder models)."""
    import open_clip

    from vlmrm_fast.models.clip.names import register_builtin_configs

    register_builtin_configs()
    return open_clip.get_model_config(name)


def family_of_config(config: dict[str, Any], name: str = "") -> Family:
    """The family of an architecture from its config (and its name, for MobileCLIP2-L-14's plain ViT)."""
    vision, text = config.get("vision_cfg", {}), config.get("text_cfg", {})
    timm_name = str(vision.get("timm_model_name") or "")
    if "multimodal_cfg" in config:
        return _BY_KEY["coca"]
    if text.get("hf_model_name"):
        return _BY_KEY["hf-text"]
    if "init_logit_bias" in config or "siglip" in timm_name:
        return _BY_KEY["siglip"]
    if timm_name.startswith("vit_pe_"):
        return _BY_KEY["pe"]
    if timm_name.startswith("eva"):
        return _BY_KEY["eva"]
    if "_mci" in timm_name or timm_name.startswith("fastvit") or name.startswith("MobileCLIP"):
        return _BY_KEY["mobileclip"]
    if timm_name.startswith("vitamin"):
        return _BY_KEY["vitamin"]
    if timm_name.startswith("convnext"):
        return _BY_KEY["convnext"]
    if timm_name:
        return _BY_KEY["timm"]
    if isinstance(vision.get("layers"), (list, tuple)):
        return _BY_KEY["resnet"]
    return _BY_KEY["clip"]


def family_of(name: str) -> Family:
    """The family of an open_clip architecture (``"clip"`` for hub and folder models it cannot read)."""
    config = model_config(name)
    return family_of_config(config, name) if config else _BY_KEY["clip"]


def requirements(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(package, why) for each optional package an architecture needs."""
    vision, text = config.get("vision_cfg", {}), config.get("text_cfg", {})
    needs = []
    if vision.get("timm_model_name"):
        needs.append(("timm", f"its image tower is the timm model {vision['timm_model_name']}"))
    if text.get("hf_tokenizer_name"):
        needs.append(("transformers", f"its tokenizer is the Hugging Face tokenizer {text['hf_tokenizer_name']}"))
    if text.get("hf_model_name"):
        needs.append(("transformers", f"its text tower is the Hugging Face model {text['hf_model_name']}"))
    return needs


def missing_dependency(model: str, package: str, why: str) -> MissingDependencyError:
    extra = EXTRAS.get(package)
    install = (
        f"pip install 'vlmrm-fast[{extra}]' (from a checkout: pip install '.[{extra}]')"
        if extra
        else f"pip install {package}"
    )
    return MissingDependencyError(f"{model} needs {package} ({why}), which is not installed: {install}")


def check_requirements(name: str, config: dict[str, Any] | None = None) -> None:
    """Raises :class:`MissingDependencyError` naming the extra when a package ``name`` needs is missing."""
    config = config if config is not None else model_config(name)
    for package, why in requirements(config or {}):
        if not installed(package):
            raise missing_dependency(name, package, why)


def describe(name: str) -> dict[str, Any]:
    """An architecture's family, input size, embedding size, image-tower parameters and GFLOPs per image.

    The model is built on the meta device (shapes only: no memory, no weights, no download) and
    its image tower run once under torch's FLOP counter (a multiply-add counts 2 FLOPs).
    """
    import open_clip
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from vlmrm_fast.models.random_init import quiet_random_init

    config = model_config(name)
    if config is None:
        from vlmrm_fast.models.clip.names import known_models

        close = difflib.get_close_matches(name, known_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `vlmrm-fast models` lists them"
        raise ValueError(f"{name!r} is not an open_clip architecture known here{hint}")
    check_requirements(name, config)
    family = family_of_config(config, name)
    with quiet_random_init(), torch.device("meta"):
        model = open_clip.create_model(name, pretrained=None, device="meta")
    size = open_clip.get_model_preprocess_cfg(model).get("size", model.visual.image_size)
    size = size if isinstance(size, int) else size[0]
    with FlopCounterMode(display=False) as counter:
        model.visual(torch.empty(1, 3, size, size, device="meta"))
    text = config.get("text_cfg", {})
    return {
        "name": name,
        "family": family.key,
        "image_size": int(size),
        "embed_dim": int(config["embed_dim"]),
        "image_params_m": round(sum(p.numel() for p in model.visual.parameters()) / 1e6, 2),
        "image_gflops": round(counter.get_total_flops() / 1e9, 2),
        "context_length": int(text.get("context_length", 77)),
        "needs": sorted({package for package, _ in requirements(config)}),
        "pretrained_tags": open_clip.list_pretrained_tags_by_model(name),
    }


@cache
def model_table() -> dict[str, dict[str, Any]]:
    """The shipped table: architecture name -> :func:`describe`'s fields (or ``{"error": ...}``)."""
    return json.loads(MODEL_TABLE.read_text())["models"]
