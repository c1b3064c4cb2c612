"""A test double of a reward family: all that a new reward family is, one module and one row.

:class:`PrefixBrightness` rewards each step with the mean brightness of its episode's frames so far: a reward
of the episode's prefix, as a streamed judge's would be, in a form a test can compute. Its per-step scorer
(:class:`PrefixSums`) keeps each env's running sum on the model's device, starts it again at an episode's
first step, and leaves out the steps that only reset an env; it asks a stack for the state that ended an
episode and for rewards as the envs step (its ``needs``, which the plan checks), and frames in memory come
with their episodes. :data:`ROW` is its row of ``vlmrm_fast.reward.families.REWARD_FAMILIES``; a test
registers it (``monkeypatch.setitem(REWARD_FAMILIES, ROW.name, ROW)``) and the spec, the plan, the stack and
evaluation take it from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec, as_frame_tensor
from vlmrm_fast.reward.families import RewardFamily
from vlmrm_fast.reward.protocol import RewardNeeds
from vlmrm_fast.reward.schedule import StepPlan
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer

NAME = "prefix-brightness"
SIZE = 8  # frames are squashed to SIZE x SIZE before their brightness is taken

NEEDS = RewardNeeds(
    episodes=True,
    terminal_state="an episode's prefix would then end on the next episode's first frame",
    scored_as_it_steps="its reward at a step reads every frame of the episode so far",
)


def brightness(frames: np.ndarray) -> np.ndarray:
    """The reference: each uint8 frame's mean brightness in [0, 1], squashed as the model squashes it."""
    spec = PreprocessSpec(size=SIZE, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resize_mode="squash")
    return FramePreprocessor(spec, torch.device("cpu"))(frames).mean(dim=(1, 2, 3)).numpy()


class PrefixSums:
    """The envs' running sums of brightness (see the module docstring)."""

    episode_ends_only = False

    def __init__(self, model: PrefixBrightness, num_envs: int):
        self.sums = torch.zeros(num_envs, device=model.device)
        self.counts = torch.zeros(num_envs, device=model.device)
        self._plan: StepPlan | None = None

    def begin(self, plan: StepPlan) -> None:
        self._plan = plan
        first = torch.as_tensor(plan.stepping & (plan.step == 1), device=self.sums.device)
        self.sums[first] = 0.0
        self.counts[first] = 0.0

    def needs_frames(self, rows: slice) -> bool:
        assert self._plan is not None
        return bool(self._plan.stepping[rows].any())

    def submit(self, pixels: torch.Tensor, rows: slice, out: torch.Tensor, timer: StageTimer = NULL_TIMER) -> None:
        assert self._plan is not None
        stepping = torch.as_tensor(self._plan.stepping[rows], device=self.sums.device)
        self.sums[rows] += torch.where(stepping, pixels.mean(dim=(1, 2, 3)), 0.0)
        self.counts[rows] += stepping.float()
        due = torch.as_tensor(self._plan.due[rows], device=self.sums.device)
        out.copy_(torch.where(due, self.sums[rows] / self.counts[rows].clamp(min=1.0), out))


class PrefixBrightness:
    """The reward family double (see the module docstring): a RewardModel of its own protocol."""

    criterion_kinds = ("goal_baseline",)  # it takes the target prompts (and asks nothing of them)
    random_init = False
    multi_criteria = False
    chunk_size = 64

    def __init__(self, criteria: Sequence[Any], device: torch.device, schedule: Any = None):
        self.name = NAME
        self.criteria = tuple(criteria)
        self.device = device
        self.schedule = schedule
        spec = PreprocessSpec(size=SIZE, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resize_mode="squash")
        self.preprocessor = FramePreprocessor(spec, device)

    # ------------------------------------------------------------------ the family
    @classmethod
    def from_spec(cls, spec: Any) -> PrefixBrightness:
        criteria, _ = spec.reward_criteria()
        return cls(criteria[:1], resolve_device(spec.device), spec.schedule)

    @classmethod
    def check_spec(cls, spec: Any) -> None:
        """Nothing of its own to check."""

    @classmethod
    def needs_of(cls, spec: Any) -> RewardNeeds:
        return NEEDS

    @classmethod
    def require_weights(cls, spec: Any) -> None:
        """No weights."""

    @classmethod
    def criterion_kinds_of(cls) -> tuple[str, ...]:
        return cls.criterion_kinds

    # ------------------------------------------------------------------ the protocol
    needs = NEEDS

    def parameter_count(self) -> int:
        return 0

    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        return torch.empty((num_frames, 3, SIZE, SIZE), device=self.device)

    def preprocess(self, view: Any, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER) -> torch.Tensor:
        return self.preprocessor.run(view, out)

    def step_scorer(self, num_envs: int, episode_length: int | None = None) -> PrefixSums:
        return PrefixSums(self, num_envs)

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
        if episodes is None:
            raise ValueError(f"{NAME} scores an episode's prefixes: give the frames' episodes")
        each = self.preprocessor(as_frame_tensor(frames)).mean(dim=(1, 2, 3))
        out = torch.full((each.shape[0],), float("nan"), device=self.device)
        for episode in episodes:
            index = torch.as_tensor(np.asarray(episode), device=self.device)
            out[index] = torch.cumsum(each[index], 0) / torch.arange(1, len(index) + 1, device=self.device)
        return out[:, None].expand(-1, 1 if criteria is None else len(criteria)).contiguous()

    def close(self) -> None:
        pass


ROW = RewardFamily(
    NAME,
    "a test double: the mean brightness of an episode so far",
    lambda claim: claim.model == NAME,
    {},
    f"{__name__}:PrefixBrightness",
)


def reference_rewards(frames: np.ndarray, dones: np.ndarray) -> np.ndarray:
    """Rewards (T, N) of frames (T, N, H, W, 3) of T steps of N envs, the envs' episodes ending where ``dones``
    (T, N) says: the mean brightness of each episode's frames so far, written plainly."""
    values = brightness(frames.reshape(-1, *frames.shape[2:])).reshape(frames.shape[:2])
    out = np.zeros_like(values)
    for env in range(values.shape[1]):
        total = count = 0.0
        for step in range(values.shape[0]):
            total, count = total + values[step, env], count + 1
            out[step, env] = total / count
            if dones[step, env]:
                total = count = 0.0
    return out
