"""WindowJudge: a question asked of the last K frames of each env's episode at once (Robometer's and GVL's
several frames per query), with the judge's scores (``yes_vs_no``, ``log_p_yes``, ``log_odds``).

The window is a streamed window's (``reward/window.py``): the env's last ``window`` frames, the episode's first
frame standing in for the frames before it, never a frame of the episode before; the judge reads ``reads`` of
them (default all), chosen as a video model reads its frames out of a window (``subsample_indices``: evenly
spaced, the newest always read). The frames go to the model as its family's template takes several frames
(``JudgeFamily.window_input``): one video item for the Qwen families, an image per frame for SmolVLM and
Idefics3. The prompt is the model's chat template's for those frames (``models/judge/prompt.py``), the
question after them by default.

A step costs one frame's vision tower and the window's tokens through the language model:

    frame (B envs) -> resized to the judge's input size, the family's image processor on the device
      -> the vision tower, once per frame; a Qwen video's tower sees its frames in groups of two (its
         temporal patch), so the item is the group the newest frame closes (the frame ``gap`` steps before it
         and itself): its tokens depend on those two frames alone
      -> the item's vision tokens into the env's ring (``EpisodeRing``, ``window`` slots on the device)
      -> the window's items read back, oldest first, as the tower's output of the whole window
      -> the language model over the window's prompt from the cached start of the prompt (``JudgeRewardModel``'s
         question groups), logits at the last position -> the criteria's scores

A window's tokens are not reused by the next window (each token's keys depend on the tokens before it, and
the window's first frame changes every step): the saving over a transformers forward per step is the
vision tower (once per frame instead of once per window holding it) and the prompt's start.

It is the ``window_judge`` reward family (``reward/families.py``): a judge's spec with a ``window``
(``window: {frames: 8}``, and ``reads``); in the env stack its per-step scorer keeps the rings of the stack's
envs (``reward/episode_scorer.py``); with ``score_every: n`` every frame still goes through the tower into its
ring, and the language model runs for the due envs only.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.models.judge.adapter import stack_vision, unstack_vision
from vlmrm_fast.models.judge.prompt import DEFAULT_PROMPT_ORDER
from vlmrm_fast.reward.episode_memory import EpisodeRing
from vlmrm_fast.reward.episode_scorer import EpisodeJudgeModel, step_arguments
from vlmrm_fast.reward.judge import DEFAULT_IMAGE_SIZE, DEFAULT_JUDGE_CHUNK, JudgeRewardModel, judge_of_spec
from vlmrm_fast.reward.protocol import RewardNeeds
from vlmrm_fast.reward.schedule import EVERY_STEP, ScoreSchedule
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.reward.window import WindowSpec, subsample_indices
from vlmrm_fast.runtime.memory import check_judge_frames_fit

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Rings:
    """What a window judge keeps of a stack's envs: each env's last frames' vision tokens, and for a Qwen video
    whose pairs are ``gap`` frames apart the frames each new one pairs with."""

    num_envs: int
    items: EpisodeRing
    frames: EpisodeRing | None


class WindowJudge(EpisodeJudgeModel):
    """A judge of windows of ``window`` frames per env (see the module docstring): the ``window_judge`` family's
    :class:`~vlmrm_fast.reward.protocol.RewardModel`, and with ``num_envs`` an
    :class:`~vlmrm_fast.reward.episode_scorer.EpisodeScorer` of that many envs (``step``)."""

    what = "the window judge"

    def __init__(
        self,
        judge: Any,
        criteria: Sequence[Any],
        *,
        num_envs: int | None = None,
        window: int,
        reads: int | None = None,
        device: torch.device,
        multi_criteria: bool = False,
        batch_size: int | None = None,
        image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE,
        precision: str = "fp32",
        prompt_order: str = DEFAULT_PROMPT_ORDER,
        schedule: ScoreSchedule = EVERY_STEP,
    ):
        self.window = positive_int(window, "window.frames")
        read = self.window if reads is None else positive_int(reads, "window.reads")
        family = judge.family
        if family.window_input is None:
            raise FieldError(
                "window",
                f"{judge.model_id} is a {family.name}, whose template takes one image per prompt, neither a video nor "
                "several images: ask it about single frames (leave window out), or use a family that takes windows "
                "(Qwen2-VL, Qwen2.5-VL, Qwen3-VL: a video; SmolVLM, Idefics3: several images)",
            )
        self.video = family.window_input == "video"
        self.reads = subsample_indices(self.window, read)  # of the window's frames, 0 the oldest
        self.chunk_size = int(batch_size or DEFAULT_JUDGE_CHUNK)
        self.frame_judge = JudgeRewardModel(
            judge,
            criteria,
            device=device,
            multi_criteria=multi_criteria,
            batch_size=batch_size,
            image_size=image_size,
            precision=precision,
            prompt_order=prompt_order,
            frames=read,
            video=self.video,
            schedule=schedule,
        )
        adapter = self.frame_judge.adapter
        self.gap = 0
        newest = self.window - 1
        if self.video:
            self.gap, self.item_ages = self._video_items(adapter.frames_per_token)
            grid = self.frame_judge.layout.inputs["video_grid_thw"][0]
            patch = adapter.image_processor.patch_size
            self.video_size = (int(grid[1]) * patch, int(grid[2]) * patch)
        else:
            self.item_ages = [newest - r for r in self.reads]
        # What the ring keeps of a frame: its item's vision tokens, shaped by one blank item through the tower.
        blank = torch.zeros((1, 3, *self.frame_judge.image_size), dtype=torch.uint8, device=self.device)
        with torch.inference_mode():
            like = self._encode(blank)
        self._like = like
        self.item_shape = tuple(stack_vision(like).shape[1:])
        self.num_envs = 0
        self.state: _Rings | None = None  # the rings ``step`` feeds (``num_envs`` given)
        if num_envs is not None:
            self.state = self.new_state(positive_int(num_envs, "num_envs"))

    # ------------------------------------------------------------------ the family
    @classmethod
    def from_spec(cls, spec: RewardModelSpec) -> WindowJudge:
        window = spec.window
        assert window is not None  # the family claims a judge's spec with a window
        judge, criteria, options = judge_of_spec(spec)
        return cls(judge, criteria, window=window.frames, reads=window.reads, **options)

    @classmethod
    def check_spec(cls, spec: RewardModelSpec) -> None:
        """Every judge's checks, and the window's: streamed (the last K frames), given as the family takes frames."""
        super().check_spec(spec)
        window = spec.window
        assert window is not None
        if window.timing != "streamed":
            raise FieldError(
                "window.timing",
                f"{window.timing!r} is a video model's; a judge's window is the env's last {window.frames} frames, "
                "asked about at every step: leave window.timing out (streamed), or ask about the episode so far "
                "(prefix: {max_frames: ...})",
            )
        if window.embedding != "video":
            raise FieldError(
                "window.embedding",
                f"{window.embedding!r} averages a CLIP's embeddings; a judge takes a window's frames as its family's "
                "template does (one video for Qwen, several images for SmolVLM and Idefics3): leave it out",
            )
        if window.pixel_values != "model":
            raise FieldError(
                "window.pixel_values",
                "is RoboCLIP's S3D-G input; a judge reads its own processor's values: leave it out",
            )

    @classmethod
    def needs_of(cls, spec: RewardModelSpec) -> RewardNeeds:
        assert spec.window is not None
        return _window_judge_needs(spec.window.frames)

    @property
    def needs(self) -> RewardNeeds:
        return _window_judge_needs(self.window)

    # ------------------------------------------------------------------ a stack's state
    def new_state(self, num_envs: int) -> _Rings:
        """The rings of ``num_envs`` envs, refused in one line beyond the device's memory before they are allocated."""
        dtype = self.frame_judge.dtype
        shape = self.item_shape
        each = math.prod(shape) * dtype.itemsize * self.window
        pixels = math.prod((*getattr(self, "video_size", (0, 0)), 3)) * (self.gap + 1) if self.gap else 0
        check_judge_frames_fit(
            "window.frames",
            num_envs,
            each + pixels,
            f"the windows' vision tokens of {num_envs:,} envs ({self.window} frames of {shape[-2]:,} tokens each)",
            "give fewer frames per window (window.frames) or fewer envs",
            self.device,
        )
        items = EpisodeRing(num_envs, self.window, shape, dtype, self.device)
        # A Qwen video's item is a group of frames: the frames before the newest it groups with, as the processor
        # resized them (uint8, channels last).
        frames = (
            EpisodeRing(num_envs, self.gap + 1, (*self.video_size, 3), torch.uint8, self.device)
            if self.video and self.gap
            else None
        )
        state = _Rings(num_envs, items, frames)
        self.num_envs = num_envs
        logger.info("window judge: %s", self.describe(state))
        return state

    @property
    def ring(self) -> EpisodeRing:
        """The vision tokens' rings of ``step``'s envs."""
        assert self.state is not None, "give num_envs to step the judge yourself"
        return self.state.items

    def _video_items(self, group: int) -> tuple[int, list[int]]:
        """A Qwen video's items: the gap between the frames its temporal patch groups (the same in every group, so
        that each frame closes one group and the group's tokens are computed once), and each item's age back from
        the window's newest frame."""
        reads = self.reads
        fix = (
            f"give window.reads a multiple of {group} that divides window.frames ({self.window}), or leave it out "
            f"(all {self.window} frames)"
        )
        if group != 2 or len(reads) % group:
            raise FieldError(
                "window.reads",
                f"a Qwen video groups its frames {group} at a time (its temporal patch), and the judge reads "
                f"{len(reads)}: {fix}",
            )
        gaps = {reads[i + 1] - reads[i] for i in range(0, len(reads), group)}
        starts = {reads[i] for i in range(0, len(reads), group)}
        if len(gaps) != 1 or len(starts) != len(reads) // group:
            raise FieldError(
                "window.reads",
                f"reading {len(reads)} of {self.window} frames ({reads}) pairs frames at unequal distances, so no "
                f"frame's pair could be computed once: {fix}",
            )
        (gap,) = gaps
        return gap, [self.window - 1 - reads[i + 1] for i in range(0, len(reads), group)]

    # ------------------------------------------------------------------ properties
    def _ask(self, criteria: Sequence[Any], multi_criteria: bool) -> None:
        self.frame_judge.set_criteria(criteria, multi_criteria=multi_criteria)

    def describe(self, state: _Rings | None = None) -> str:
        """The window and its prompt, and the rings' memory for the envs of ``state`` (default: the last made)."""
        read = len(self.reads)
        frames = f"the last {self.window} frames" + (f", {read} of them read" if read != self.window else "")
        given = "as one video" if self.video else "as images"
        state = state or self.state
        rings = ""
        if state is not None or self.num_envs:
            count = state.num_envs if state is not None else self.num_envs
            held = self.window * math.prod(self.item_shape) * self.frame_judge.dtype.itemsize * count
            rings = f"; rings of {held / 2**20:,.1f} MiB for {count:,} envs on {self.device}"
        return (
            f"{self.frame_judge.judge.model_id}: {frames} {given}, {self.frame_judge.layout.length:,} tokens per "
            f"prompt{rings}"
        )

    # ------------------------------------------------------------------ vision
    def _encode(self, images: torch.Tensor, earlier: torch.Tensor | None = None) -> Any:
        """The vision tower's output of each item: frames (B, 3, h, w) at the input size; for a video, ``earlier``
        (B, h', w', 3) the frames each groups with, as the video processor resized them (None: itself)."""
        adapter = self.frame_judge.adapter
        if not self.video:
            return adapter.encode(adapter.pixels(images).to(self.frame_judge.dtype))
        newest = adapter.video_frames(images, self.video_size)
        earlier = newest if earlier is None else earlier.float()
        return adapter.encode_frame_groups(torch.stack([earlier, newest], dim=1))

    # ------------------------------------------------------------------ a step
    @torch.inference_mode()
    def step(self, frames: Any, envs: Any = None, starts: Any = None) -> torch.Tensor:
        """Rewards of the windows that end at ``frames`` (see ``reward/episode_scorer.py``)."""
        assert self.state is not None, "give num_envs to step the judge yourself (the stack uses step_scorer)"
        tensor, envs, starts = step_arguments(frames, envs, starts, self.state.num_envs)
        rewards = self.step_images(self.state, self._resized(tensor), envs, starts, np.ones(len(envs), dtype=bool))
        return rewards if self.multi_criteria else rewards[:, 0]

    @torch.inference_mode()
    def step_images(
        self, state: _Rings, images: torch.Tensor, envs: np.ndarray, starts: np.ndarray, due: np.ndarray
    ) -> torch.Tensor:
        """Each env's new frame (``images`` uint8 (B, 3, h, w) at the input size) into its rings; the rewards
        (due.sum(), criteria) of the due envs' windows."""
        out = []
        for start in range(0, len(envs), self.chunk_size):
            part = slice(start, start + self.chunk_size)
            rewards = self._step(state, images[part], envs[part], starts[part], due[part])
            if rewards is not None:
                out.append(rewards)
        if not out:
            return torch.empty((0, len(self.criteria)), device=self.device)
        return torch.cat(out) if len(out) > 1 else out[0]

    def _step(
        self, state: _Rings, images: torch.Tensor, envs: np.ndarray, starts: np.ndarray, due: np.ndarray
    ) -> torch.Tensor | None:
        if state.frames is not None:
            resized = self.frame_judge.adapter.video_frames(images, self.video_size)
            state.frames.append(envs, resized.round().to(torch.uint8), starts)
            earlier = state.frames.read_back(envs, [self.gap])[:, 0]
            vision = self._encode(images, earlier)
        else:
            vision = self._encode(images)
        state.items.append(envs, stack_vision(vision), starts)
        scored = envs if due.all() else envs[due]
        if not scored.size:
            return None
        items = state.items.read_back(scored, self.item_ages)  # (B, items, levels, tokens, width), oldest first
        return self.frame_judge.score_vision(unstack_vision(items.flatten(0, 1), self._like), len(scored))

    # ------------------------------------------------------------------ offline
    @torch.inference_mode()
    def score_episode(self, frames: Any) -> torch.Tensor:
        """The rewards (T,) or (T, criteria) of the T windows of one episode's frames (T, H, W, 3), each frame through
        the vision tower once: what ``step`` gives over the episode."""
        tensor = as_frame_tensor(frames)
        count = tensor.shape[0]
        items = []
        for start in range(0, count, self.chunk_size):
            images = self._resized(tensor[start : start + self.chunk_size])
            earlier = None
            if self.video and self.gap:
                before = np.maximum(np.arange(start, start + images.shape[0]) - self.gap, 0)
                earlier = self.frame_judge.adapter.video_frames(self._resized(tensor[before]), self.video_size)
            items.append(stack_vision(self._encode(images, earlier)))
        every = torch.cat(items)  # (T, levels, tokens, width): each frame's item
        ages = torch.as_tensor(self.item_ages, device=every.device)
        rewards = []
        for start in range(0, count, self.chunk_size):
            steps = torch.arange(start, min(start + self.chunk_size, count), device=every.device)
            index = (steps[:, None] - ages[None, :]).clamp_(min=0)  # (b, items): the episode's first frame before it
            window = every[index.flatten()]
            rewards.append(self.frame_judge.score_vision(unstack_vision(window, self._like), len(steps)))
        out = torch.cat(rewards)
        return out if self.multi_criteria else out[:, 0]


def _window_judge_needs(frames: int) -> RewardNeeds:
    """What a window judge asks of a stack: a window model's (``reward.window_model.window_needs``)."""
    from vlmrm_fast.reward.window_model import window_needs

    return window_needs(WindowSpec(frames))
