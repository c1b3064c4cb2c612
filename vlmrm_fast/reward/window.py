"""A reward from a window of frames: which frames a window holds, and how it is embedded.

``RewardModelSpec.window`` (a :class:`WindowSpec`; ``window: {frames: 8}`` in a config) makes a reward
model score each env's window of frames instead of its single frame (docs/video-rewards.md):

- ``frames`` (K): how many frames a window holds;
- ``timing``: ``"streamed"``, the window of the env's last K frames, scored on the steps its schedule
  scores (``score_every``); or ``"episode_end"`` (RoboCLIP's), one window per episode, its K frames
  evenly spaced over the episode up to its last, scored on its last step;
- ``embedding``: ``"video"``, a video model (``vlmrm_fast.models.video``: ViCLIP, X-CLIP, S3D) embeds
  the window, reading the model's own number of frames out of the K (:func:`subsample_indices`, which
  keeps the newest); or ``"mean_of_frames"``, a frame model (any open_clip family) embeds each frame
  once, and the window's embedding is the mean of its frames' normalised embeddings (the paper code's
  ``avg_frame``);
- ``pixel_values``: the values a video model reads, ``"model"`` (its authors' convention: S3D-G's
  frames in [0, 1]) or ``"0-255"`` (the frames' raw values, as RoboCLIP's Meta-World runs fed S3D-G:
  reproducing those rewards takes it; its kitchen runs fed [0, 1]; :data:`PIXEL_VALUES`);
- ``reads``: for a generative VLM judge's window (the window judge, docs/judge.md), how many of the K frames
  its prompt holds (evenly spaced, the newest kept: :func:`subsample_indices`; None: all K). A video model reads
  its own number of frames, so only the window judge takes it.

A window never holds two episodes' frames: at an env's reset its window starts again, the new
episode's first frame standing in for the frames before it until K have been drawn.

This module also says which frames each window reads offline (:func:`streamed_window`,
:func:`paper_window_ends`, :func:`episode_end_frames`), the reference the streamed rings are tested
against and the windows a window model scores in frames in memory (``vlmrm-fast evaluate``). The window
models themselves, their fields' checks and what they ask of a stack are in ``reward/window_model.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from vlmrm_fast.checks import FieldError, one_of, positive_int

#: The values a video model reads: its authors' convention, or the frames' raw 0-255 values (RoboCLIP's S3D-G).
PIXEL_VALUES = ("model", "0-255")
#: When a window is scored: on the schedule's steps, the window ending there; or once per episode.
TIMINGS = ("streamed", "episode_end")
#: How a window becomes one embedding: a video model reads it, or a frame model's embeddings are averaged.
EMBEDDINGS = ("video", "mean_of_frames")


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """A window of ``frames`` frames per env, scored as ``timing`` says and embedded as ``embedding`` says
    (see the module docstring)."""

    frames: int
    timing: str = "streamed"
    embedding: str = "video"
    pixel_values: str = "model"
    reads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "frames", positive_int(self.frames, "frames"))
        object.__setattr__(self, "reads", positive_int(self.reads, "reads", allow_none=True))
        if self.reads is not None and self.reads > self.frames:
            raise FieldError("reads", f"{self.reads} is more than the window's {self.frames} frames; give at most that")
        one_of(self.timing, "timing", TIMINGS)
        one_of(self.embedding, "embedding", EMBEDDINGS)
        one_of(self.pixel_values, "pixel_values", PIXEL_VALUES)

    @classmethod
    def of(cls, value: Any, name: str = "window") -> WindowSpec | None:
        """``value`` as a window: a WindowSpec, a mapping of its fields, or None; errors name ``name.field``."""
        if value is None or isinstance(value, WindowSpec):
            return value
        if not isinstance(value, dict):
            raise FieldError(name, f"must be a mapping such as {{frames: 8}}, got {value!r}")
        unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise FieldError(
                f"{name}.{unknown[0]}", "unknown field; a window has frames, timing, embedding, pixel_values and reads"
            )
        if "frames" not in value:
            raise FieldError(f"{name}.frames", "is required: how many frames a window holds, e.g. 8")
        try:
            return cls(**value)
        except FieldError as exc:
            raise FieldError(f"{name}.{exc.field}", exc.reason) from None

    def describe(self) -> str:
        embedded = "the mean of its frame embeddings" if self.embedding == "mean_of_frames" else "the video model"
        values = ", read as raw 0-255 values" if self.pixel_values == "0-255" else ""
        if self.timing == "episode_end":
            return f"one window per episode, {self.frames} frames up to its last step, embedded by {embedded}{values}"
        return f"the last {self.frames} frames, embedded by {embedded}{values}"


def subsample_indices(window: int, num_frames: int) -> list[int]:
    """Which of a window's frames (0 the oldest) a video model of ``num_frames`` frames reads: evenly
    spaced, the newest always among them (``vlmrm_fast.models.video.subsample_indices``)."""
    from vlmrm_fast.models.video import subsample_indices as indices

    return indices(window, num_frames)


def streamed_window(step: int, frames: int) -> np.ndarray:
    """The frame indices (0: the episode's first frame) of the streamed window of ``frames`` frames
    ending at frame ``step`` (0-based), oldest first: the episode's first frame repeated before it."""
    return np.maximum(np.arange(step - frames + 1, step + 1), 0)


def paper_window_ends(length: int, size: int, step: int) -> np.ndarray:
    """The last frames of the paper code's windows inside an episode of ``length`` frames: windows of
    ``size`` frames starting every ``step`` frames from the first, none past the episode's end (its
    ``window_size`` and ``window_step``); each window's reward lands on its last frame."""
    size, step = positive_int(size, "window_size"), positive_int(step, "window_step")
    if size > length:
        raise FieldError("window_size", f"{size} frames is more than the episode's {length}; give at most {length}")
    return np.arange(size - 1, length, step)


def paper_windows(length: int, size: int, step: int) -> np.ndarray:
    """The paper code's windows inside an episode of ``length`` frames (see :func:`paper_window_ends`), as
    (W, ``size``) frame indices, oldest first."""
    ends = paper_window_ends(length, size, step)
    return ends[:, None] - np.arange(size - 1, -1, -1)[None, :]


def episode_end_frames(length: int, frames: int) -> np.ndarray:
    """The frames (0-based, oldest first) an episode-end window of ``frames`` frames keeps of an episode
    of ``length`` frames: evenly spaced, its last frame always kept (:func:`subsample_indices`)."""
    if frames > length:
        raise FieldError("window.frames", f"{frames} is more than the episode's {length} steps; give at most {length}")
    return np.asarray(subsample_indices(length, frames))
