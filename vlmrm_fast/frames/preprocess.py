"""Frames -> CLIP encoder input, bit-identical to open_clip's own transform.

open_clip preprocesses one PIL image at a time: torchvision ``Resize`` (Pillow's
antialiased bicubic), ``CenterCrop``, ``ToTensor``, ``Normalize``. The fused
kernel (``csrc/cpu/preprocess.cpp`` on the CPU, ``csrc/cuda/preprocess.cu`` on
the GPU) does the same arithmetic for a whole batch, in place, in the encoder's
dtype. Frames can be a stack of upright images or the renderer's tiled,
bottom-up framebuffer (see :class:`FrameLayout`).

``resize_mode="paper"`` is the paper's own preprocessing instead: its code converted the
frames to a float tensor and called torchvision's ``Resize((S, S))`` on it, which PyTorch
computes as bicubic interpolation without antialiasing (the default for tensors in the
torchvision of the time), then normalized with OpenAI's mean and std.
:meth:`PreprocessSpec.paper_transform` is that reference written with torchvision; the
kernels match PyTorch's portable CPU arithmetic to the bit (see ``csrc/cpu/preprocess.h``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from vlmrm_fast.frames.views import FrameLayout, FrameView
from vlmrm_fast.runtime import kernels

_FILTERS = {"bicubic": kernels.Filter.bicubic, "bilinear": kernels.Filter.bilinear}
_RESIZE_MODES = {
    "shortest": kernels.ResizeMode.shortest,
    "squash": kernels.ResizeMode.squash,
    "paper": kernels.ResizeMode.paper,
}
#: How a frame becomes the encoder's square input: open_clip's shortest-side resize and centre crop;
#: a squash of the whole frame (wide frames kept whole) with the same antialiased resampling; or
#: the paper's code's squash by PyTorch's float bicubic without antialiasing.
RESIZE_MODES = tuple(_RESIZE_MODES)


def pillow_pass_order():
    """The resample pass order of the installed Pillow (13 may go vertical first)."""
    import PIL

    major = int(PIL.__version__.split(".")[0])
    return kernels.PassOrder.pillow13 if major >= 13 else kernels.PassOrder.horizontal_first


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
        if self.resize_mode == "paper" and self.interpolation != "bicubic":
            raise ValueError(
                "resize_mode 'paper' is bicubic (the paper's torchvision Resize); use interpolation='bicubic'"
            )

    def with_resize_mode(self, resize_mode: str) -> PreprocessSpec:
        """This spec with another resize mode; ``"paper"`` also takes the paper's bicubic filter and
        OpenAI's mean and std, which its code used for every model."""
        if resize_mode != "paper":
            return dataclasses.replace(self, resize_mode=resize_mode)
        import open_clip

        r, g, b = (float(v) for v in open_clip.OPENAI_DATASET_MEAN)
        sr, sg, sb = (float(v) for v in open_clip.OPENAI_DATASET_STD)
        return dataclasses.replace(self, resize_mode="paper", interpolation="bicubic", mean=(r, g, b), std=(sr, sg, sb))

    @classmethod
    def from_open_clip(cls, model: Any) -> PreprocessSpec:
        """Reads ``model.visual.preprocess_cfg`` (open_clip >= 2.24)."""
        import open_clip

        cfg = dict(open_clip.get_model_preprocess_cfg(model))
        size = cfg.get("size", model.visual.image_size)
        if isinstance(size, (tuple, list)):
            if size[0] != size[1]:
                raise ValueError(f"non-square encoder input {tuple(size)} is not supported")
            size = size[0]
        r, g, b = (float(v) for v in cfg.get("mean", open_clip.OPENAI_DATASET_MEAN))
        sr, sg, sb = (float(v) for v in cfg.get("std", open_clip.OPENAI_DATASET_STD))
        return cls(
            size=int(size),
            mean=(r, g, b),
            std=(sr, sg, sb),
            interpolation=cfg.get("interpolation", "bicubic") or "bicubic",
            resize_mode=cfg.get("resize_mode", "shortest") or "shortest",
        )

    def paper_transform(self):
        """The paper's preprocessing for this spec, written with torchvision on tensors: the reference
        of ``resize_mode="paper"``. Takes uint8 (N, H, W, 3) frames, returns float32 (N, 3, S, S)."""
        from torchvision import transforms

        resize = transforms.Resize(
            (self.size, self.size), interpolation=transforms.InterpolationMode.BICUBIC, antialias=False
        )
        normalize = transforms.Normalize(self.mean, self.std)

        def transform(frames: Any) -> torch.Tensor:
            pixels = as_frame_tensor(frames).permute(0, 3, 1, 2).to(torch.float32) / 255.0
            return normalize(resize(pixels))

        return transform

    def open_clip_transform(self):
        """open_clip's own PIL transform for this spec: the reference we match (for resize modes
        other than ``"paper"``, whose reference is :meth:`paper_transform`)."""
        import open_clip

        if self.resize_mode == "paper":
            raise ValueError("resize_mode 'paper' is not open_clip's transform; its reference is paper_transform()")

        return open_clip.image_transform(
            self.size,
            is_train=False,
            mean=self.mean,
            std=self.std,
            interpolation=self.interpolation,
            resize_mode=self.resize_mode,
        )


def _not_uint8(frames: Any, dtype: str, target: str, cast: str) -> str:
    """The fix for non-uint8 frames depends on their values: a plain cast of [0, 1] floats gives black frames,
    and NaN survives rounding and clipping (its cast is undefined)."""
    message = f"frames must be uint8 RGB in [0, 255], got {dtype}"
    if isinstance(frames, torch.Tensor):
        is_float, empty = frames.dtype.is_floating_point, frames.numel() == 0
    else:
        is_float, empty = np.issubdtype(frames.dtype, np.floating), frames.size == 0
    if not is_float or empty:
        return f"{message}; convert with frames.{cast}({target}) if the values are 0-255"
    values = frames if isinstance(frames, torch.Tensor) else torch.from_numpy(np.asarray(frames))
    if not bool(torch.isfinite(values).all()):
        module = "torch" if isinstance(frames, torch.Tensor) else "np"
        return (
            f"{message} holding NaN or infinite values; find where they come from, or replace them first: "
            f"{module}.nan_to_num(frames, nan=0.0, posinf=255.0, neginf=0.0), then round, clip and cast to uint8"
        )
    high = float(values.max())
    if high <= 1.0:
        return (
            f"{message} with values in [0, 1]; scale them first: (frames * 255).round().clip(0, 255).{cast}({target})"
        )
    return f"{message} (max {high:g}); convert with frames.round().clip(0, 255).{cast}({target})"


def _shape_fix(shape: tuple[int, ...]) -> str:
    """What turns frames of ``shape`` into a batch (N, H, W, 3), where the shape says."""
    if len(shape) == 3 and shape[-1] == 3:
        return "; one frame (H, W, 3): use frames[None]"
    if len(shape) == 3 and shape[0] == 3:
        return "; one channels-first frame (3, H, W): use frames.permute(1, 2, 0)[None] (numpy: frames.transpose(1, 2, 0)[None])"
    if len(shape) == 4 and shape[1] == 3:
        return (
            "; channels-first frames (N, 3, H, W): use frames.permute(0, 2, 3, 1) (numpy: frames.transpose(0, 2, 3, 1))"
        )
    if len(shape) == 3:
        return "; grayscale frames (N, H, W): repeat them into RGB, frames[..., None].repeat(3, axis=-1) (torch: .expand(-1, -1, -1, 3))"
    if len(shape) == 4 and shape[-1] == 4:
        return "; RGBA frames: drop the alpha channel, frames[..., :3]"
    return ""


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
    if frames.ndim != 4 or frames.shape[-1] != 3:
        shape = tuple(frames.shape)
        raise ValueError(f"frames must be a batch (N, H, W, 3) of RGB frames, got shape {shape}{_shape_fix(shape)}")
    if frames.shape[0] == 0 or frames.shape[1] == 0 or frames.shape[2] == 0:
        raise ValueError(f"frames must be non-empty, got shape {tuple(frames.shape)}")
    if frames.stride(3) != 1 or frames.stride(2) < 3:
        frames = frames.contiguous()
    return frames


class FramePreprocessor:
    """Batched uint8 frames -> (N, 3, S, S) encoder input on ``device`` in ``dtype``."""

    def __init__(self, spec: PreprocessSpec, device: torch.device, dtype: torch.dtype = torch.float32):
        self._kernel_dtype = kernels.kernel_dtype(dtype)  # refuses the dtypes the kernels do not take
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = dtype
        self._plans: dict[tuple[int, int], Any] = {}
        self._device_plans: dict[tuple[int, int], Any] = {}
        self._use_cuda_kernel = kernels.cuda_kernels_run_on(self.device)

    def plan(self, height: int, width: int):
        key = (height, width)
        if key not in self._plans:
            self._plans[key] = kernels.PreprocessPlan(
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
        """uint8 frames (N, H, W, 3), numpy or torch -> encoder input (N, 3, S, S)."""
        frames = as_frame_tensor(frames)
        if self.device.type == "cuda" and frames.device.type == "cpu" and not frames.is_contiguous():
            frames = frames.contiguous()  # dense, so the kernel gets one upload of the uint8 frames
        return self.run(FrameView.of(frames), out)

    def run(self, view: FrameView, out: torch.Tensor | None = None) -> torch.Tensor:
        """Preprocesses the frames of ``view`` (host or device) into ``out``, on the current stream.

        Device frames are read in place by the CUDA kernel, host frames by the C++ twin
        (for a CPU output) or uploaded once (for a GPU output); a device view that is not
        ready yet is waited for on the stream, not on the host.
        """
        layout = view.layout
        out = self._output(layout.num_frames, out)
        plan = self.plan(layout.height, layout.width)
        on_gpu = out.device.type == "cuda"
        if view.device.type == "cuda":
            view.wait()
            if on_gpu and self._use_cuda_kernel and view.device == out.device:
                self._run_cuda(view.address, layout, plan, out)
            else:  # a core without CUDA (or another GPU): the twin on a host copy of the frames
                host = self._host_copy(view)
                self._run_cpu(host.data_ptr(), FrameLayout.stacked(host), plan, out)
        elif not on_gpu:
            self._run_cpu(view.address, layout, plan, out)
        elif self._use_cuda_kernel and _dense_tensor(view):
            frames = view.owner.to(out.device, non_blocking=view.owner.is_pinned())  # one upload of the uint8 frames
            self._run_cuda(frames.data_ptr(), FrameLayout.stacked(frames), plan, out)
        else:
            self._run_cpu(view.address, layout, plan, out)
        return out

    def _output(self, n: int, out: torch.Tensor | None) -> torch.Tensor:
        shape = (n, 3, self.spec.size, self.spec.size)
        if out is None:
            return torch.empty(shape, dtype=self.dtype, device=self.device)
        if tuple(out.shape) != shape or out.dtype != self.dtype or not out.is_contiguous():
            raise ValueError(
                f"out must be a contiguous {self.dtype} tensor of shape {shape}, got {out.dtype} {tuple(out.shape)}"
            )
        return out

    @staticmethod
    def _host_copy(view: FrameView) -> torch.Tensor:
        if not isinstance(view.owner, torch.Tensor):
            raise RuntimeError(
                "frames on a CUDA device can only be preprocessed by the CUDA kernel, which this build lacks "
                "(vlmrm_fast was built without CUDA or sees no device); reinstall with the CUDA toolkit"
            )
        return view.owner.cpu()

    @staticmethod
    def _layout_args(address: int, layout: FrameLayout) -> tuple[int, int, int, int, int, int, int, int, int]:
        return (
            address + layout.offset,
            layout.num_frames,
            layout.height,
            layout.width,
            layout.pixel_stride,
            layout.row_stride,
            layout.frames_per_row,
            layout.frame_col_stride,
            layout.frame_row_stride,
        )

    def _run_cpu(self, address: int, layout: FrameLayout, plan, out: torch.Tensor) -> None:
        """The C++ twin into ``out``; a GPU ``out`` gets the result by one upload."""
        target = out if out.device.type == "cpu" else torch.empty(tuple(out.shape), dtype=self.dtype, pin_memory=True)
        kernels.preprocess_cpu(plan, *self._layout_args(address, layout), target.data_ptr(), self._kernel_dtype)
        if target is not out:
            out.copy_(target, non_blocking=True)

    def _device_plan(self, plan, device: torch.device):
        key = (plan.in_height, plan.in_width)
        if key not in self._device_plans:
            self._device_plans[key] = kernels.DevicePreprocessPlan(plan, device.index)
        return self._device_plans[key]

    def _run_cuda(self, address: int, layout: FrameLayout, plan, out: torch.Tensor) -> None:
        stream = torch.cuda.current_stream(out.device).cuda_stream
        kernels.preprocess_cuda(
            self._device_plan(plan, out.device),
            *self._layout_args(address, layout),
            out.data_ptr(),
            self._kernel_dtype,
            stream,
        )


def _dense_tensor(view: FrameView) -> bool:
    """The view is a whole, dense uint8 (N, H, W, 3) tensor (so an upload keeps its layout)."""
    owner = view.owner
    return isinstance(owner, torch.Tensor) and owner.is_contiguous() and view.layout == FrameLayout.stacked(owner)
