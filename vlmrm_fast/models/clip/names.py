"""Model names: the forms accepted, the tiny CLIP this package registers, open_clip's architectures."""

from __future__ import annotations

import difflib
import json
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TINY_MODEL = "vlmrm-tiny"


MODEL_CONFIG_DIR = Path(__file__).parent / "model_configs"


_registered = False
_lock = threading.Lock()
#: preprocess_cfg of architectures registered with register_model_config (open_clip's built-in
#: configs carry none: there the pretrained tag holds it)
_REGISTERED_PREPROCESS: dict[str, dict[str, Any]] = {}


def register_builtin_configs() -> None:
    """Registers ``vlmrm-tiny`` (and any config shipped in model_configs/) with open_clip."""
    global _registered
    if not _registered:
        import open_clip

        open_clip.add_model_config(MODEL_CONFIG_DIR)
        _registered = True


def register_model_config(name: str, config: Mapping[str, Any]) -> None:
    """Registers an architecture with open_clip under ``name``, in open_clip's own config format.

    ``config`` is either a model config (``embed_dim``, ``vision_cfg``, ``text_cfg``, ...) or an
    ``open_clip_config.json``'s content, ``{"model_cfg": ..., "preprocess_cfg": ...}``. Its
    ``preprocess_cfg`` (size, mean, std, interpolation, resize_mode) is the preprocessing of the
    model when it is loaded without a pretrained tag (random weights or a ``checkpoint`` file).
    """
    import open_clip

    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"a model config name must be a non-empty string without '/', got {name!r}")
    config = dict(config)
    model_cfg = dict(config["model_cfg"]) if "model_cfg" in config else config
    preprocess = dict(config.get("preprocess_cfg") or model_cfg.pop("preprocess_cfg", None) or {})
    for key in ("embed_dim", "vision_cfg", "text_cfg"):
        if key not in model_cfg:
            raise ValueError(f"model config {name!r} has no {key!r}: give open_clip's config format")
    with _lock, tempfile.TemporaryDirectory(prefix="vlmrm-config-") as folder:
        path = Path(folder) / f"{name}.json"
        path.write_text(json.dumps(model_cfg))
        open_clip.add_model_config(path)  # read at once: the file may go
        if preprocess:
            _REGISTERED_PREPROCESS[name] = preprocess
        else:
            _REGISTERED_PREPROCESS.pop(name, None)


def registered_preprocess_cfg(name: str) -> dict[str, Any] | None:
    """The preprocess_cfg given to :func:`register_model_config` for ``name``, if any."""
    found = _REGISTERED_PREPROCESS.get(name)
    return dict(found) if found else None


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
