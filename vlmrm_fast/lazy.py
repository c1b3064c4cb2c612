"""Objects named ``"module:name"``, imported on first use: the backend tables name their factories this
way, so that reading a table imports no backend (``import vlmrm_fast.rendering`` stays light)."""

from __future__ import annotations

import importlib
from typing import Any


def named(path: str) -> Any:
    """The object ``path`` (``"package.module:name"``) names, its module imported now."""
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"{path!r} names no object; write 'package.module:name'")
    return getattr(importlib.import_module(module), name)
