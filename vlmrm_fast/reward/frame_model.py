"""What every reward model that scores each frame on its own shares (a CLIP, a judge, a model of one's own):
it asks nothing of a stack (``FRAME_NEEDS``), its per-step scorer scores the due envs' inputs
(:class:`FrameStepScorer`), and its frames in memory are scored whatever their episodes.

A frame model subclasses :class:`FrameRewardModel` and supplies ``score_pixels`` (inputs -> rewards) and
``_frame_rewards`` (frames in memory -> one column per criterion), beside the rest of
:class:`~vlmrm_fast.reward.protocol.RewardModel`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import torch

from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.reward.protocol import FRAME_NEEDS, RewardNeeds
from vlmrm_fast.reward.schedule import StepPlan
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer


class FrameStepScorer:
    """A frame model's scoring of a stack's steps: the inputs of the envs a step scores, scored where they
    lie (every env of a range in one batch, or the due ones gathered into a smaller one)."""

    episode_ends_only = False

    def __init__(self, model: FrameRewardModel):
        self.model = model
        self._plan: StepPlan | None = None

    def begin(self, plan: StepPlan) -> None:
        self._plan = plan

    def needs_frames(self, rows: slice) -> bool:
        assert self._plan is not None, "begin() plans the step first"
        due = self._plan.due_in(rows)
        return due is None or due.size > 0

    def submit(self, pixels: torch.Tensor, rows: slice, out: torch.Tensor, timer: StageTimer = NULL_TIMER) -> None:
        assert self._plan is not None, "begin() plans the step first"
        due = self._plan.due_in(rows)
        if due is None:
            self.model.score_pixels(pixels, out=out, timer=timer)
        elif due.size:
            index = torch.as_tensor(due, device=out.device)
            scores = self.model.score_pixels(pixels.index_select(0, index), timer=timer)
            out.index_copy_(0, index, scores.to(out.dtype))


class FrameRewardModel(abc.ABC):
    """The half of :class:`~vlmrm_fast.reward.protocol.RewardModel` every frame model shares (see the module
    docstring)."""

    @property
    def needs(self) -> RewardNeeds:
        return FRAME_NEEDS

    def step_scorer(self, num_envs: int, episode_length: int | None = None) -> FrameStepScorer:
        return FrameStepScorer(self)

    @abc.abstractmethod
    def score_pixels(
        self, pixels: torch.Tensor, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """Inputs (N, ...) -> rewards (N,) or (N, K) (into ``out``); returns without waiting for the device."""

    @abc.abstractmethod
    def _frame_rewards(self, frames: torch.Tensor, criteria: Sequence[Any] | None, progress: bool) -> torch.Tensor:
        """uint8 frames (N, H, W, 3), N >= 1 -> rewards (N, K) float32 of ``criteria`` (None: its own)."""

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
        """Rewards (N, K) float32 of every frame, each scored on its own (its episodes and windows do not change a
        frame's reward); the model's own criteria stay."""
        return self._frame_rewards(as_frame_tensor(frames), criteria, progress).float()
