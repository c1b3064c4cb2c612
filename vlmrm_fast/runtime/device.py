"""Device resolution shared by the reward model, encoders and environments."""

from __future__ import annotations

import os

import torch

import vlmrm_fast.runtime.native  # noqa: F401  (libmujoco, then the core)
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
            raise RuntimeError(f"device={device!r} requested, but {no_gpu_reason()}; use device='cpu' or 'auto'")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
        if resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
    elif resolved.type != "cpu":
        raise ValueError(f"device={device!r}: only 'cpu' and 'cuda' devices are supported")
    return resolved


def check_device_option(device: str, option: str = "--device") -> str:
    """A command's ``--device`` checked before any work: a GPU asked for where there is none, or a device
    that is not one, is a ValueError of one line naming the option and the fix (not a traceback minutes in)."""
    try:
        resolve_device(device)
    except RuntimeError:
        raise ValueError(
            f"{option} {device}: asks for a GPU, but {no_gpu_reason()}; use {option} cpu (or auto)"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{option} {device}: {str(exc).split(': ', 1)[-1]}") from None
    return device


def build_info() -> dict:
    """What the native core was built with and what this machine offers (CUDA, EGL)."""
    return _native_build_info()


def native_cuda_usable() -> bool:
    """True when the compiled core has CUDA and a device is usable."""
    return bool(_native_cuda_available())


def nvidia_driver_present() -> bool:
    """True when this machine has an NVIDIA driver (its kernel module or its user-space library)."""
    if os.path.exists("/proc/driver/nvidia/version"):
        return True
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def describe_cuda_device(info: dict | None = None) -> str:
    """The CUDA device, or why there is none, in the words every message about a missing GPU uses
    (``vlmrm-fast info``, the errors of a ``cuda`` device asked for, the tests' skips)."""
    info = build_info() if info is None else info
    if not info["cuda_compiled"]:
        if nvidia_driver_present():
            return "no usable GPU: vlmrm_fast was built without CUDA; reinstall with nvcc on the PATH to use the GPU"
        return "no GPU: this machine has no NVIDIA driver (CPU paths are used)"
    if info["cuda_available"]:
        return info["cuda_device_name"]
    if not nvidia_driver_present():
        return "no GPU: this machine has no NVIDIA driver (CPU paths are used)"
    error = info.get("cuda_error") or "unknown error"
    if "insufficient" in error.lower():
        return f"no usable GPU: the NVIDIA driver is older than CUDA {info['cuda_version']} needs ({error}); update the driver"
    if info.get("cuda_device_count", 0) == 0:
        return f"no GPU: the NVIDIA driver sees no device ({error})"
    return f"no usable GPU ({error})"


def no_gpu_reason() -> str:
    """Why no CUDA device can be used here, in :func:`describe_cuda_device`'s words (torch's view included)."""
    info = build_info()
    if info["cuda_compiled"] and info["cuda_available"]:
        return "no usable GPU: the native core sees one, torch does not (a CPU-only torch?)"
    return describe_cuda_device(info)
