"""When a step scores an env: every step, or every n-th step of the env's episode.

Two fields of :class:`~vlmrm_fast.reward.spec.RewardModelSpec` say it for every reward model (CLIP
frames, windows of frames, or any model of the :class:`~vlmrm_fast.reward.protocol.RewardModel`
interface that carries a ``schedule``):

- ``score_every`` (n >= 1): an env is scored on steps n, 2n, 3n, ... of its episode, and on the
  episode's last step. Steps are counted from the env's own episode start: the first step after a
  reset is step 1, so envs that reset at different steps keep their own count.
- ``between_scores``: the reward of the steps in between: ``"zero"``, or ``"hold"`` (the env's last
  score in this episode; 0 before its first one).

The last step of an episode is always scored, so that every episode's final state has a reward of
its own. Where the step's frames are scored before the envs report their ends (the simulator env
scores a range while the next is simulated), the last step is the time limit's (the simulator env's
episodes end only there); where the envs have stepped first (gymnasium envs), it is every step that
ends an episode, a termination too. A step that only resets an env (gymnasium's next-step autoreset)
is no step of an episode: it is not scored and not counted.

The step's scorer (:class:`~vlmrm_fast.stack.scorer.ChunkedScorer`) encodes only the envs a step scores.
Where every env resets together (the simulator env's time limit), a step scores all of them or none,
so a fixed-batch encoder runs the batch it was built for; where only some are due, their frames are
gathered into a smaller batch, which a fixed-batch encoder pads to its own (``ImageEncoder.encode_rows``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from vlmrm_fast.checks import one_of, positive_int

#: What the steps between two scores of an env get.
BETWEEN_SCORES = ("zero", "hold")


@dataclasses.dataclass(frozen=True)
class ScoreSchedule:
    """Score each env on steps ``score_every``, 2 x ``score_every``, ... of its episode and on its last
    step; the others get ``between_scores`` ("zero", or "hold": the env's last score this episode)."""

    score_every: int = 1
    between_scores: str = "zero"

    def __post_init__(self) -> None:
        object.__setattr__(self, "score_every", positive_int(self.score_every, "score_every"))
        one_of(self.between_scores, "between_scores", BETWEEN_SCORES)

    @property
    def every_step(self) -> bool:
        return self.score_every == 1

    def describe(self) -> str:
        if self.every_step:
            return "every step"
        return f"every {self.score_every} steps of an episode and its last, {self.between_scores} between"


#: The schedule of a model that carries none: every step.
EVERY_STEP = ScoreSchedule()


def schedule_of(reward_model: Any) -> ScoreSchedule:
    """The schedule a reward model carries (``reward_model.schedule``), every step when it carries none."""
    schedule = getattr(reward_model, "schedule", None)
    return EVERY_STEP if schedule is None else schedule


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """Which envs one step scores, known before its frames are scored.

    ``stepping``: the envs that take a step of their episode (False: the step only resets the env);
    ``step``: the step of its episode each env takes (1: the first after a reset; 0 where not stepping);
    ``last``: the envs whose episode ends with this step, as far as is known when scoring;
    ``due``: the envs scored (``all_due``: every env, the common case, kept apart to skip the gathers).
    """

    stepping: np.ndarray
    step: np.ndarray
    last: np.ndarray
    due: np.ndarray
    all_due: bool

    @classmethod
    def every_env(cls, num_envs: int) -> StepPlan:
        """Every env steps and is scored (a first step of an episode)."""
        ones = np.ones(num_envs, dtype=bool)
        return cls(ones, np.ones(num_envs, dtype=np.int64), np.zeros(num_envs, dtype=bool), ones, True)

    def due_in(self, rows: slice) -> np.ndarray | None:
        """The due envs of ``rows``, as offsets from ``rows.start``; None when all of them are due."""
        if self.all_due:
            return None
        due = self.due[rows]
        return None if due.all() else np.flatnonzero(due)


class ScheduleClock:
    """Each env's step in its episode and its held score: which envs a step scores (:meth:`plan`),
    what the others get (:meth:`rewards`), and the count after the step (:meth:`end_step`).

    ``episode_length``: the time limit, the last step of an episode where the envs report their
    ends only after the frames are scored (the simulator env); None where there is none.
    ``episode_ends_only``: score each episode on its last step alone (a window of the whole episode).
    """

    def __init__(
        self,
        schedule: ScoreSchedule,
        num_envs: int,
        episode_length: int | None = None,
        *,
        episode_ends_only: bool = False,
    ):
        self.schedule = schedule
        self.episode_ends_only = episode_ends_only
        self.num_envs = int(num_envs)
        self.episode_length = episode_length
        self.steps = np.zeros(self.num_envs, dtype=np.int64)  # steps each env's episode has taken
        self._held: np.ndarray | None = None  # each env's last score this episode (hold)

    def restart(self) -> None:
        """Every env starts a new episode (a reset of the whole VecEnv)."""
        self.steps[:] = 0
        if self._held is not None:
            self._held[:] = 0.0

    def plan(self, *, resetting: np.ndarray | None = None, last: np.ndarray | None = None) -> StepPlan:
        """The plan of the next step. ``resetting``: envs this step only resets (next-step autoreset);
        ``last``: envs whose episode this step ends, when known (the envs have stepped); else the time limit's."""
        stepping = np.ones(self.num_envs, dtype=bool) if resetting is None else ~np.asarray(resetting, dtype=bool)
        step = np.where(stepping, self.steps + 1, 0)
        if last is not None:
            ends = stepping & np.asarray(last, dtype=bool)
        elif self.episode_length is not None:
            ends = stepping & (step >= self.episode_length)
        else:
            ends = np.zeros(self.num_envs, dtype=bool)
        every = self.schedule.score_every
        if self.episode_ends_only:
            due = ends.copy()
        else:
            due = ends | (stepping & (step % every == 0)) if every > 1 else stepping.copy()
        return StepPlan(stepping, step, ends, due, bool(due.all()))

    def rewards(self, plan: StepPlan, scores: np.ndarray) -> np.ndarray:
        """The step's rewards from its ``scores`` (rows of envs not due are ignored): the due envs' scores,
        the others' ``between_scores``. Holds the due envs' scores."""
        if plan.all_due and self.schedule.between_scores == "zero":
            return scores
        if self.schedule.between_scores == "zero":
            out = np.zeros_like(scores)
        else:
            if self._held is None or self._held.shape != scores.shape:
                self._held = np.zeros_like(scores)
            out = self._held.copy()
        out[plan.due] = scores[plan.due]
        if self._held is not None:
            self._held[plan.due] = scores[plan.due]
        return out

    def end_step(self, plan: StepPlan, dones: np.ndarray) -> None:
        """Counts the step; the envs ``dones`` marks start their episode again (and hold nothing)."""
        self.steps[plan.stepping] += 1
        ended = np.asarray(dones, dtype=bool)
        self.steps[ended] = 0
        if self._held is not None:
            self._held[ended] = 0.0
