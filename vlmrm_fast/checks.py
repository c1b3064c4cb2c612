"""Argument checks shared across the package, so that one question gets one answer everywhere.

Each check raises a :class:`FieldError` that names the field: an argument error reads
``n_envs: must be a positive integer, got 0``, and the config loader reports the same error at its
place in the file (``env.n_envs: must be a positive integer, got 0``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np


class FieldError(ValueError):
    """A bad value of one named field (or argument): ``field`` and what is wrong with it, ``reason``."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def at(self, section: str) -> str:
        """The message with the field's place in a config: ``section.field: reason``."""
        return f"{section}.{self.field}: {self.reason}" if section else str(self)


class FieldTypeError(FieldError, TypeError):
    """A field of the wrong type (a TypeError too, as Python's own argument errors are)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@overload
def positive_int(value: Any, name: str, *, allow_none: Literal[False] = False) -> int: ...
@overload
def positive_int(value: Any, name: str, *, allow_none: bool) -> int | None: ...
def positive_int(value: Any, name: str, *, allow_none: bool = False) -> int | None:
    """``value`` as an int >= 1 (None passes when ``allow_none``); bools and floats are refused."""
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < 1:
        raise FieldError(
            name, f"must be a positive integer{' or null' if allow_none else ''}, got {value!r}{_quotes_hint(value)}"
        )
    return int(value)


def non_negative_int(value: Any, name: str) -> int:
    if not _is_int(value):
        raise FieldTypeError(name, f"must be a non-negative integer, got {value!r}{_quotes_hint(value)}")
    if value < 0:
        raise FieldError(name, f"must be a non-negative integer, got {value!r}")
    return int(value)


def _quotes_hint(value: Any) -> str:
    """What turned a number into text: quotes, or YAML's reading of ``1e12`` as a string (PyYAML reads
    e-notation as a number only with a dot and a signed exponent, ``1.0e+12``)."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if text.lstrip("+-").isdigit():
        return "; remove the quotes"
    try:
        number = float(text)
    except ValueError:
        return ""
    if not math.isfinite(number) or number != int(number):
        return ""
    return f" (YAML read it as text: its e-notation needs a dot and a signed exponent, 1.0e+12); write {int(number)}"


def number(value: Any, name: str, *, low: float | None = None, high: float | None = None) -> float:
    """A finite float (ints accepted), optionally in [low, high]."""
    span = f" in [{low:g}, {high:g}]" if low is not None and high is not None else ""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise FieldTypeError(name, f"must be a finite number{span}, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or (low is not None and out < low) or (high is not None and out > high):
        raise FieldError(name, f"must be a finite number{span}, got {value!r}")
    return out


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise FieldTypeError(name, f"must be true or false, got {value!r}")
    return bool(value)


def one_of(value: Any, name: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else a FieldError listing them."""
    if not isinstance(value, str) or value not in choices:
        raise FieldError(name, f"{value!r} is not one of {', '.join(choices)}")
    return value


def chunk_count(value: Any, name: str, num_envs: int) -> int | str:
    """ "auto", or a number of ranges to split ``num_envs`` envs into: an integer in [1, num_envs]."""
    if value == "auto":
        return "auto"
    if not _is_int(value) or not 1 <= value <= num_envs:
        raise FieldError(name, f"must be 'auto' or an integer in [1, num_envs={num_envs}], got {value!r}")
    return int(value)
