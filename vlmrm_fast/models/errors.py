"""The failures every way of fetching a model shares (open_clip's, the judges', the video models'), below all
of them so that each can raise them: weights that cannot be had now, a package that is not installed."""

from __future__ import annotations

import importlib.util

from vlmrm_fast.failures import ExpectedFailure


class WeightsUnavailableError(ExpectedFailure, RuntimeError):
    """Pretrained weights are neither cached nor downloadable right now."""


class MissingDependencyError(ExpectedFailure, ImportError):
    """A model's tower or tokenizer needs an optional package that is not installed."""


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here (without importing it)."""
    return importlib.util.find_spec(package) is not None
