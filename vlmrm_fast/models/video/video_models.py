"""The video models by name: each family's module (viclip.py, xclip.py, s3d.py) holds its ``MODELS``
table, and this module, above them, finds a name among them.

    video_model_info(name)     the info of a registered model (no weights loaded)
    load_video_model(name)     the model, with a checkpoint's weights or seeded random ones
    flops_per_window(name)     what one window costs the video tower
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from vlmrm_fast.models.random_init import RandomWeightsWarning
from vlmrm_fast.models.video import s3d, viclip, xclip
from vlmrm_fast.models.video.base import VideoModel, VideoModelInfo


def _families() -> tuple[Any, ...]:
    return viclip, xclip, s3d


def known_video_models() -> list[str]:
    """Every registered video model's name."""
    return [name for family in _families() for name in family.MODELS]


def video_model_info(name: str) -> VideoModelInfo:
    """The info of the video model ``name``, without loading weights (or the optional extra)."""
    return _family_of(name).MODELS[name].info


def load_video_model(
    name: str,
    *,
    checkpoint: str | os.PathLike | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> VideoModel:
    """The video model ``name`` in eval mode on ``device`` in ``dtype``, frozen: with the weights of
    ``checkpoint`` (the published file or folder; docs/video-models.md says which), else random
    weights from ``seed`` (the same for a seed in any process or thread)."""
    family = _family_of(name)
    if checkpoint is None and not family.MODELS[name].info.tiny:
        warnings.warn(
            f"{name} has no checkpoint: random weights. Rewards are meaningless; fine for benchmarks. "
            f"Give checkpoint= (docs/video-models.md says where the published weights are)",
            RandomWeightsWarning,
            stacklevel=2,
        )
    model = family.load(name, checkpoint=checkpoint, seed=seed)
    model.weights = os.fspath(checkpoint) if checkpoint is not None else f"random init (seed {seed})"
    model.eval().requires_grad_(False)
    return model.to(device=torch.device(device), dtype=dtype)


def flops_per_window(name: str) -> float:
    """FLOPs of one window through the video tower of ``name`` (a multiply-add counts 2), counted by
    torch's FLOP counter on the meta device: shapes only, no memory, no weights."""
    from torch.utils.flop_counter import FlopCounterMode

    family = _family_of(name)
    with torch.device("meta"):
        model = family.load(name, checkpoint=None, seed=0).eval()
    info = model.info
    pixels = torch.empty(1, info.num_frames, 3, info.preprocess.size, info.preprocess.size, device="meta")
    with FlopCounterMode(display=False) as counter:
        model.encode_video(pixels)
    return float(counter.get_total_flops())


def _family_of(name: Any) -> Any:
    for family in _families():
        if name in family.MODELS:
            return family
    import difflib

    known = known_video_models()
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"unknown video model {name!r}: {hint}the known ones are {', '.join(known)}")
