"""Reward models of windows of frames: a video model reading the window, or the mean of a frame model's
embeddings (``reward/window.py`` says what a window is; docs/video-rewards.md how to use them).

A window model scores in two stages, so that the env stack encodes each frame once, when it is
drawn, and keeps what a window needs in a ring per env (``reward/window_ring.py``):

- ``frame_items(pixels)``: each preprocessed frame -> what the ring keeps of it: the frame itself
  for a video model, its normalised embedding for the mean of frames;
- ``window_rewards(items)``: the items a window reads (``reads(K)``, oldest first) -> one embedding
  per window (``window_embeddings``), which the reward head (``reward/head.py``, the frame models'
  formulas and kernels) turns into rewards; a model whose text depends on the window (X-CLIP) scores
  each window against its own prompt embeddings (:func:`per_window_rewards`).

Offline, :meth:`WindowRewardModel.score_windows` runs both on an episode's frames (each frame's item
computed once, the windows gathered from them), :meth:`WindowRewardModel.score_frames` scores the paper
code's windows inside episodes, and ``model(windows)`` uint8 windows (N, K, H, W, 3).

The two window families (``reward/families.py``: ``video`` for a video model's name, ``mean_of_frames`` for
a window on a frame model's) load from a spec here (``from_spec``), check the fields they take
(``check_spec``: the window against the model, a video model's backend and precision), and declare what a
window asks of a stack (:func:`window_needs`).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.frames.preprocess import FramePreprocessor, as_frame_tensor
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.reward.head import RewardHead
from vlmrm_fast.reward.kinds import (
    CRITERION_KINDS,
    BinaryCriterion,
    Criterion,
    GoalBaselineCriterion,
    as_criteria,
    unique_prompts,
)
from vlmrm_fast.reward.model import DEFAULT_CHUNK, VLMRewardModel
from vlmrm_fast.reward.protocol import Need, RewardNeeds
from vlmrm_fast.reward.schedule import EVERY_STEP, ScoreSchedule
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.reward.window import WindowSpec, paper_windows, subsample_indices
from vlmrm_fast.reward.window_ring import WindowRing
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer

#: The encoder backends and precisions a video model runs (torch.compile of the whole model, or eager).
VIDEO_BACKENDS = ("auto", "torch", "compile")
VIDEO_PRECISIONS = ("auto", "fp32", "fp16", "bf16")


def window_needs(window: WindowSpec) -> RewardNeeds:
    """What a model of ``window`` asks of a stack: episodes of its frames, the state that ended one (never the
    next episode's first frame among this one's), rewards as the envs step, and for an episode-end window the
    time limit it spreads over."""
    return RewardNeeds(
        episodes=True,
        frames=window.frames,
        too_few_steps=Need("window.frames", "no window would ever fill"),
        terminal_state="a window would then mix the next episode's first frame into this one's last window",
        scored_as_it_steps="a window model scores each env's window as it steps",
        time_limit=(
            Need("window.timing", "episode_end spreads a window over an episode's time limit", "use timing: streamed")
            if window.timing == "episode_end"
            else None
        ),
    )


def _check_window_schedule(spec: RewardModelSpec) -> WindowSpec:
    """The spec's window, refused where its schedule cannot score it (an episode-end window scores each episode
    once) or the spec has none (a video model's name asks for one)."""
    window = spec.window
    if window is None:
        from vlmrm_fast.models.video import video_model_info

        frames = video_model_info(spec.model).num_frames
        raise FieldError(
            "window",
            f"model {spec.model!r} scores windows of frames, not single frames; add window: {{frames: {frames}}} "
            f"(its {frames} frames per window; docs/video-rewards.md)",
        )
    if window.timing == "episode_end" and spec.score_every != 1:
        raise FieldError(
            "score_every",
            "window.timing: episode_end scores each episode once, on its last step; leave score_every at 1",
        )
    if window.timing == "episode_end" and spec.between_scores != "zero":
        raise FieldError(
            "between_scores",
            "window.timing: episode_end scores each episode once, on its last step: the steps before get 0; "
            "leave between_scores at zero",
        )
    return window


def video_model_names() -> str:
    """The video models' names, for messages."""
    from vlmrm_fast.models.video import known_video_models

    return ", ".join(name for name in known_video_models() if "tiny" not in name)


def _check_pixel_values(spec: RewardModelSpec, window: WindowSpec, reads_unit_pixels: bool) -> None:
    """``pixel_values: 0-255`` only for a video model that reads plain [0, 1] values (S3D-G): RoboCLIP's input; and
    ``reads`` only for a judge's window (a video model reads its own number of frames, a mean every frame)."""
    if window.reads is not None:
        raise FieldError(
            "window.reads",
            f"sets how many of a window's frames a generative VLM judge's prompt holds, and {spec.model!r} is no judge "
            "(a video model reads its own number of a window's frames, the mean of frames all of them): leave "
            "window.reads out",
        )
    if window.pixel_values == "0-255" and not reads_unit_pixels:
        raise FieldError(
            "window.pixel_values",
            f"'0-255' is RoboCLIP's input to S3D-G, whose authors' frames are in [0, 1]; {spec.model!r} reads its own "
            "normalised values: leave window.pixel_values out (model)",
        )


class WindowRewardModel(abc.ABC):
    """Windows of frames in, rewards out: the :class:`~vlmrm_fast.reward.protocol.RewardModel` interface, whose
    per-step scorer is a :class:`~vlmrm_fast.reward.window_ring.WindowRing` of the envs' windows, a ``window``,
    and the two stages the rings run (see the module docstring)."""

    window: WindowSpec
    schedule: ScoreSchedule
    device: torch.device
    multi_criteria: bool
    chunk_size: int  # windows per encoder batch (frames per batch for the mean of frames' encoder)
    head: RewardHead
    preprocessor: FramePreprocessor
    name: str

    @property
    def criteria(self) -> tuple[Criterion, ...]:
        return self.head.criteria

    @property
    def needs(self) -> RewardNeeds:
        return window_needs(self.window)

    @classmethod
    def needs_of(cls, spec: RewardModelSpec) -> RewardNeeds:
        return window_needs(_check_window_schedule(spec))

    @classmethod
    def criterion_kinds_of(cls) -> tuple[str, ...]:
        """The kinds scored from an embedding (every kind with a formula)."""
        return tuple(name for name, kind in CRITERION_KINDS.items() if kind.formula is not None)

    @property
    def criterion_kinds(self) -> tuple[str, ...]:
        return self.criterion_kinds_of()

    @property
    def random_init(self) -> bool:
        return self.weights.startswith("random init")

    @property
    @abc.abstractmethod
    def weights(self) -> str:
        """Where its weights came from ("random init (seed N)", a checkpoint, a tag)."""

    @abc.abstractmethod
    def parameter_count(self) -> int: ...

    def step_scorer(self, num_envs: int, episode_length: int | None = None) -> WindowRing:
        """The envs' windows, kept on the device as they step (``reward/window_ring.py``)."""
        return WindowRing(self, num_envs, episode_length)

    # ------------------------------------------------------------------ the two stages
    @property
    @abc.abstractmethod
    def item_shape(self) -> tuple[int, ...]:
        """The shape of what a ring keeps of one frame."""

    @property
    @abc.abstractmethod
    def item_dtype(self) -> torch.dtype: ...

    @abc.abstractmethod
    def reads(self, frames: int) -> list[int]:
        """Which of a window's ``frames`` frames (0 the oldest) its embedding reads, oldest first."""

    @abc.abstractmethod
    def frame_items(self, pixels: torch.Tensor) -> torch.Tensor:
        """Preprocessed frames (n, 3, S, S) -> what a ring keeps of each, (n, *item_shape)."""

    @abc.abstractmethod
    def window_embeddings(self, items: torch.Tensor) -> torch.Tensor:
        """The items of windows (n, len(reads(K)), *item_shape), oldest first -> embeddings (n, D)."""

    def window_rewards(self, items: torch.Tensor, head: RewardHead | None = None) -> torch.Tensor:
        """The items of windows (see :meth:`window_embeddings`) -> rewards (n, criteria) of ``head``'s criteria
        (default: the model's own)."""
        return (self.head if head is None else head)(self.window_embeddings(items))

    def rewards_of(self, rewards: torch.Tensor) -> torch.Tensor:
        """The model's own criteria' rewards (n, criteria) as it returns them: (n,), or (n, K) with several criteria."""
        return rewards if self.multi_criteria else rewards[:, 0]

    # ------------------------------------------------------------------ RewardModel
    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        size = self.preprocessor.spec.size
        return torch.empty((num_frames, 3, size, size), dtype=self.preprocessor.dtype, device=self.device)

    @torch.inference_mode()
    def preprocess(
        self, view: FrameView, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """The frames of a view -> the model's input for each frame (N, 3, S, S)."""
        with timer.stage("preprocess"):
            return self.preprocessor.run(view, out)

    @torch.inference_mode()
    def __call__(self, frames: Any) -> torch.Tensor:
        """``frames``: uint8 windows (N, K, H, W, 3), oldest frame first, numpy or torch -> rewards (N,)
        (or (N, criteria))."""
        windows = frames
        if isinstance(windows, np.ndarray):
            windows = torch.from_numpy(np.ascontiguousarray(windows))
        if not isinstance(windows, torch.Tensor) or windows.ndim != 5:
            shape = tuple(getattr(windows, "shape", ()))
            raise ValueError(
                f"{self.name} scores windows of frames (N, K, H, W, 3), got shape {shape}"
                + (
                    "; a single frame per env is no window: stack each env's K frames, oldest first"
                    if len(shape) == 4
                    else ""
                )
            )
        n, k = windows.shape[:2]
        return self.score_windows(windows.reshape((n * k, *windows.shape[2:])), np.arange(n * k).reshape(n, k))

    @torch.inference_mode()
    def score_windows(self, frames: Any, windows: Any, criteria: Sequence[Any] | None = None) -> torch.Tensor:
        """Rewards of windows of ``frames`` (uint8 (F, H, W, 3)): ``windows`` (W, K) holds each window's
        frame indices, oldest first (any K: the model reads ``reads(K)`` of them). Each frame is
        preprocessed and turned into its item once. The model's own criteria' rewards as it returns them,
        or (W, len(criteria)) for other ``criteria``."""
        frames = as_frame_tensor(frames)
        windows = torch.as_tensor(np.asarray(windows), dtype=torch.long)
        if windows.ndim != 2 or windows.shape[0] == 0:
            raise ValueError(f"windows must be (W, K) frame indices, oldest first, got shape {tuple(windows.shape)}")
        batch = max(1, self.chunk_size)
        needed = torch.unique(windows)  # each frame that some window holds, preprocessed and encoded once
        if int(needed.min()) < 0 or int(needed.max()) >= frames.shape[0]:
            raise ValueError(
                f"windows index frames 0..{frames.shape[0] - 1}, got {int(needed.min())}..{int(needed.max())}"
            )
        items = torch.cat(
            [
                self.frame_items(self.preprocessor(frames[needed[start : start + batch]]))
                for start in range(0, needed.shape[0], batch)
            ]
        )
        position = torch.searchsorted(needed, windows[:, self.reads(windows.shape[1])]).to(items.device)
        head = None if criteria is None else self.head_for(criteria)
        rewards = [
            self.window_rewards(items[position[start : start + batch]], head)
            for start in range(0, position.shape[0], batch)
        ]
        out = torch.cat(rewards) if len(rewards) > 1 else rewards[0]
        return self.rewards_of(out) if criteria is None else out

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
        """Rewards (N, K) float32 of uint8 frames (N, H, W, 3) for ``criteria`` (default its own) by the paper code's
        windows: ``window_size`` frames (default the model's window) starting every ``window_step`` frames inside
        each episode (``episodes``: each one's frame indices, in order), each window's reward on its last frame,
        NaN on the frames that end no window (every frame of an episode shorter than a window). Each frame is
        encoded once, each window embedded once for every criterion."""
        size = positive_int(window_size if window_size is not None else self.window.frames, "window_size")
        step = positive_int(window_step, "window_step")
        if episodes is None:
            raise ValueError(
                f"{self.name} scores windows of an episode's frames: give the frames' episodes (each one's frame "
                "indices, in order)"
            )
        frames = as_frame_tensor(frames)
        columns = len(self.criteria) if criteria is None else len(as_criteria(criteria))
        out = torch.full((frames.shape[0], columns), float("nan"), device=self.device)
        episodes = [np.asarray(idx) for idx in episodes]
        windows = [idx[paper_windows(len(idx), size, step)] for idx in episodes if len(idx) >= size]
        if windows:  # (an episode shorter than a window holds none)
            stacked = np.concatenate(windows)
            rewards = self.score_windows(frames, stacked, criteria).float()
            out[torch.as_tensor(stacked[:, -1], device=self.device)] = rewards.view(rewards.shape[0], columns)
        return out

    def head_for(self, criteria: Sequence[Any]) -> RewardHead:
        """A reward head of other ``criteria`` (goal-baseline, binary) on this model's text embeddings."""
        criteria = as_criteria(criteria)
        prompts = unique_prompts(criteria)
        text = dict(zip(prompts, self.text_embeddings(prompts)))
        return RewardHead(criteria, text.__getitem__, self.logit_scale_for(criteria), self.device)

    @abc.abstractmethod
    def text_embeddings(self, prompts: Sequence[str]) -> torch.Tensor:
        """Normalised (P, D) float32 text embeddings of ``prompts``."""

    @abc.abstractmethod
    def logit_scale_for(self, criteria: Sequence[Criterion]) -> float:
        """The softmax scale of binary ``criteria`` (refused where the model has none and a criterion no temperature)."""

    def describe(self) -> str:
        return f"{self.name}: {self.window.describe()}"


class MeanOfFramesModel(WindowRewardModel):
    """A frame model (a :class:`VLMRewardModel`, any open_clip family) scoring a window by the mean of
    its frames' normalised embeddings (the paper code's ``avg_frame``): each frame is encoded once, by
    the frame model's encoder backend, and the reward head scores the mean."""

    def __init__(self, frames: VLMRewardModel, window: WindowSpec):
        self.frames = frames
        self.window = window
        self.schedule = frames.schedule
        self.device = frames.device
        self.multi_criteria = frames.multi_criteria
        self.chunk_size = frames.chunk_size
        self.head = frames.head
        self.preprocessor = frames.preprocessor
        self.name = frames.clip.model_id

    @classmethod
    def from_spec(cls, spec: RewardModelSpec) -> MeanOfFramesModel:
        window = spec.window
        assert window is not None  # the family claims a spec with a window
        return cls(VLMRewardModel.from_spec(spec.replace(window=None)), window)

    @classmethod
    def check_spec(cls, spec: RewardModelSpec) -> None:
        window = _check_window_schedule(spec)
        _check_pixel_values(spec, window, reads_unit_pixels=False)
        if window.embedding == "video":
            raise FieldError(
                "window.embedding",
                f"'video' needs a video model, and {spec.model!r} embeds single frames: set window.embedding: "
                f"mean_of_frames (the mean of its frame embeddings), or use a video model ({video_model_names()})",
            )

    @classmethod
    def require_weights(cls, spec: RewardModelSpec) -> None:
        VLMRewardModel.require_weights(spec)

    @property
    def weights(self) -> str:
        return self.frames.clip.weights

    def parameter_count(self) -> int:
        return self.frames.parameter_count()

    @property
    def item_shape(self) -> tuple[int, ...]:
        return (self.frames.embed_dim,)

    @property
    def item_dtype(self) -> torch.dtype:
        return torch.float32

    def reads(self, frames: int) -> list[int]:
        return list(range(frames))

    def frame_items(self, pixels: torch.Tensor) -> torch.Tensor:
        self.frames._check_open()
        return F.normalize(self.frames._in_chunks(pixels, self.frames.encoder.encode_rows).float(), dim=-1)

    def window_embeddings(self, items: torch.Tensor) -> torch.Tensor:
        return items.mean(dim=1)

    def text_embeddings(self, prompts: Sequence[str]) -> torch.Tensor:
        return self.frames.embed_text(prompts)

    def logit_scale_for(self, criteria: Sequence[Criterion]) -> float:
        return self.frames.logit_scale

    def close(self) -> None:
        self.frames.close()

    def __repr__(self) -> str:
        return f"MeanOfFramesModel({self.frames!r}, window={self.window})"


class VideoWindowModel(WindowRewardModel):
    """A video model (``vlmrm_fast.models.video``) scoring a window: each frame is preprocessed as the
    model was trained (its ``info.preprocess``, by the fused kernel) and the ring keeps what the model
    computes of a frame alone (``frame_features``: ViCLIP's patch embeddings, computed once per frame)
    where that is no larger than the preprocessed frame, else the preprocessed frame, and the model reads its
    ``info.num_frames`` of a window's K (``subsample_indices``: evenly spaced, the newest kept), every
    due env's window in one batch of ``chunk_size`` (compiled, the batch fixed and padded, where
    ``compiled``)."""

    def __init__(
        self,
        video: Any,
        criteria: Sequence[Any],
        window: WindowSpec,
        *,
        multi_criteria: bool = False,
        schedule: ScoreSchedule = EVERY_STEP,
        batch_size: int | None = None,
        compiled: bool = False,
        compile_mode: str | None = None,
        resize_mode: str | None = None,
    ):
        self.video = video
        self._weights = str(video.weights)
        self.window = window
        self.schedule = schedule
        self.device = torch.device(video.device)
        self.multi_criteria = multi_criteria
        self.name = video.info.name
        self.chunk_size = int(batch_size or DEFAULT_CHUNK)
        spec = video.info.preprocess
        if resize_mode is not None:  # the geometry only: the model's own mean and std stay
            spec = dataclasses.replace(spec, resize_mode=resize_mode)
        if window.pixel_values == "0-255":  # RoboCLIP's S3D-G input: (x / 255 - 0) / (1 / 255), the raw values
            spec = dataclasses.replace(spec, std=(1 / 255, 1 / 255, 1 / 255))
        self.preprocessor = FramePreprocessor(spec, self.device, video.dtype)
        self._item_shape = ring_item_shape(video.info)
        self.keeps_features = self._item_shape == video.info.frame_feature_shape
        self.head = self.head_for(criteria)
        self.compiled = bool(compiled)
        self._features = self._uncompiled
        if self.compiled:
            self._features = torch.compile(self._uncompiled, dynamic=False, mode=compile_mode)

    @classmethod
    def from_spec(cls, spec: RewardModelSpec) -> VideoWindowModel:
        from vlmrm_fast.encoders.precision import resolve
        from vlmrm_fast.models.video import load_video_model

        window = spec.window
        assert window is not None  # check_spec refuses a video model's spec without one
        device = resolve_device(spec.device)
        dtype = resolve(spec.precision, device).dtype  # "auto": fp32 on the CPU, bf16 on a GPU (fp16 without bf16)
        video = load_video_model(spec.model, checkpoint=spec.checkpoint, device=device, dtype=dtype, seed=spec.seed)
        criteria, multi = spec.reward_criteria()
        compiled = spec.backend == "compile" or (spec.backend == "auto" and device.type == "cuda" and spec.batch_size)
        return cls(
            video,
            criteria,
            window,
            multi_criteria=multi,
            schedule=spec.schedule,
            batch_size=spec.batch_size,
            compiled=bool(compiled),
            compile_mode=spec.encoder_options.get("compile_mode"),
            resize_mode=spec.resize_mode,
        )

    @classmethod
    def check_spec(cls, spec: RewardModelSpec) -> None:
        model, window = spec.model, _check_window_schedule(spec)
        if window.embedding == "mean_of_frames":
            raise FieldError(
                "window.embedding",
                f"mean_of_frames averages a frame model's embeddings, and {model!r} embeds the window itself: "
                "leave window.embedding out (video)",
            )
        from vlmrm_fast.models.video import video_model_info

        preprocess = video_model_info(model).preprocess  # no mean or std of its own: plain [0, 1] values
        _check_pixel_values(spec, window, preprocess.mean == (0.0,) * 3 and preprocess.std == (1.0,) * 3)
        if spec.backend not in VIDEO_BACKENDS:
            raise FieldError(
                "backend",
                f"{spec.backend!r} builds CLIP image towers; video model {model!r} runs on "
                f"{' or '.join(map(repr, VIDEO_BACKENDS[1:]))} (or 'auto')",
            )
        if spec.precision not in VIDEO_PRECISIONS:
            raise FieldError(
                "precision", f"{spec.precision!r}: video model {model!r} runs in {', '.join(VIDEO_PRECISIONS)}"
            )
        unknown = sorted(set(spec.encoder_options) - {"compile_mode"})
        if unknown:
            raise FieldError(
                f"encoder_options.{unknown[0]}",
                f"is an image-tower option; video model {model!r} takes compile_mode only",
            )

    @classmethod
    def require_weights(cls, spec: RewardModelSpec) -> None:
        """Nothing to fetch: a video model's weights are its checkpoint file, or random (docs/video-models.md)."""

    @property
    def weights(self) -> str:
        return self._weights

    def parameter_count(self) -> int:
        return int(sum(p.numel() for p in self.video.parameters()))

    @property
    def item_shape(self) -> tuple[int, ...]:
        return self._item_shape

    @property
    def item_dtype(self) -> torch.dtype:
        return self.preprocessor.dtype

    def reads(self, frames: int) -> list[int]:
        return subsample_indices(frames, self.video.info.num_frames)

    def frame_items(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.video.frame_features(pixels) if self.keeps_features else pixels

    def text_embeddings(self, prompts: Sequence[str]) -> torch.Tensor:
        return self.video.encode_text(list(prompts)).float()

    def logit_scale_for(self, criteria: Sequence[Criterion]) -> float:
        if self.video.logit_scale is not None:
            return float(self.video.logit_scale)
        if any(isinstance(criterion, BinaryCriterion) and criterion.temperature is None for criterion in criteria):
            raise ValueError(
                f"{self.name} was trained without a logit scale (it compares raw dot products): give the binary "
                "criterion a temperature= (its softmax's 1 / scale)"
            )
        return 1.0

    def _uncompiled(self, windows: torch.Tensor) -> torch.Tensor:
        # The model's unchecked features (the windows' shape is checked once, in window_embeddings).
        video = self.video
        return F.normalize(
            video.window_features(windows) if self.keeps_features else video.video_features(windows), dim=-1
        )

    def window_rewards(self, items: torch.Tensor, head: RewardHead | None = None) -> torch.Tensor:
        """As every window model's; a model whose text depends on the window (X-CLIP's prompt generator)
        scores each window against its own prompt embeddings (:func:`per_window_rewards`)."""
        if not self.video.info.conditions_text:
            return super().window_rewards(items, head)
        criteria = (self.head if head is None else head).criteria
        prompts = unique_prompts(criteria)
        out = []
        for start in range(0, items.shape[0], self.chunk_size):
            batch = items[start : start + self.chunk_size]
            self.video.check_windows(batch)
            video, text = self.video.encode_video_and_text(batch.contiguous(), prompts)
            out.append(
                per_window_rewards(criteria, prompts, video.float(), text.float(), self.logit_scale_for(criteria))
            )
        return torch.cat(out) if len(out) > 1 else out[0]

    def window_embeddings(self, items: torch.Tensor) -> torch.Tensor:
        """Windows of frame items (n, T, *item_shape) -> embeddings (n, D), in batches of ``chunk_size`` (a
        compiled model gets each batch padded to ``chunk_size``: its one shape)."""
        if items.shape[0] == 0:
            return torch.empty((0, self.video.info.embed_dim), device=self.device)
        expected = (self.video.info.num_frames, *self.item_shape)
        if tuple(items.shape[1:]) != expected or items.dtype != self.item_dtype or items.device != self.device:
            raise ValueError(
                f"{self.name} reads windows of frame items (n, {', '.join(map(str, expected))}) in {self.item_dtype} on "
                f"{self.device}, got {tuple(items.shape)} in {items.dtype} on {items.device}: give it frame_items of "
                "each frame, the windows oldest first"
            )
        out = []
        for start in range(0, items.shape[0], self.chunk_size):
            batch = items[start : start + self.chunk_size]
            n = batch.shape[0]
            if self.compiled and n < self.chunk_size:
                batch = torch.cat([batch, batch[-1:].expand(self.chunk_size - n, *batch.shape[1:])])
            out.append(self._features(batch if batch.is_contiguous() else batch.contiguous())[:n])
        return torch.cat(out).float() if len(out) > 1 else out[0].float()

    def close(self) -> None:
        self.video = None
        self._features = self._uncompiled

    def __repr__(self) -> str:
        backend = f"compiled, batch {self.chunk_size}" if self.compiled else "eager"
        return f"VideoWindowModel({self.name}, {self.preprocessor.dtype}, {backend}, window={self.window})"


def ring_item_shape(info: Any) -> tuple[int, ...]:
    """What a window ring keeps of each frame for the video model of ``info`` (a ``VideoModelInfo``): the
    model's frame features (computed once per frame, not once per window that holds it) where they are no
    larger than the preprocessed frame (ViCLIP-B/16's as many values, the tiny models' far fewer), else the
    preprocessed frame (3, S, S) (ViCLIP-L/14's features would be 1.7x its pixels)."""
    size = info.preprocess.size
    pixels, features = (3, size, size), tuple(info.frame_feature_shape)
    return features if math.prod(features) <= math.prod(pixels) else pixels


def per_window_rewards(
    criteria: Sequence[Criterion], prompts: Sequence[str], video: torch.Tensor, text: torch.Tensor, logit_scale: float
) -> torch.Tensor:
    """Rewards (n, len(criteria)) of normalised window embeddings ``video`` (n, D), each against its own
    normalised prompt embeddings ``text`` (n, P, D) of ``prompts``: the formulas of ``reward/formulas.py``
    (docs/reward.md), with window ``n``'s goal, baseline and negatives taken from ``text[n]``."""
    row = {prompt: i for i, prompt in enumerate(prompts)}

    def rows(names: Sequence[str]) -> torch.Tensor:
        return text[:, [row[name] for name in names]]

    columns = []
    for criterion in criteria:
        if isinstance(criterion, BinaryCriterion):
            scale = logit_scale if criterion.temperature is None else 1.0 / criterion.temperature
            p = torch.softmax(scale * torch.einsum("nd,nmd->nm", video, rows(criterion.prompts)), dim=-1)[:, 0]
            columns.append(p if criterion.probability else (p > criterion.threshold).float())
            continue
        if not isinstance(criterion, GoalBaselineCriterion):
            raise TypeError(
                f"{criterion.name!r} is a {type(criterion).__name__}: a window of frames is scored by goal-baseline and binary "
                "criteria (a question is for a generative VLM judge, docs/judge.md)"
            )
        g = rows(criterion.target_prompts).mean(dim=1)
        u = torch.zeros_like(g)
        if criterion.baseline_prompts:
            d = g - rows(criterion.baseline_prompts).mean(dim=1)
            norm = d.norm(dim=-1, keepdim=True)
            if bool((norm <= 1e-6).any()):
                raise ValueError("the baseline and target prompts embed to the same point for a window")
            u = d / norm
        v = video - g
        vu = (v * u).sum(dim=-1)
        alpha = criterion.alpha
        columns.append(1.0 - 0.5 * ((1.0 - alpha) ** 2 * (v * v).sum(dim=-1) + (2.0 * alpha - alpha**2) * vu * vu))
    return torch.stack(columns, dim=1)
