"""The fused kernels' native half: preprocess and reward, C++ twins and CUDA.

``frames/preprocess.py`` and ``reward/head.py`` call the kernels through this module, the
one that imports them from the native core (``_core.kernels``, csrc/bindings/kernels.cpp)
and the one that turns torch dtypes into the kernels' :class:`DType`.
"""

from __future__ import annotations

import torch

import vlmrm_fast.runtime.native  # noqa: F401  (libmujoco, then the core)
from vlmrm_fast._core.kernels import (
    MAX_CUDA_REWARD_TASKS,
    DevicePreprocessPlan,
    DType,
    Filter,
    PassOrder,
    PreprocessPlan,
    ResizeMode,
    RewardKind,
    RewardTask,
    preprocess_cpu,
    preprocess_cuda,
    reward_cpu,
    reward_cuda,
)

__all__ = [
    "MAX_CUDA_REWARD_TASKS",
    "DevicePreprocessPlan",
    "DType",
    "Filter",
    "PassOrder",
    "PreprocessPlan",
    "ResizeMode",
    "RewardKind",
    "RewardTask",
    "preprocess_cpu",
    "preprocess_cuda",
    "reward_cpu",
    "reward_cuda",
    "kernel_dtype",
    "cuda_kernels_run_on",
]

_KERNEL_DTYPES = {torch.float32: DType.float32, torch.float16: DType.float16, torch.bfloat16: DType.bfloat16}


def kernel_dtype(dtype: torch.dtype) -> DType:
    """The kernels' DType of a torch dtype; TypeError for one they do not take."""
    try:
        return _KERNEL_DTYPES[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} is not supported; use float32, float16 or bfloat16") from None


def cuda_kernels_run_on(device: torch.device) -> bool:
    """Whether the CUDA kernels run for tensors on ``device``: a CUDA device, and a core built with CUDA
    that sees a usable GPU. Elsewhere on a GPU the preprocess and reward fall back to torch."""
    from vlmrm_fast.runtime.device import native_cuda_usable

    return torch.device(device).type == "cuda" and native_cuda_usable()
