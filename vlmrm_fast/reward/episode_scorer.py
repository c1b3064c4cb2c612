"""What a reward model that watches the episode offers the env stack: a per-step scorer and an offline one.

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
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from vlmrm_fast.checks import FieldError
from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.frames.views import FrameView


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


def check_terminal_frames(what: str, score_terminal_on: str) -> None:
    """Refuses ``score_terminal_on="reset_frame"`` for a scorer of episodes (``what`` names it): the paper's reset
    frame stands in for the terminal state's single frame, and here it would be the next episode's first frame
    scored with the ended episode's frames (a window's, a prefix's)."""
    if score_terminal_on == "reset_frame":
        raise FieldError(
            "score_terminal_on",
            f"reset_frame scores an episode's last step on the next episode's first frame, and {what} would then "
            "put that frame among the ended episode's; use score_terminal_on: terminal_state",
        )


def check_online_scoring(what: str, episode_batch: bool) -> None:
    """Refuses episode-batch scoring (``rl.episode_batch``: the rollout's frames scored after it) for a scorer that
    must see each step's frames as the envs step (``what`` names it)."""
    if episode_batch:
        raise FieldError(
            "rl.episode_batch",
            f"episode batches score a rollout's frames after it, and {what} learns from each step's frames as the "
            "envs step: leave rl.episode_batch off",
        )
