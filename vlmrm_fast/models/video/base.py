"""What every video-language model offers the window machinery.

A video model reads a window of ``T`` preprocessed frames (oldest first) and gives one embedding
for it; its text tower gives one embedding per prompt; both are L2-normalised, so a reward is
computed from them as from a frame model's. :class:`VideoModelInfo` says what a window needs
before any weight is loaded (how many frames, how each is preprocessed), and
:func:`subsample_indices` picks a model's ``T`` frames out of a longer window.

    subsample_indices(K, T)    which of a window's K frames a model of T frames reads

The models by name are in load.py, above every model's module.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from vlmrm_fast.frames.preprocess import PreprocessSpec


@dataclasses.dataclass(frozen=True)
class VideoModelInfo:
    """What the window machinery needs to know of a model before loading its weights."""

    name: str  # registry name, e.g. "viclip-b16"
    num_frames: int  # frames per window the model reads
    preprocess: PreprocessSpec  # each frame's preprocessing, which the fused kernel runs
    embed_dim: int = 0  # size of the video and text embeddings
    #: The text embedding depends on the window (X-CLIP's prompt generator): the model's own
    #: similarity comes from :meth:`VideoModel.encode_video_and_text`, per window.
    conditions_text: bool = False
    #: The pip extra the model needs beyond the core install (None: nothing more).
    extra: str | None = None
    #: Random weights are fine (the tiny models of tests and smoke runs): no warning when loaded without a checkpoint.
    tiny: bool = False
    #: The shape of what the model computes of each frame alone (:meth:`VideoModel.frame_features`), which a window
    #: ring keeps of each frame; None: the model reads the window's preprocessed frames themselves.
    frame_features: tuple[int, ...] | None = None

    @property
    def frame_feature_shape(self) -> tuple[int, ...]:
        """One frame's :meth:`VideoModel.frame_features`: ``frame_features``, or the preprocessed frame (3, S, S)."""
        size = self.preprocess.size
        return self.frame_features or (3, size, size)


class VideoModel(torch.nn.Module):
    """A video-language model: windows of frames and prompts -> L2-normalised embeddings.

    Subclasses supply ``window_features`` (windows -> unnormalised embeddings) and ``_text_features``
    (prompts -> unnormalised embeddings); the checks of the inputs and the normalisation are made here,
    once. A model that first computes something of each frame alone (ViCLIP's patch embeddings) also
    supplies ``frame_features``, and its ``window_features`` reads those: a window ring then keeps each
    frame's features, computed once when the frame is drawn, instead of once per window that holds it.
    """

    info: VideoModelInfo
    #: The temperature of a softmax over prompts (the binary reward), as the model was trained with;
    #: None for a model trained without one (S3D's MIL-NCE compares raw dot products).
    logit_scale: float | None
    #: Where its weights came from: the checkpoint it was loaded from, or "random init (seed N)".
    weights: str = "random init"

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @torch.inference_mode()
    def encode_video(self, pixels: torch.Tensor) -> torch.Tensor:
        """Windows ``(N, T, 3, S, S)`` of preprocessed frames, oldest first, ``T == info.num_frames``
        -> ``(N, D)`` L2-normalised embeddings."""
        return F.normalize(self.video_features(self.check_windows(pixels)), dim=-1)

    def video_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """Windows ``(N, T, 3, S, S)`` -> ``(N, D)`` embeddings before normalisation, as :meth:`encode_video`
        computes them but without its checks (:meth:`check_windows`) or its inference mode: for callers that
        checked their windows once, and for ``torch.compile``, which cannot trace a function decorated with
        ``torch.inference_mode`` when called under it."""
        n, t = pixels.shape[:2]
        return self.window_features(self.frame_features(pixels.flatten(0, 1)).unflatten(0, (n, t)))

    def frame_features(self, frames: torch.Tensor) -> torch.Tensor:
        """Preprocessed frames ``(M, 3, S, S)`` -> what the model computes of each alone, ``(M,
        *info.frame_feature_shape)``: the frames themselves unless the model says otherwise."""
        return frames

    def window_features(self, features: torch.Tensor) -> torch.Tensor:
        """Windows of :meth:`frame_features` ``(N, T, *info.frame_feature_shape)``, oldest first -> ``(N, D)``
        embeddings before normalisation, unchecked."""
        raise NotImplementedError

    @torch.inference_mode()
    def encode_text(self, prompts: Sequence[str]) -> torch.Tensor:
        """Prompts -> ``(P, D)`` L2-normalised embeddings (for X-CLIP, before the window's prompt:
        see :meth:`encode_video_and_text`)."""
        return F.normalize(self._text_features(check_prompts(prompts)), dim=-1)

    @torch.inference_mode()
    def encode_video_and_text(self, pixels: torch.Tensor, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows and prompts -> ``(N, D)`` video and ``(N, P, D)`` text embeddings, L2-normalised:
        each window's own text embeddings where the model conditions its text on the video
        (``info.conditions_text``), else the same ``encode_text`` row for every window."""
        video = self.encode_video(pixels)
        text = self.encode_text(prompts)
        return video, text.unsqueeze(0).expand(video.shape[0], -1, -1)

    def check_windows(self, pixels: Any) -> torch.Tensor:
        """``pixels`` as windows this model reads, or one line naming what is wrong and the fix."""
        info = self.info
        size, frames = info.preprocess.size, info.num_frames
        expected = f"(N, {frames}, 3, {size}, {size})"
        if not isinstance(pixels, torch.Tensor):
            raise TypeError(f"{info.name} reads a torch tensor of windows {expected}, got {type(pixels).__name__}")
        shape = tuple(pixels.shape)
        if pixels.ndim == 4 and shape[1:] == (3, size, size):
            raise ValueError(
                f"{info.name} scores windows of {frames} frames {expected}, got single frames {shape}: "
                f"give it each env's window (a window reward), or score single frames with a frame model"
            )
        if pixels.ndim != 5 or shape[2:] != (3, size, size):
            raise ValueError(
                f"{info.name} reads windows of preprocessed frames {expected}, got shape {shape}; "
                f"preprocess each frame with its info.preprocess ({size} px) and stack the windows oldest first"
            )
        if shape[1] != frames:
            raise ValueError(
                f"{info.name} reads {frames} frames per window, got {shape[1]}: pick them out of the window "
                f"with subsample_indices({shape[1]}, {frames})"
            )
        if shape[0] == 0:
            raise ValueError(f"{info.name} got no windows (shape {shape}); give at least one")
        if pixels.dtype != self.dtype or pixels.device != self.device:
            raise ValueError(
                f"{info.name} runs in {self.dtype} on {self.device}, got windows in {pixels.dtype} on "
                f"{pixels.device}: preprocess into the model's dtype and device"
            )
        return pixels

    def _text_features(self, prompts: list[str]) -> torch.Tensor:
        raise NotImplementedError


def check_prompts(prompts: Any) -> list[str]:
    """A non-empty list of prompt strings, or one line naming what is wrong."""
    if isinstance(prompts, str):
        raise TypeError(f"prompts must be a list of strings, got the string {prompts!r}: use [{prompts!r}]")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must not be empty: give at least one prompt")
    bad = [p for p in prompts if not isinstance(p, str)]
    if bad:
        raise TypeError(f"prompts must be strings, got {type(bad[0]).__name__} {bad[0]!r}")
    return prompts


def subsample_indices(window: int, num_frames: int) -> list[int]:
    """Which of a window's ``window`` frames (index 0 oldest, ``window - 1`` newest) a model that
    reads ``num_frames`` frames gets, oldest first.

    The rule: the newest frame is always read, and the ``j``-th frame back from it in the
    subsample is the one ``floor(j * window / num_frames)`` frames older than the newest. So a
    window of ``num_frames * s`` frames is read every ``s``-th frame ending at the newest (32 ->
    8: 3, 7, ..., 31), a window of exactly ``num_frames`` frames is read whole, and a shorter
    window repeats frames evenly (4 -> 8: 0, 0, 1, 1, 2, 2, 3, 3). Each frame's age in the
    subsample depends on the window's length only, never on where the window lies in the episode.
    (The paper's evaluator took every ``window // num_frames``-th frame from the oldest, which can
    leave out the newest.)
    """
    for value, name in ((window, "window"), (num_frames, "num_frames")):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    window, num_frames = int(window), int(num_frames)
    return [window - 1 - (j * window) // num_frames for j in range(num_frames - 1, -1, -1)]
