"""Frames -> CLIP encoder input, bit-identical to open_clip's own transform.

open_clip preprocesses one PIL image at a time: torchvision ``Resize`` (Pillow's
antialiased bicubic), ``CenterCrop``, ``ToTensor``, ``Normalize``. The fused
kernel (``csrc/cpu/preprocess.cpp`` on the CPU, ``csrc/cuda/preprocess.cu`` on
the GPU) does the same arithmetic for a whole batch, in place, in the encoder's
dtype. Frames can be a stack of upright images or the renderer's tiled,
bottom-up framebuffer (see :class:`FrameLayout`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from vlmrm_fast import _core
from vlmrm_fast.device import dtype_code, native_cuda_usable

_FILTERS = {"bicubic": _core.Filter.bicubic, "bilinear": _core.Filter.bilinear}
_RESIZE_MODES = {"shortest": _core.ResizeMode.shortest, "squash": _core.ResizeMode.squash}


def pillow_pass_order():
    """The resample pass order of the installed Pillow (13 may go vertical first)."""
    import PIL

    major = int(PIL.__version__.split(".")[0])
    return _core.PassOrder.pillow13 if major >= 13 else _core.PassOrder.horizontal_first


@dataclasses.dataclass(frozen=True)
class PreprocessSpec:
    """What open_clip's eval transform does for one model."""

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bicubic"
    resize_mode: str = "shortest"

    def __post_init__(self) -> None:
        if self.interpolation not in _FILTERS:
            raise ValueError(f"interpolation {self.interpolation!r} is not supported; use {sorted(_FILTERS)}")
        if self.resize_mode not in _RESIZE_MODES:
            raise ValueError(
                f"resize_mode {self.resize_mode!r} is not supported by the fused preprocess; use {sorted(_RESIZE_MODES)}"
            )

    @classmethod
    def from_open_clip(cls, model: Any) -> "PreprocessSpec":
        """Reads ``model.visual.preprocess_cfg`` (open_clip >= 2.24)."""
        import open_clip

        cfg = dict(open_clip.get_model_preprocess_cfg(model))
        size = cfg.get("size", model.visual.image_size)
        if isinstance(size, (tuple, list)):
            if size[0] != size[1]:
                raise ValueError(f"non-square encoder input {tuple(size)} is not supported")
            size = size[0]
        return cls(
            size=int(size),
            mean=tuple(float(v) for v in cfg.get("mean", open_clip.OPENAI_DATASET_MEAN)),
            std=tuple(float(v) for v in cfg.get("std", open_clip.OPENAI_DATASET_STD)),
            interpolation=cfg.get("interpolation", "bicubic") or "bicubic",
            resize_mode=cfg.get("resize_mode", "shortest") or "shortest",
        )

    def open_clip_transform(self):
        """open_clip's own PIL transform for this spec: the reference we match."""
        import open_clip

        return open_clip.image_transform(
            self.size,
            is_train=False,
            mean=self.mean,
            std=self.std,
            interpolation=self.interpolation,
            resize_mode=self.resize_mode,
        )


@dataclasses.dataclass(frozen=True)
class FrameLayout:
    """Where frame ``i``'s pixel (row ``r`` from the top, column ``c``) lives, in bytes:

    ``(i % frames_per_row) * frame_col_stride + (i // frames_per_row) * frame_row_stride
    + r * row_stride + c * pixel_stride`` from the buffer's start (plus ``offset``).
    """

    num_frames: int
    height: int
    width: int
    pixel_stride: int
    row_stride: int
    frames_per_row: int = 1
    frame_col_stride: int = 0
    frame_row_stride: int = 0
    offset: int = 0

    @classmethod
    def stacked(cls, frames: torch.Tensor) -> "FrameLayout":
        n, h, w, _ = frames.shape
        s = frames.stride()
        return cls(n, h, w, pixel_stride=s[2], row_stride=s[1], frame_row_stride=s[0])

    @classmethod
    def gl_tiles(cls, num_frames: int, height: int, width: int, tiles_per_row: int, channels: int = 3) -> "FrameLayout":
        """An OpenGL framebuffer (rows bottom-up) holding tiles left to right, bottom to top."""
        fb_row = tiles_per_row * width * channels
        return cls(
            num_frames,
            height,
            width,
            pixel_stride=channels,
            row_stride=-fb_row,
            frames_per_row=tiles_per_row,
            frame_col_stride=width * channels,
            frame_row_stride=height * fb_row,
            offset=(height - 1) * fb_row,
        )


def _not_uint8(frames: Any, dtype: str, target: str, cast: str) -> str:
    """The fix for non-uint8 frames depends on their range: a plain cast of [0, 1] floats gives black frames."""
    message = f"frames must be uint8 RGB in [0, 255], got {dtype}"
    if isinstance(frames, torch.Tensor):
        is_float, empty = frames.dtype.is_floating_point, frames.numel() == 0
    else:
        is_float, empty = np.issubdtype(frames.dtype, np.floating), frames.size == 0
    if not is_float or empty:
        return f"{message}; convert with frames.{cast}({target}) if the values are 0-255"
    high = float(frames.max())
    if high <= 1.0:
        return f"{message} with values in [0, 1]; scale them first: (frames * 255).round().clip(0, 255).{cast}({target})"
    return f"{message} (max {high:g}); convert with frames.round().clip(0, 255).{cast}({target})"


def as_frame_tensor(frames: Any) -> torch.Tensor:
    """Checks and wraps uint8 (N, H, W, 3) frames (numpy or torch) without copying when possible."""
    if isinstance(frames, np.ndarray):
        if frames.dtype != np.uint8:
            raise TypeError(_not_uint8(frames, f"numpy dtype {frames.dtype}", "np.uint8", "astype"))
        if any(s < 0 for s in frames.strides):
            frames = np.ascontiguousarray(frames)
        frames = torch.from_numpy(frames)
    elif not isinstance(frames, torch.Tensor):
        raise TypeError(f"frames must be a numpy array or torch tensor, got {type(frames).__name__}")
    if frames.dtype != torch.uint8:
        raise TypeError(_not_uint8(frames, str(frames.dtype), "torch.uint8", "to"))
    if frames.ndim == 3:
        raise ValueError(f"frames must be a batch (N, H, W, 3); got one frame of shape {tuple(frames.shape)}, use frames[None]")
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be (N, H, W, 3) RGB, got shape {tuple(frames.shape)}")
    if frames.shape[0] == 0 or frames.shape[1] == 0 or frames.shape[2] == 0:
        raise ValueError(f"frames must be non-empty, got shape {tuple(frames.shape)}")
    if frames.stride(3) != 1 or frames.stride(2) < 3:
        frames = frames.contiguous()
    return frames


class FramePreprocessor:
    """Batched uint8 frames -> (N, 3, S, S) encoder input on ``device`` in ``dtype``."""

    def __init__(self, spec: PreprocessSpec, device: torch.device, dtype: torch.dtype = torch.float32):
        dtype_code(dtype)  # validates
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = dtype
        self._plans: dict[tuple[int, int], Any] = {}
        self._device_plans: dict[tuple[int, int], Any] = {}
        self._use_cuda_kernel = self.device.type == "cuda" and native_cuda_usable()

    def plan(self, height: int, width: int):
        key = (height, width)
        if key not in self._plans:
            self._plans[key] = _core.PreprocessPlan(
                height,
                width,
                self.spec.size,
                _RESIZE_MODES[self.spec.resize_mode],
                _FILTERS[self.spec.interpolation],
                [float(np.float32(v)) for v in self.spec.mean],
                [float(np.float32(v)) for v in self.spec.std],
                pillow_pass_order(),
            )
        return self._plans[key]

    def __call__(self, frames: Any, out: torch.Tensor | None = None) -> torch.Tensor:
        frames = as_frame_tensor(frames)
        if self._use_cuda_kernel and frames.device.type == "cpu":
            # One upload of the uint8 frames; the kernel does the rest on the GPU.
            frames = frames.to(self.device, non_blocking=frames.is_pinned())
        return self.run(frames, FrameLayout.stacked(frames), out)

    def run(self, buffer: torch.Tensor, layout: FrameLayout, out: torch.Tensor | None = None) -> torch.Tensor:
        """Preprocesses frames laid out in ``buffer`` (uint8, any device) as ``layout`` says."""
        n, s = layout.num_frames, self.spec.size
        out = self._output(n, out)
        plan = self.plan(layout.height, layout.width)
        if self._use_cuda_kernel and buffer.device.type == "cpu" and buffer.is_contiguous():
            buffer = buffer.to(out.device, non_blocking=buffer.is_pinned())  # same bytes, same layout
        if buffer.device.type == "cuda" and self._use_cuda_kernel:
            self._run_cuda(buffer, layout, plan, out)
        elif out.device.type == "cpu" and buffer.device.type == "cpu":
            self._run_cpu(buffer, layout, plan, out)
        else:
            # CUDA tensors but a core without CUDA: host twin, then one upload.
            host = torch.empty((n, 3, s, s), dtype=self.dtype)
            self._run_cpu(buffer.cpu(), layout, plan, host)
            out.copy_(host, non_blocking=False)
        return out

    def _output(self, n: int, out: torch.Tensor | None) -> torch.Tensor:
        shape = (n, 3, self.spec.size, self.spec.size)
        if out is None:
            return torch.empty(shape, dtype=self.dtype, device=self.device)
        if tuple(out.shape) != shape or out.dtype != self.dtype or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous {self.dtype} tensor of shape {shape}, got {out.dtype} {tuple(out.shape)}")
        return out

    @staticmethod
    def _layout_args(buffer: torch.Tensor, layout: FrameLayout) -> tuple:
        return (
            buffer.data_ptr() + layout.offset,
            layout.num_frames,
            layout.height,
            layout.width,
            layout.pixel_stride,
            layout.row_stride,
            layout.frames_per_row,
            layout.frame_col_stride,
            layout.frame_row_stride,
        )

    def _run_cpu(self, buffer: torch.Tensor, layout: FrameLayout, plan, out: torch.Tensor) -> None:
        _core.preprocess_cpu(plan, *self._layout_args(buffer, layout), out.data_ptr(), dtype_code(self.dtype))

    def run_renderer(self, renderer: Any, out: torch.Tensor | None = None) -> torch.Tensor:
        """Preprocesses a native ``BatchRenderer``'s last frames where they lie: on the GPU
        the kernel reads the interop-mapped pixel buffer, on the CPU the twin reads the
        mapped host buffer; no frame copy either way."""
        out = self._output(renderer.num_envs, out)
        plan = self.plan(renderer.height, renderer.width)
        code = dtype_code(self.dtype)
        if out.device.type == "cuda" and self._use_cuda_kernel and renderer.cuda_device == out.device.index:
            stream = torch.cuda.current_stream(out.device).cuda_stream
            renderer.preprocess_cuda(self._device_plan(plan, out.device), out.data_ptr(), code, stream)
        elif out.device.type == "cpu":
            renderer.preprocess_cpu(plan, out.data_ptr(), code)
        else:  # software EGL feeding a GPU encoder: host twin, then one upload
            host = torch.empty(tuple(out.shape), dtype=self.dtype, pin_memory=True)
            renderer.preprocess_cpu(plan, host.data_ptr(), code)
            out.copy_(host, non_blocking=True)
        return out

    def _device_plan(self, plan, device: torch.device):
        key = (plan.in_height, plan.in_width)
        if key not in self._device_plans:
            self._device_plans[key] = _core.DevicePreprocessPlan(plan, device.index)
        return self._device_plans[key]

    def _run_cuda(self, buffer: torch.Tensor, layout: FrameLayout, plan, out: torch.Tensor) -> None:
        stream = torch.cuda.current_stream(out.device).cuda_stream
        _core.preprocess_cuda(
            self._device_plan(plan, out.device), *self._layout_args(buffer, layout), out.data_ptr(), dtype_code(self.dtype), stream
        )
