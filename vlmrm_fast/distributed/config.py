"""DistributedConfig: how a run spreads over torchrun's ranks, checked once (the ``distributed:``
section of a training config, and the ShardedVecEnv's arguments of the same names).

One process (no torchrun) holds every env and ignores this section, so one config runs both ways.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vlmrm_fast.checks import FieldError, non_negative_int, number

#: seconds rank 0 waits for one rank's answer to one call (torch's own default for a wait)
DEFAULT_TIMEOUT = 1800.0


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """``learner_envs``: rank 0's envs (null: an even share, never more than another rank's; 0: rank 0
    only learns, checkpoints and films); the other ranks split the rest evenly.

    ``timeout``: seconds rank 0 waits for one rank's answer to one call (building its envs, a step,
    a reset). Rank 0's gradient updates, checkpoints and videos between calls do not count against it:
    the heartbeat covers them.

    ``heartbeat``: seconds between two beats of every rank; ``heartbeat_timeout``: a rank whose beat
    has not come for this long is named as dead or frozen (by rank 0; a serving rank names rank 0),
    while rank 0 learns or saves too. At least twice ``heartbeat``.

    ``report_every``: seconds between two per-rank step time tables on rank 0 (0: only at the end).
    """

    learner_envs: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    heartbeat: float = 2.0
    heartbeat_timeout: float = 10.0
    report_every: float = 600.0

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if self.learner_envs is not None:
            put("learner_envs", non_negative_int(self.learner_envs, "learner_envs"))
        for name in ("timeout", "heartbeat", "heartbeat_timeout"):
            value = number(getattr(self, name), name)
            if value <= 0:
                raise FieldError(name, f"must be a positive number of seconds, got {getattr(self, name)!r}")
            put(name, value)
        if self.heartbeat_timeout < 2 * self.heartbeat:
            raise FieldError(
                "heartbeat_timeout",
                f"must be at least twice heartbeat ({self.heartbeat:g} s), so that one late beat is not a failure; "
                f"got {self.heartbeat_timeout:g}",
            )
        report = number(self.report_every, "report_every")
        if report < 0:
            raise FieldError(
                "report_every",
                f"must be 0 (only at the end) or a positive number of seconds, got {self.report_every!r}",
            )
        put("report_every", report)

    def replace(self, **changes: Any) -> DistributedConfig:
        return dataclasses.replace(self, **changes)


#: the defaults (one process, or a job that sets nothing)
DEFAULTS = DistributedConfig()
