"""What a reward model that watches the episode offers the env stack: a per-step scorer and an offline one, and
the reward model interface the judges that watch it share.

A model of one frame scores each frame alone; the judges of ``reward/window_judge.py``,
``reward/prefix_judge.py`` and ``reward/preference.py`` keep something of each env's episode between
steps (its last frames' vision tokens, the KV cache of its episode so far, its frames in a replay), so
they are given each step's frames with the envs they belong to and whether they start an episode:

- ``step(frames, envs, starts)``: uint8 frames (B, H, W, 3) (numpy, torch on any device, or a
  ``FrameView``) of envs ``envs`` (B,) (default: all, in order), ``starts`` (B,) True where the frame is
  the first of a new episode (its reset's frame); -> rewards (B,), or (B, criteria) with several criteria, on
  the model's device. An env's frames come in its episode's order, one per step it is given.
- ``score_episode(frames)``: one episode's frames (T, H, W, 3) -> the rewards ``step`` would give at each
  of its steps (T,) or (T, criteria): offline scoring (``vlmrm-fast evaluate``, episode batches).

:func:`step_arguments` reads the three arguments once for all of them.

In the env stack (``reward.protocol.RewardModel``), a judge's ``step_scorer(num_envs)`` is an
:class:`EpisodeStepScorer`: a state of its own for the stack's envs (the judge's ``new_state``: rings, caches,
sized and checked against the device's memory before they are allocated), fed each step's frames of the envs
that step, with the envs whose episode starts anew (the schedule's first step of an episode: after a reset,
and after gymnasium's next-step autoreset), so that no state ever holds two episodes' frames. The schedule's
``score_every`` leaves the judge's answer (the question's tokens through the language model) to the due envs;
every frame still enters the state, so a scored step's reward is the one ``score_every: 1`` gives there.
:class:`PrefixSpec` is the ``prefix`` field of a reward spec (``reward.prefix: {max_frames: 64}``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer

if TYPE_CHECKING:
    from vlmrm_fast.reward.schedule import StepPlan

#: The frames a prefix judge's prompt holds when ``prefix`` sets none (Qwen2-VL-2B: 118 MiB of cache per env).
DEFAULT_MAX_FRAMES = 64


@dataclasses.dataclass(frozen=True)
class PrefixSpec:
    """A judge asked about each env's episode so far at every step (``reward.prefix``; the prefix judge,
    ``reward/prefix_judge.py``): its prompt holds up to ``max_frames`` of the episode's frames, beyond that every
    2nd, 4th, ... frame from the first, and the newest."""

    max_frames: int = DEFAULT_MAX_FRAMES

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_frames", positive_int(self.max_frames, "max_frames"))
        if self.max_frames < 2:
            raise FieldError("max_frames", "must be at least 2: the episode's first frame and its newest")

    @classmethod
    def of(cls, value: Any, name: str = "prefix") -> PrefixSpec | None:
        """``value`` as a prefix: a PrefixSpec, a mapping of its fields (``{}``: the defaults), or None; errors name
        ``name.field``."""
        if value is None or isinstance(value, PrefixSpec):
            return value
        if not isinstance(value, dict):
            raise FieldError(name, f"must be a mapping such as {{max_frames: {DEFAULT_MAX_FRAMES}}}, got {value!r}")
        unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise FieldError(f"{name}.{unknown[0]}", "unknown field; a prefix has max_frames")
        try:
            return cls(**value)
        except FieldError as exc:
            raise FieldError(f"{name}.{exc.field}", exc.reason) from None

    def describe(self) -> str:
        return f"the episode so far, up to {self.max_frames} frames (then every 2nd, 4th, ... and the newest)"


@runtime_checkable
class EpisodeScorer(Protocol):
    """A reward model fed each env's episode step by step (see the module docstring)."""

    @property
    def num_envs(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def multi_criteria(self) -> bool: ...

    def step(self, frames: Any, envs: Any = None, starts: Any = None) -> torch.Tensor: ...

    def score_episode(self, frames: Any) -> torch.Tensor: ...


def step_arguments(frames: Any, envs: Any, starts: Any, num_envs: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """A step's frames as a uint8 tensor (B, H, W, 3), its envs as indices (B,) and its episode starts as booleans (B,);
    one line naming what is wrong otherwise."""
    tensor = frames.tensor() if isinstance(frames, FrameView) else as_frame_tensor(frames)
    count = tensor.shape[0]
    if envs is None:
        if count != num_envs:
            raise ValueError(f"frames of {count} envs without their indices (envs=); this scorer has {num_envs} envs")
        index = np.arange(num_envs)
    else:
        index = np.asarray(envs, dtype=np.int64).reshape(-1)
        if index.shape[0] != count:
            raise ValueError(f"envs names {index.shape[0]} envs for {count} frames")
        if index.size and (int(index.min()) < 0 or int(index.max()) >= num_envs):
            raise ValueError(f"envs must be indices 0..{num_envs - 1}, got {index.min()}..{index.max()}")
        if np.unique(index).size != index.size:
            raise ValueError("envs names an env twice; a step gives each env one frame")
    first = np.zeros(count, dtype=bool) if starts is None else np.asarray(starts, dtype=bool).reshape(-1)
    if first.shape[0] != count:
        raise ValueError(f"starts holds {first.shape[0]} values for {count} frames")
    return tensor, index, first


class EpisodeJudge(Protocol):
    """What :class:`EpisodeStepScorer` asks of a judge that watches the episode: a state for a stack's envs, and a
    step of the stepping envs' frames (uint8 (B, 3, h, w) at its input size, its ``preprocess``'s) into it."""

    device: torch.device
    multi_criteria: bool

    def new_state(self, num_envs: int) -> Any: ...

    def step_images(
        self, state: Any, images: torch.Tensor, envs: np.ndarray, starts: np.ndarray, due: np.ndarray
    ) -> torch.Tensor:
        """The due envs' rewards (due.sum(), criteria), in the order of ``envs``."""
        ...


class EpisodeStepScorer:
    """A judge that watches the episode, scoring a stack's steps (``reward.protocol.StepScorer``; see the module
    docstring): each range's stepping envs' frames into the judge's state of this stack, the due envs' rewards
    into the step's."""

    episode_ends_only = False

    def __init__(self, judge: EpisodeJudge, num_envs: int):
        self.judge = judge
        self.state = judge.new_state(int(num_envs))
        self._plan: StepPlan | None = None

    def begin(self, plan: StepPlan) -> None:
        self._plan = plan

    def needs_frames(self, rows: slice) -> bool:
        assert self._plan is not None, "begin() plans the step first"
        return bool(self._plan.stepping[rows].any())

    @torch.inference_mode()
    def submit(self, pixels: torch.Tensor, rows: slice, out: torch.Tensor, timer: StageTimer = NULL_TIMER) -> None:
        plan = self._plan
        assert plan is not None, "begin() plans the step first"
        stepping = np.flatnonzero(plan.stepping[rows])
        if not stepping.size:
            return
        envs = stepping + rows.start
        every = stepping.size == rows.stop - rows.start
        images = pixels if every else pixels.index_select(0, torch.as_tensor(stepping, device=pixels.device))
        due = plan.due[envs]
        with timer.stage("encode"):
            rewards = self.judge.step_images(self.state, images, envs, plan.step[envs] == 1, due)
        with timer.stage("reward"):
            rewards = rewards if self.judge.multi_criteria else rewards[:, 0]
            if every and bool(due.all()):
                out.copy_(rewards)
            elif due.any():
                index = torch.as_tensor(stepping[due], device=out.device)
                out.index_copy_(0, index, rewards.to(out.dtype))


def score_episodes(
    score_episode: Any, frames: Any, episodes: Sequence[Any] | None, columns: int, device: torch.device, name: str
) -> torch.Tensor:
    """Rewards (N, columns) float32 of uint8 frames (N, H, W, 3) in memory, each episode's (``episodes``: each one's
    frame indices, in order) by ``score_episode`` (its frames (T, H, W, 3) -> (T, columns)), as the stack gives them
    at each of its steps."""
    if episodes is None:
        raise ValueError(
            f"{name} reads an episode's earlier frames: give the frames' episodes (each one's frame indices, in order)"
        )
    tensor = as_frame_tensor(frames)
    out = torch.full((tensor.shape[0], columns), float("nan"), device=device)
    for indices in episodes:
        index = np.asarray(indices, dtype=np.int64)
        if index.size:
            rewards = score_episode(tensor[torch.as_tensor(index)])
            out[torch.as_tensor(index, device=device)] = rewards.float().view(index.size, columns)
    return out


class EpisodeJudgeModel:
    """The half of :class:`~vlmrm_fast.reward.protocol.RewardModel` that the judges that watch the episode share
    (the window judge, the prefix judge): what they are and how they load come from their frame judge
    (``frame_judge``, a ``reward.judge.JudgeRewardModel``: the prompts, the image processor, the vision tower); a
    step's frames are resized to the judge's input size (``preprocess``) and go to its :class:`EpisodeStepScorer`;
    frames in memory are scored episode by episode (``score_episode``)."""

    frame_judge: Any
    chunk_size: int
    what: str  # the family in a few words, for messages ("the window judge")

    # ------------------------------------------------------------------ the family
    @classmethod
    def check_spec(cls, spec: Any) -> None:
        """Every judge's checks (``JudgeRewardModel.check_spec``)."""
        from vlmrm_fast.reward.judge import JudgeRewardModel

        JudgeRewardModel.check_spec(spec)

    @classmethod
    def require_weights(cls, spec: Any) -> None:
        from vlmrm_fast.reward.judge import JudgeRewardModel

        JudgeRewardModel.require_weights(spec)

    @classmethod
    def criterion_kinds_of(cls) -> tuple[str, ...]:
        from vlmrm_fast.reward.judge import JudgeRewardModel

        return JudgeRewardModel.criterion_kinds_of()

    # ------------------------------------------------------------------ what it is
    @property
    def name(self) -> str:
        return str(self.frame_judge.name)

    @property
    def random_init(self) -> bool:
        return bool(self.frame_judge.random_init)

    def parameter_count(self) -> int:
        return int(self.frame_judge.parameter_count())

    @property
    def criterion_kinds(self) -> tuple[str, ...]:
        return self.criterion_kinds_of()

    @property
    def device(self) -> torch.device:
        return torch.device(self.frame_judge.device)

    @property
    def criteria(self) -> tuple[Any, ...]:
        return tuple(self.frame_judge.criteria)

    @property
    def multi_criteria(self) -> bool:
        return bool(self.frame_judge.multi_criteria)

    @property
    def schedule(self) -> Any:
        return self.frame_judge.schedule

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.frame_judge.image_size)  # type: ignore[return-value]

    # ------------------------------------------------------------------ a stack's steps
    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        """uint8 frames (num_frames, 3, h, w) at the judge's input size: what a step hands its scorer."""
        return torch.empty((num_frames, 3, *self.image_size), dtype=torch.uint8, device=self.device)

    @torch.inference_mode()
    def preprocess(self, view: Any, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER) -> torch.Tensor:
        """Lent frames -> uint8 (N, 3, h, w) at the judge's input size, on its device (into ``out``)."""
        with timer.stage("preprocess"):
            images = self._resized(view.tensor() if isinstance(view, FrameView) else as_frame_tensor(view))
            return images if out is None else out.copy_(images)

    def _resized(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames (B, H, W, 3) -> (B, 3, h, w) at the judge's input size, on the device (the frame judge's
        resize: bicubic with antialiasing)."""
        from torchvision.transforms.v2 import functional as tvF

        images = frames.to(self.device, non_blocking=True).permute(0, 3, 1, 2)
        if tuple(images.shape[-2:]) != self.image_size:
            images = tvF.resize(
                images, list(self.image_size), interpolation=tvF.InterpolationMode.BICUBIC, antialias=True
            )
        return images

    def step_scorer(self, num_envs: int, episode_length: int | None = None) -> EpisodeStepScorer:
        """A state of its own for ``num_envs`` envs (checked against the device's memory, then allocated), fed as
        they step."""
        return EpisodeStepScorer(self, num_envs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ frames in memory
    def score_episode(self, frames: Any) -> torch.Tensor:
        raise NotImplementedError

    def _ask(self, criteria: Sequence[Any], multi_criteria: bool) -> None:
        """Replaces the questions (and what the family computed of them)."""
        raise NotImplementedError

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
        """Rewards (N, K) float32 of uint8 frames (N, H, W, 3) in memory for ``criteria`` (default its own): each
        episode's (``episodes``, required) as the stack gives them at each of its steps."""
        if window_step != 1:
            raise ValueError(
                f"{self.what} scores every frame of an episode, as the env stack does: leave window_step at 1"
            )
        if criteria is None:
            return score_episodes(self._columns, frames, episodes, len(self.criteria), self.device, self.name)
        from vlmrm_fast.reward.kinds import as_criteria

        previous, previous_multi = self.criteria, self.multi_criteria
        asked = as_criteria(criteria)
        self._ask(asked, True)
        try:
            return score_episodes(self.score_episode, frames, episodes, len(asked), self.device, self.name)
        finally:
            self._ask(previous, previous_multi)

    def _columns(self, frames: Any) -> torch.Tensor:
        rewards = self.score_episode(frames)
        return rewards if rewards.ndim == 2 else rewards[:, None]

    def close(self) -> None:
        self.frame_judge.close()
