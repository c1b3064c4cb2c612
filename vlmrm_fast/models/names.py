"""Model names: the forms accepted, the tiny CLIP this package registers, open_clip's architectures."""

from __future__ import annotations

import difflib
from pathlib import Path

TINY_MODEL = "vlmrm-tiny"


MODEL_CONFIG_DIR = Path(__file__).parent / "model_configs"


_registered = False


def register_builtin_configs() -> None:
    """Registers ``vlmrm-tiny`` (and any config shipped in model_configs/) with open_clip."""
    global _registered
    if not _registered:
        import open_clip

        open_clip.add_model_config(MODEL_CONFIG_DIR)
        _registered = True


def known_models() -> list[str]:
    import open_clip

    register_builtin_configs()
    return open_clip.list_models()


def parse_model_name(model: str, pretrained: str | None) -> tuple[str, str | None]:
    """``"ViT-L-14/laion2b_s32b_b82k"`` -> ``("ViT-L-14", "laion2b_s32b_b82k")``; checks the name."""
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a non-empty string such as 'ViT-L-14', got {model!r}")
    model = model.strip()
    if model.startswith(("hf-hub:", "local-dir:")):
        if pretrained is not None:
            raise ValueError(
                f"pretrained={pretrained!r} cannot be combined with {model!r}: the hub or folder holds the weights"
            )
        return model, None
    models = known_models()
    name, tag = model, pretrained
    if "/" in model and model not in models:
        name, _, embedded = model.partition("/")
        if pretrained is not None and pretrained != embedded:
            raise ValueError(f"model={model!r} names tag {embedded!r} but pretrained={pretrained!r}; give one")
        tag = embedded or None
    if name not in models:
        close = difflib.get_close_matches(name, models, n=5, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown CLIP model {name!r}.{hint} Use an open_clip name (open_clip.list_models()), "
            f"'hf-hub:org/repo', 'local-dir:/path' or {TINY_MODEL!r}."
        )
    return name, tag
