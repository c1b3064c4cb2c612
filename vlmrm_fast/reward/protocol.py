"""RewardModel: what the env stack asks of a reward model.

The VLM reward wrapper, the step's pipeline (``stack.scorer.ChunkedScorer``), episode-batch scoring
and the training callbacks use a reward model through this interface alone.
:class:`~vlmrm_fast.reward.model.VLMRewardModel` implements it; so can a model of your own.

A step scores frames in two halves, so that a GPU can overlap them with the next range's drawing:
``preprocess`` (frames lent in place -> encoder input, on the render stream) and ``score_pixels``
(encoder input -> rewards, on the current stream). ``__call__`` does both for frames in memory.

A model may also carry a ``schedule`` (:class:`~vlmrm_fast.reward.schedule.ScoreSchedule`): which steps
of an env's episode the env stack scores; without one, every step.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.reward.kinds import Task
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer


@runtime_checkable
class RewardModel(Protocol):
    """Frames in, rewards out: (N,) for one task, (N, K) for K tasks (``multi_task``)."""

    @property
    def device(self) -> torch.device:
        """Where the model scores; the frames it is lent are read there."""
        ...

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The reward tasks, in column order; their names label infos and logs."""
        ...

    @property
    def multi_task(self) -> bool:
        """True: rewards (N, K), one column per task; False: (N,)."""
        ...

    @property
    def chunk_size(self) -> int:
        """Frames per encoder batch: the batch episode-batch scoring fills."""
        ...

    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        """An (uninitialized) encoder input for ``num_frames`` frames, for ``preprocess(out=...)``."""
        ...

    def preprocess(
        self, view: FrameView, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """Lent frames -> encoder input (into ``out``, rows of a ``pixel_buffer``)."""
        ...

    def score_pixels(
        self, pixels: torch.Tensor, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """Encoder input -> rewards (into ``out`` when given); returns without waiting for the device."""
        ...

    def __call__(self, frames: Any) -> torch.Tensor:
        """uint8 frames (N, H, W, 3), numpy or torch, on any device -> rewards on the model's device."""
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


_MEMBERS = ("device", "tasks", "multi_task", "chunk_size", "pixel_buffer", "preprocess", "score_pixels", "__call__")
