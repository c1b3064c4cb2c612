"""Typed stub of the native core (csrc/bindings.cpp).

Buffers cross as integer addresses (numpy ``ctypes.data``, torch ``data_ptr()``)
and CUDA streams as integer handles (torch ``Stream.cuda_stream``). dtype codes:
0 float32, 1 float16, 2 bfloat16. Bad arguments raise ValueError; the CUDA
entry points raise RuntimeError when CUDA is not compiled in or no device is
usable.
"""

from collections.abc import Sequence
from typing import Any, ClassVar

def build_info() -> dict[str, Any]:
    """MuJoCo version, CUDA compiled/usable, EGL availability and devices."""

def cuda_available() -> bool:
    """True when CUDA is compiled in and a device is usable now."""

# ------------------------------------------------------------------ preprocess

class Filter:
    bilinear: ClassVar[Filter]
    bicubic: ClassVar[Filter]
    __members__: ClassVar[dict[str, Filter]]
    def __init__(self, value: int) -> None: ...
    def __int__(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class ResizeMode:
    shortest: ClassVar[ResizeMode]
    squash: ClassVar[ResizeMode]
    __members__: ClassVar[dict[str, ResizeMode]]
    def __init__(self, value: int) -> None: ...
    def __int__(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class PassOrder:
    """Which axis Pillow resamples first (Pillow >= 13: pillow13)."""

    horizontal_first: ClassVar[PassOrder]
    pillow13: ClassVar[PassOrder]
    __members__: ClassVar[dict[str, PassOrder]]
    def __init__(self, value: int) -> None: ...
    def __int__(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class PreprocessPlan:
    """Resample taps for one input size -> (3, S, S) encoder input."""

    def __init__(
        self,
        in_height: int,
        in_width: int,
        out_size: int,
        mode: ResizeMode,
        filter: Filter,
        mean: Sequence[float],
        std: Sequence[float],
        pass_order: PassOrder = ...,
    ) -> None: ...
    @property
    def in_height(self) -> int: ...
    @property
    def in_width(self) -> int: ...
    @property
    def out_size(self) -> int: ...
    @property
    def resized_height(self) -> int: ...
    @property
    def resized_width(self) -> int: ...
    @property
    def crop_top(self) -> int: ...
    @property
    def crop_left(self) -> int: ...
    @property
    def vertical_first(self) -> bool: ...
    @property
    def horizontal_taps(self) -> int: ...
    @property
    def vertical_taps(self) -> int: ...

def preprocess_cpu(
    plan: PreprocessPlan,
    frames: int,
    num_frames: int,
    height: int,
    width: int,
    pixel_stride: int,
    row_stride: int,
    frames_per_row: int,
    frame_col_stride: int,
    frame_row_stride: int,
    out: int,
    dtype: int,
    max_threads: int = 0,
) -> None:
    """C++ twin of the preprocess kernel on host memory (addresses as integers)."""

# ---------------------------------------------------------------------- reward

class RewardKind:
    goal_baseline: ClassVar[RewardKind]
    binary: ClassVar[RewardKind]
    __members__: ClassVar[dict[str, RewardKind]]
    def __init__(self, value: int) -> None: ...
    def __int__(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class RewardTask:
    """One row of the fused reward kernel's task table."""

    kind: RewardKind
    first_row: int
    num_rows: int
    probability: bool
    alpha: float
    g_norm2: float
    g_dot_u: float
    scale: float
    threshold: float
    def __init__(self) -> None: ...

def reward_cpu(
    embeddings: int,
    dtype: int,
    n: int,
    d: int,
    row_stride: int,
    text: int,
    m: int,
    tasks: Sequence[RewardTask],
    out: int,
    max_threads: int = 0,
) -> None:
    """C++ twin of the fused reward kernel on host memory (addresses as integers)."""

# ---------------------------------------------------------------- CUDA kernels

class DevicePreprocessPlan:
    """A PreprocessPlan's tap tables uploaded to one CUDA device."""

    def __init__(self, plan: PreprocessPlan, device: int) -> None: ...
    @property
    def device(self) -> int: ...
    @property
    def in_height(self) -> int: ...
    @property
    def in_width(self) -> int: ...
    @property
    def out_size(self) -> int: ...

def preprocess_cuda(
    device_plan: DevicePreprocessPlan,
    frames: int,
    num_frames: int,
    height: int,
    width: int,
    pixel_stride: int,
    row_stride: int,
    frames_per_row: int,
    frame_col_stride: int,
    frame_row_stride: int,
    out: int,
    dtype: int,
    stream: int,
) -> None:
    """Fused preprocess kernel on the plan's device (addresses and stream as integers)."""

MAX_CUDA_REWARD_TASKS: int
"""Tasks one reward_cuda call takes at most (RewardHead splits larger tables)."""

def reward_cuda(
    embeddings: int,
    dtype: int,
    n: int,
    d: int,
    row_stride: int,
    text: int,
    m: int,
    tasks: Sequence[RewardTask],
    out: int,
    device: int,
    stream: int,
) -> None:
    """Fused reward kernel on a CUDA device (addresses and stream as integers)."""
