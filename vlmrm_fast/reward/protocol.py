"""RewardModel: what everything above the reward models asks of one, whatever its family.

The env stack (the VLM reward wrappers and the step's pipeline, ``stack.scorer.ChunkedScorer``), the plan,
episode-batch scoring, the training callbacks, evaluation and torchrun use a reward model through this
interface alone; no module above ``reward/`` tests which family a model is. A family (``reward/families.py``:
its row in ``REWARD_FAMILIES``) keeps it; so can a model of your own.

- What it is: its ``name``, its ``parameter_count()``, whether its
  weights are a ``random_init``, the criterion kinds it scores (``criterion_kinds``, rows of
  ``reward.kinds.CRITERION_KINDS``), and what it asks of whatever scores it (``needs``, a
  :class:`RewardNeeds`: the plan checks them against a stack once).
- A step's frames: ``pixel_buffer`` and ``preprocess`` (frames lent in place -> the model's input for
  each frame, on the render stream), then the model's own per-step scorer (``step_scorer``, a
  :class:`StepScorer`): a frame model scores the due envs' inputs, a window model feeds its envs'
  rings, each into the step's rewards, on the current stream.
- Frames in memory (episode batches, evaluation, a run's videos): ``score_frames``.

A model may also carry a ``schedule`` (:class:`~vlmrm_fast.reward.schedule.ScoreSchedule`): which steps
of an env's episode the env stack scores; without one, every step. A model that learns as the envs step (a
reward learned online from a judge's preferences) keeps :class:`LearnsOnline` too: a training run saves its
learned state with each checkpoint and a resume restores it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.reward.kinds import Criterion
from vlmrm_fast.reward.schedule import StepPlan
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer


@dataclasses.dataclass(frozen=True)
class Need:
    """One thing a reward model asks of a stack: the reward spec's ``field`` that makes it ask, ``why`` (in
    its family's words), and what else would do (``instead``, the end of the refusal; "" for nothing)."""

    field: str
    why: str
    instead: str = ""


@dataclasses.dataclass(frozen=True)
class RewardNeeds:
    """What a reward model asks of whatever scores it, declared by its family (``RewardModel.needs``, and
    for a spec not loaded yet ``RewardModelSpec.needs``). The plan (``stack.plan.check_needs``) checks them
    against a stack once; evaluation reads ``episodes`` and ``frames``.

    ``episodes``: a reward reads earlier frames of its episode, so that frames in memory are scored with their
    episodes (``score_frames(frames, episodes)``); ``frames``: the frames of one episode a reward reads (1 for
    a frame model, K for a window of K frames, which an episode must hold: ``too_few_steps`` says why);
    ``terminal_state``: why an episode's last step must be scored on the state that ended it, never on
    the next episode's first frame (``score_terminal_on: reset_frame``); ``scored_as_it_steps``: why its
    rewards cannot be left to episode batches (``defer_rewards``); ``time_limit``: why it needs the envs'
    time limit; ``one_process``: why its envs cannot be split over torchrun's ranks (a state learned from every env's
    frames, which one process must see). None: not asked.
    """

    episodes: bool = False
    frames: int = 1
    too_few_steps: Need | None = None
    terminal_state: str | None = None
    scored_as_it_steps: str | None = None
    time_limit: Need | None = None
    one_process: Need | None = None


#: What a model that scores each frame on its own asks: nothing.
FRAME_NEEDS = RewardNeeds()


@runtime_checkable
class StepScorer(Protocol):
    """A reward model's scoring of one stack's steps, ``num_envs`` envs (``RewardModel.step_scorer``). Each
    step: ``begin(plan)`` with the schedule's plan (which envs step, which are scored); then for each range
    of envs, the frames' inputs (``preprocess``'s, into the scorer's pixel buffer, only where
    ``needs_frames``) go to ``submit``, which writes the due envs' rewards into the range's rows of the
    step's rewards, without waiting for the device."""

    #: Score each episode on its last step alone (a window of the whole episode): the schedule's clock
    #: plans only those steps.
    episode_ends_only: bool

    def begin(self, plan: StepPlan) -> None: ...

    def needs_frames(self, rows: slice) -> bool:
        """Whether the frames of envs ``rows`` are read this step (else they need no preprocessing)."""
        ...

    def submit(self, pixels: torch.Tensor, rows: slice, out: torch.Tensor, timer: StageTimer = NULL_TIMER) -> None:
        """The inputs ``pixels`` of envs ``rows`` (stale where ``needs_frames`` was False) -> the due envs'
        rewards into ``out`` (the rows' part of the step's rewards)."""
        ...


@runtime_checkable
class RewardModel(Protocol):
    """Frames in, rewards out: (N,) for one criterion, (N, K) for K criteria (``multi_criteria``); see the
    module docstring."""

    @property
    def name(self) -> str:
        """The model's name, as it was asked for (``"ViT-L-14/laion2b_s32b_b82k"``, ``"viclip-b16"``)."""
        ...

    @property
    def random_init(self) -> bool:
        """Whether its weights are a random initialization (its rewards are noise)."""
        ...

    def parameter_count(self) -> int:
        """Parameters of the whole model (every tower it runs)."""
        ...

    @property
    def needs(self) -> RewardNeeds:
        """What it asks of whatever scores it (see :class:`RewardNeeds`)."""
        ...

    @property
    def criterion_kinds(self) -> tuple[str, ...]:
        """The kinds of criteria it scores (``reward.kinds``' ``kind:`` names, e.g. ``goal_baseline``)."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the model scores; the frames it is lent are read there."""
        ...

    @property
    def criteria(self) -> tuple[Criterion, ...]:
        """The reward criteria, in column order; their names label infos and logs."""
        ...

    @property
    def multi_criteria(self) -> bool:
        """True: rewards (N, K), one column per criterion; False: (N,)."""
        ...

    @property
    def chunk_size(self) -> int:
        """Inputs per batch of its towers: the batch episode-batch scoring fills."""
        ...

    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        """An (uninitialized) input for ``num_frames`` frames, for ``preprocess(out=...)``."""
        ...

    def preprocess(
        self, view: FrameView, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """Lent frames -> the model's input for each frame (into ``out``, rows of a ``pixel_buffer``)."""
        ...

    def step_scorer(self, num_envs: int, episode_length: int | None = None) -> StepScorer:
        """Its scoring of a stack's steps of ``num_envs`` envs, whose episodes end at ``episode_length``
        steps (None: no time limit)."""
        ...

    def score_frames(
        self,
        frames: Any,
        episodes: Sequence[Any] | None = None,
        criteria: Sequence[Any] | None = None,
        *,
        window_size: int | None = None,
        window_step: int = 1,
        progress: bool = False,
    ) -> torch.Tensor:
        """Rewards (N, K) float32, on the model's device, of uint8 frames (N, H, W, 3) in memory, for ``criteria``
        (default its own), NaN on a frame no reward lands on. ``episodes``: each episode's frame indices, in
        order, which a model whose reward reads earlier frames of its episode needs (``needs.episodes``); a
        window model scores the windows of ``window_size`` frames (default its own) that start every
        ``window_step`` frames inside each episode, the reward on a window's last frame. A frame model scores
        every frame on its own. ``progress``: a progress bar over its batches."""
        ...


@runtime_checkable
class LearnsOnline(Protocol):
    """A reward model whose rewards change as it learns from the frames it scores: its learned state is part of a
    checkpoint (``training/checkpoints.py`` writes it beside the policy; a resume restores it)."""

    def save_learned(self, file: Any) -> None:
        """Writes everything it learned (and what it learns from) into the binary ``file``."""
        ...

    def load_learned(self, file: Any) -> None:
        """Restores the state :meth:`save_learned` wrote (a state of other settings is refused in one line)."""
        ...


def check_reward_model(value: Any, name: str = "reward_model") -> RewardModel:
    """``value`` when it has the :class:`RewardModel` interface; else a TypeError naming the argument and the fix
    (a model's name where a loaded model belongs is the usual slip)."""
    if isinstance(value, RewardModel):
        return value
    if isinstance(value, str):
        raise TypeError(
            f"{name}: expects a loaded reward model, got the string {value!r}; to name a model, pass model={value!r} "
            f"(or load one: vlmrm_fast.load_reward_model({value!r}))"
        )
    missing = [member for member in _MEMBERS if not hasattr(value, member)]
    raise TypeError(
        f"{name}: expects a reward model (vlmrm_fast.load_reward_model(...), or an object with the RewardModel "
        f"interface), got {type(value).__name__}, which lacks {', '.join(missing)}"
    )


_MEMBERS = (
    "device",
    "criteria",
    "multi_criteria",
    "chunk_size",
    "pixel_buffer",
    "preprocess",
    "step_scorer",
    "score_frames",
    "name",
    "random_init",
    "parameter_count",
    "needs",
    "criterion_kinds",
)
