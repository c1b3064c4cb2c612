"""Per-stage timing of the step pipeline (physics, render, transfer, preprocess, encode, reward).

Disabled, a stage costs one attribute check. Enabled, each stage is bracketed by
device synchronizations so GPU work is charged to the stage that issued it;
that serializes the pipeline, so profile runs measure stage shares, and
throughput is measured with profiling off.
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Iterator

import torch


class StageTimer:
    def __init__(self, enabled: bool = False, device: torch.device | None = None):
        self.enabled = enabled
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.total_s: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.total_s[name] += time.perf_counter() - start
            self.calls[name] += 1

    def reset(self) -> None:
        self.total_s.clear()
        self.calls.clear()

    def mean_ms(self, per: int | None = None) -> dict[str, float]:
        """Milliseconds per call of each stage, or per ``per`` units (e.g. steps) when given."""
        return {name: 1e3 * total / (per or self.calls[name]) for name, total in self.total_s.items()}


NULL_TIMER = StageTimer(enabled=False)
