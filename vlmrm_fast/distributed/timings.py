"""Per-rank step times, in one table on rank 0, so that a straggler shows.

Every rank keeps a :class:`RankClock` (two clock reads per call). A serving rank times its steps
and its idle time (waiting for rank 0's next call: rank 0's share of the step, its learner
included); rank 0 times its own step, its wait for the other ranks' replies after it (the gather),
and its time outside the env between two steps (the policy, gradient updates, checkpoints,
videos). After ``ShardedVecEnv.profile()`` each rank's stage times (physics, render, encode,
preprocess, ... as ``env.profile()`` measures them) come along.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
from collections.abc import Iterator, Sequence

#: the clock's columns, in the table's order, and what each measures
COLUMNS = {
    "step": "the rank's own envs' step",
    "gather": "rank 0's wait for the other ranks' replies after its own step",
    "outside": "rank 0 outside the env between steps (policy, gradient updates, saves, videos)",
    "idle": "a serving rank waiting for rank 0's next call",
}


class RankClock:
    """Seconds and counts of what one rank does (``COLUMNS``), since the last :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.counts: dict[str, int] = collections.defaultdict(int)
        self.steps = 0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds
        self.counts[name] += 1

    @contextlib.contextmanager
    def timing(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def reset(self) -> None:
        self.seconds.clear()
        self.counts.clear()
        self.steps = 0

    def per_step_ms(self) -> dict[str, float]:
        """Milliseconds per step of each column (a rank's time over its steps)."""
        return {name: 1e3 * total / max(self.steps, 1) for name, total in self.seconds.items()}


@dataclasses.dataclass(frozen=True)
class RankTimes:
    """One rank's row: where it runs, its envs, its steps and milliseconds per step (``ms``: the
    clock's columns; ``stages``: the stage timer's, when profiled)."""

    rank: int
    where: str
    envs: str
    steps: int
    ms: dict[str, float]
    stages: dict[str, float] = dataclasses.field(default_factory=dict)


def table(rows: Sequence[RankTimes]) -> str:
    """The ranks' rows as an aligned table (plain text, one line per rank; the slowest step marked)."""
    columns = [name for name in COLUMNS if any(name in row.ms for row in rows)]
    stages = list(dict.fromkeys(stage for row in rows for stage in row.stages))
    steps = max((row.steps for row in rows), default=0)
    slowest = max(rows, key=lambda row: row.ms.get("step", 0.0)).rank if rows else None
    head = ["rank", "where", "envs", "steps", *columns, *stages]
    body = [
        [
            str(row.rank),
            row.where,
            row.envs,
            str(row.steps),
            *(f"{row.ms[name]:.2f}" if name in row.ms else "-" for name in columns),
            *(f"{row.stages[stage]:.2f}" if stage in row.stages else "-" for stage in stages),
        ]
        + (["<- slowest step"] if row.rank == slowest and len(rows) > 1 else [])
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [head, *body] if i < len(line)) for i in range(len(head))]
    lines = [
        f"per-rank times over {steps} steps, ms per step ("
        + "; ".join(f"{name}: {COLUMNS[name]}" for name in columns)
        + ("; then the stages of each rank's step" if stages else "")
        + "):"
    ]
    for line in [head, *body]:
        cells = [
            cell.rjust(widths[i]) if i not in (1, 2) else cell.ljust(widths[i])
            for i, cell in enumerate(line[: len(head)])
        ]
        lines.append("  " + "  ".join(cells + line[len(head) :]).rstrip())
    return "\n".join(lines)
