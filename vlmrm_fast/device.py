"""Device resolution shared by the reward model, encoders and environments."""

from __future__ import annotations

import torch

import vlmrm_fast._native  # noqa: F401  (libmujoco, then the core)
from vlmrm_fast._core import build_info as _native_build_info
from vlmrm_fast._core import cuda_available as _native_cuda_available


def resolve_device(device: str | torch.device | None) -> torch.device:
    """ "auto"/None -> the first CUDA device when torch sees one, else the CPU."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a device; use 'auto', 'cpu', 'cuda' or 'cuda:N'") from exc
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} requested but torch sees no CUDA device; use device='cpu' or 'auto'")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
        if resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
    elif resolved.type != "cpu":
        raise ValueError(f"device={device!r}: only 'cpu' and 'cuda' devices are supported")
    return resolved


def build_info() -> dict:
    """What the native core was built with and what this machine offers (CUDA, EGL)."""
    return _native_build_info()


def native_cuda_usable() -> bool:
    """True when the compiled core has CUDA and a device is usable."""
    return bool(_native_cuda_available())
