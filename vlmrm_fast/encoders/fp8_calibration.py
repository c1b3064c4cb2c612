"""Static FP8 input scales, measured on frames: the calibration of ``fp8_scaling="static-tensorwise"``.

With static scales each FP8 linear layer quantizes its input x as e4m3(clamp(x / s, -448, 448))
with one scale s fixed before the first call, so that quantizing is an elementwise divide, clamp
and cast that a compiled tower fuses into the op before the layer (:mod:`vlmrm_fast.encoders.fp8`).
s comes from calibration:

1. The calibration frames (``fp8_calibration``: uint8 (N, H, W, 3) as numpy or torch, or a path to
   a ``.npz`` holding a ``frames`` array, as ``vlmrm-fast dataset sample`` writes, or to a folder of
   images of one size) are preprocessed as the reward model preprocesses frames
   (:class:`~vlmrm_fast.frames.preprocess.FramePreprocessor`), in batches of :data:`CALIBRATION_BATCH`.
2. The bf16 tower, attention already fused (so that the QKV projection is a linear layer), runs
   them; each transformer linear layer records the largest |x| its input reached (amax).
3. s = :data:`STATIC_SCALE_MARGIN` x amax / 448.

The margin of 2 leaves one binade of headroom: inputs up to twice the largest seen in calibration
keep their value, larger ones saturate at +-448 s. e4m3 is a floating-point format, so the
headroom costs no relative precision (3 mantissa bits at every magnitude between 2^-6 x 448 s and
448 s); only values more than 2^14 below the calibrated amax lose bits as subnormals, one binade
sooner than without the margin. A few batches of the task's own frames (64 frames, say) are
enough: what matters is the range each layer's input reaches, and frames from the task's own
scenes reach the ranges the reward model will see. ``vlmrm-fast check-precision`` calibrates on
frames of other rollouts than those it scores, and reports the agreement with bf16.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from vlmrm_fast.encoders.fp8 import transformer_linears

#: e4m3's largest finite value.
E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)
STATIC_SCALE_MARGIN = 2.0
CALIBRATION_BATCH = 32
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def load_frames(source: str | os.PathLike) -> np.ndarray:
    """uint8 (N, H, W, 3) from a folder of images (sorted by name, all one size) or a dataset ``.npz``."""
    path = pathlib.Path(source)
    if path.is_file() and path.suffix == ".npz":
        with np.load(path) as data:
            if "frames" not in data:
                raise ValueError(f"{path} holds no 'frames' array (write one with `vlmrm-fast dataset sample`)")
            return np.asarray(data["frames"], np.uint8)
    if not path.is_dir():
        raise FileNotFoundError(f"frames {str(path)!r}: neither a folder of images nor a .npz dataset")
    from PIL import Image

    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"frames {str(path)!r}: the folder holds no images ({', '.join(IMAGE_SUFFIXES)})")
    frames = [np.asarray(Image.open(p).convert("RGB")) for p in files]
    sizes = {f.shape for f in frames}
    if len(sizes) > 1:
        first, other = frames[0].shape, next(f for f in frames if f.shape != frames[0].shape).shape
        raise ValueError(
            f"the images in {path} differ in size ({first[1]}x{first[0]} and {other[1]}x{other[0]}); "
            "give frames of one size"
        )
    return np.stack(frames)


def calibration_pixels(
    frames: Any, preprocess: Any, device: torch.device, *, batch_size: int = CALIBRATION_BATCH
) -> list[torch.Tensor]:
    """``frames`` (see the module docstring) as bf16 encoder input on ``device``, in batches.

    ``preprocess``: the model's :class:`~vlmrm_fast.frames.preprocess.PreprocessSpec`."""
    from vlmrm_fast.frames.preprocess import FramePreprocessor, as_frame_tensor

    if isinstance(frames, (str, os.PathLike)):
        frames = load_frames(frames)
    frames = as_frame_tensor(frames)
    if len(frames) == 0:
        raise ValueError("fp8_calibration holds no frames")
    preprocessor = FramePreprocessor(preprocess, device, torch.bfloat16)
    return [preprocessor(frames[start : start + batch_size]) for start in range(0, len(frames), batch_size)]


@dataclasses.dataclass(frozen=True)
class InputRange:
    """What calibration saw of one layer's input: the largest |x|, and the input's number of dimensions."""

    amax: float
    ndim: int


@torch.inference_mode()
def measure_input_ranges(visual: nn.Module, batches: Iterable[torch.Tensor]) -> dict[str, InputRange]:
    """The input range of every transformer linear layer of ``visual`` (bf16, attention fused), by
    qualified name, over the pixel ``batches``."""
    layers = dict(transformer_linears(visual))
    amax: dict[str, torch.Tensor] = {}
    ndim: dict[str, int] = {}

    def record(name: str):
        def hook(module: nn.Module, args: tuple) -> None:
            x = args[0]
            seen = x.detach().abs().amax().float()
            amax[name] = seen if name not in amax else torch.maximum(amax[name], seen)
            ndim[name] = x.ndim

        return hook

    handles = [module.register_forward_pre_hook(record(name)) for name, module in layers.items()]
    try:
        ran = 0
        for pixels in batches:
            visual(pixels)
            ran += 1
    finally:
        for handle in handles:
            handle.remove()
    if not ran:
        raise ValueError("calibration needs at least one batch of frames")
    values = torch.stack([amax[name] for name in layers]).tolist() if layers else []
    return {name: InputRange(value, ndim[name]) for name, value in zip(layers, values)}


def static_input_scales(
    ranges: Mapping[str, InputRange], *, device: torch.device, margin: float = STATIC_SCALE_MARGIN
) -> dict[str, torch.Tensor]:
    """Each layer's input scale, margin x amax / 448, as torchao's static config takes it: an fp32
    tensor of one element with as many dimensions as the input."""
    if margin < 1:
        raise ValueError(
            f"margin must be at least 1 (a smaller one saturates inputs seen in calibration), got {margin}"
        )
    tiny = torch.finfo(torch.float32).tiny  # a layer whose input stayed zero still gets a usable scale
    return {
        name: torch.full((1,) * r.ndim, max(r.amax, tiny) * margin / E4M3_MAX, dtype=torch.float32, device=device)
        for name, r in ranges.items()
    }
