"""The failure every way of fetching weights shares (open_clip's, the judges', the video models'),
below all of them so that each can raise it."""

from __future__ import annotations

from vlmrm_fast.failures import ExpectedFailure


class WeightsUnavailableError(ExpectedFailure, RuntimeError):
    """Pretrained weights are neither cached nor downloadable right now."""
