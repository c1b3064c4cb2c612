"""Per-stage timing of the step pipeline (physics, render, preprocess, encode, reward, transfer, observe).

Disabled, a stage costs one attribute check. Enabled, each stage is bracketed by
device synchronizations so GPU work is charged to the stage that issued it;
that serializes the pipeline, so profile runs measure stage shares, and
throughput is measured with profiling off.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator

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

    def table(self) -> str:
        """The stages as a table: calls, total and mean milliseconds, share of the time measured."""
        if not self.total_s:
            state = "no stage timed yet: step the env" if self.enabled else "profiling is off"
            return f"StageTimer ({state})"
        grand = sum(self.total_s.values())
        width = max(len("stage"), *(len(name) for name in self.total_s))
        lines = [f"{'stage':<{width}}  {'calls':>7}  {'total ms':>10}  {'ms/call':>9}  {'share':>6}"]
        for name, total in sorted(self.total_s.items(), key=lambda item: -item[1]):
            calls = self.calls[name]
            lines.append(
                f"{name:<{width}}  {calls:>7}  {1e3 * total:>10.2f}  {1e3 * total / calls:>9.3f}  {total / grand:>6.1%}"
            )
        lines.append(f"{'all':<{width}}  {'':>7}  {1e3 * grand:>10.2f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        stages = ", ".join(f"{name}={ms:.3f}" for name, ms in self.mean_ms().items())
        return f"StageTimer(enabled={self.enabled}, ms_per_call={{{stages}}})"


NULL_TIMER = StageTimer(enabled=False)
