"""Argument checks shared across the package, so that one question gets one answer everywhere."""

from __future__ import annotations

from typing import Any, Literal, overload

import numpy as np


@overload
def positive_int(value: Any, name: str, *, allow_none: Literal[False] = False) -> int: ...
@overload
def positive_int(value: Any, name: str, *, allow_none: bool) -> int | None: ...
def positive_int(value: Any, name: str, *, allow_none: bool = False) -> int | None:
    """``value`` as an int >= 1 (None passes when ``allow_none``); bools and floats are refused."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, got {value!r}")
    return int(value)


def seed_value(value: Any, name: str = "seed", *, allow_none: bool = False) -> int | None:
    """``value`` as a seed: an int >= 0 (numpy's generators take no negative seed); bools and strings are refused."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer (e.g. {name}=0), got {value!r}")
    return int(value)
