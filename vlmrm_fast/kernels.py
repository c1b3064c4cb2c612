"""The fused kernels' native half: preprocess and reward, C++ twins and CUDA.

``preprocess.py`` and ``reward/head.py`` call the kernels through this module, the
one that imports them from the native core (``_core.kernels``, csrc/bindings/kernels.cpp).
"""

from __future__ import annotations

from vlmrm_fast._core.kernels import (
    MAX_CUDA_REWARD_TASKS,
    DevicePreprocessPlan,
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
]
