"""How frames reach the encoder: a source draws them and lends a view of where they lie.

Every frame source (the EGL renderer's pixel buffer, the MuJoCo Warp renderer's
frames on the GPU, the host frames of gymnasium envs) hands its frames to the
preprocessor the same way, as a :class:`FrameView`: an address, a byte layout,
the device the memory is on, and (for GPU sources drawing on their own stream)
the event after which the frames may be read. ``FramePreprocessor.run(view)`` is
the one entry point that reads them.

    with source.lend(rows, stream) as view:   # frames rows.start .. rows.stop - 1
        preprocessor.run(view, out=pixels[rows])
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch


@dataclasses.dataclass(frozen=True)
class FrameLayout:
    """Where frame ``i``'s pixel (row ``r`` from the top, column ``c``) lives, in bytes:

    ``(i % frames_per_row) * frame_col_stride + (i // frames_per_row) * frame_row_stride
    + r * row_stride + c * pixel_stride`` from the buffer's start (plus ``offset``).
    Channels are R, G, B at the pixel's first three bytes (a fourth, alpha, is skipped
    when ``pixel_stride`` is 4).
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
    def stacked(cls, frames: torch.Tensor) -> FrameLayout:
        """A (N, H, W, 3) uint8 tensor (any strides with contiguous channels)."""
        n, h, w, _ = frames.shape
        s = frames.stride()
        return cls(n, h, w, pixel_stride=s[2], row_stride=s[1], frame_row_stride=s[0])

    def rows(self, rows: slice) -> tuple[int, FrameLayout]:
        """(byte offset of frame ``rows.start``, the layout of frames ``rows``) for one frame per row."""
        if self.frames_per_row != 1:
            raise ValueError("rows() needs frames stored one after another (frames_per_row == 1)")
        start, stop, _ = rows.indices(self.num_frames)
        return start * self.frame_row_stride, dataclasses.replace(self, num_frames=stop - start)


@dataclasses.dataclass(frozen=True)
class FrameView:
    """Frames lent by a source: ``layout`` from ``address`` on ``device``.

    ``ready``: a CUDA event after which the frames may be read (a GPU source that
    draws on its own stream records it); None: readable on the current stream now.
    ``owner`` keeps the memory alive while the view is in use.
    """

    address: int
    layout: FrameLayout
    device: torch.device
    ready: Any = None
    owner: Any = None

    @classmethod
    def of(cls, buffer: torch.Tensor, layout: FrameLayout | None = None) -> FrameView:
        """A view of a uint8 tensor's frames (default layout: a (N, H, W, 3) stack)."""
        layout = FrameLayout.stacked(buffer) if layout is None else layout
        return cls(buffer.data_ptr(), layout, buffer.device, owner=buffer)

    @property
    def num_frames(self) -> int:
        return self.layout.num_frames

    def wait(self) -> None:
        """Makes the current CUDA stream wait until the frames are drawn (no host wait)."""
        if self.ready is not None:
            torch.cuda.current_stream(self.device).wait_event(self.ready)

    def tensor(self) -> torch.Tensor:
        """The frames as a uint8 (N, H, W, 3) tensor on ``device``, for consumers written in torch (a
        generative judge's image processor): a view of the lent memory where the layout is one frame
        after another with rows top-down, else a copy (the EGL buffer's bottom-up rows, tiled frames).
        Valid while the view is lent; a device view is first waited for on the current stream."""
        self.wait()
        layout = self.layout
        rows_of_tiles = -(-layout.num_frames // layout.frames_per_row)
        shape = [rows_of_tiles, layout.frames_per_row, layout.height, layout.width, 3]
        strides = [layout.frame_row_stride, layout.frame_col_stride, layout.row_stride, layout.pixel_stride, 1]
        start = self.address + layout.offset
        flipped = []
        for dim, (size, stride) in enumerate(zip(shape, strides)):
            if stride < 0:  # as_strided takes no negative strides: start at the far end, flip afterwards
                start += stride * (size - 1)
                strides[dim] = -stride
                flipped.append(dim)
        span = sum(stride * (size - 1) for size, stride in zip(shape, strides)) + 1
        frames = torch.as_strided(_bytes_at(start, span, self.device, self.owner), shape, strides)
        if flipped:
            frames = frames.flip(flipped)
        return frames.reshape(-1, layout.height, layout.width, 3)[: layout.num_frames]


def _bytes_at(address: int, size: int, device: torch.device, owner: Any) -> torch.Tensor:
    """``size`` bytes from ``address`` as a uint8 tensor sharing the memory: within ``owner``'s storage
    when it is a tensor, else host memory read in place or device memory through the CUDA array
    interface (a renderer's mapped buffer)."""
    if isinstance(owner, torch.Tensor):
        storage = owner.untyped_storage()
        whole = torch.empty(0, dtype=torch.uint8, device=owner.device).set_(storage)
        start = address - storage.data_ptr()
        if start < 0 or start + size > whole.numel():
            raise ValueError("the frame view reaches outside the tensor that owns its memory")
        return whole[start : start + size]
    if device.type == "cpu":
        import ctypes

        return torch.from_numpy(np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address)))

    class _DeviceBytes:
        __cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}

    return torch.as_tensor(_DeviceBytes(), device=device)


class FrameSource(Protocol):
    """What the simulator env needs of a renderer (``EGLRenderer``, ``WarpRenderer``): draw
    frames ``rows`` of a simulator's states, lend them in place, hand them out.

    ``stream`` is the CUDA stream (torch) the source should draw and map on, or None on the
    CPU. A lent view stays valid until the ``lend`` context exits.
    """

    @property
    def num_envs(self) -> int: ...

    @property
    def height(self) -> int: ...

    @property
    def width(self) -> int: ...

    @property
    def cuda_device(self) -> int | None: ...

    def draw(
        self,
        sim: Any,
        rows: slice | None = None,
        stream: torch.cuda.Stream | None = None,
        *,
        positions: str = "reached",
    ) -> None: ...

    def lend(
        self, rows: slice | None = None, stream: torch.cuda.Stream | None = None
    ) -> contextlib.AbstractContextManager[FrameView]: ...

    def render_sim(self, sim: Any, device: Any = None, *, positions: str = "reached") -> Any: ...

    def frames(self, device: Any = None) -> Any: ...

    def close(self) -> None: ...


@runtime_checkable
class SteppedFrameSource(Protocol):
    """A VecEnv that steps and draws its envs range by range (``stack.simulator_env.SimulatorVecEnv``):
    ``step_in_ranges(actions, ranges, stream, on_frames)`` takes a whole step, lending each range's
    frames to ``on_frames(rows, lent)`` (a context manager of a :class:`FrameView`) before it
    simulates the next, and returns what ``step_wait`` returns. The VLM reward wrapper scores
    range k while range k + 1 is simulated and drawn; the source alone holds the step's state.
    ``score_terminal_on``: the frame it draws for an episode's last step (``envs.time_limits``)."""

    timer: Any
    score_terminal_on: str

    def step_in_ranges(
        self,
        actions: Any,
        ranges: Sequence[slice],
        stream: torch.cuda.Stream | None = None,
        on_frames: Callable[[slice, contextlib.AbstractContextManager[FrameView]], None] | None = None,
    ) -> tuple[Any, np.ndarray, np.ndarray, list[dict]]: ...

    def last_frames(self, device: Any = None) -> Any: ...


@runtime_checkable
class DrawnFrameSource(Protocol):
    """A VecEnv whose ``step_wait`` steps every env and then draws the frames of the states they reached
    itself (``stack.drawn_env.DrawnVecEnv``, the batched drawing of gymnasium envs): ``lend_frames(rows,
    stream)`` lends frames ``rows`` of the last step in place, as a frame source's ``lend`` does.
    ``score_terminal_on``: the frame it draws for an episode's last step (``envs.time_limits``)."""

    timer: Any
    score_terminal_on: str

    def lend_frames(
        self, rows: slice, stream: torch.cuda.Stream | None = None
    ) -> contextlib.AbstractContextManager[FrameView]: ...

    def last_frames(self, device: Any = None) -> Any: ...


class HostFrames:
    """Frames the generic path collected on the host: one reusable (pinned when CUDA is present) buffer."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    def stack(self, frames: list[np.ndarray]) -> torch.Tensor:
        """Copies per-env uint8 (H, W, 3) frames into the buffer; returns it (N, H, W, 3)."""
        first = np.asarray(frames[0])
        shape = (len(frames),) + first.shape
        if first.dtype != np.uint8 or first.ndim != 3 or first.shape[2] != 3:
            raise ValueError(f"env frames must be uint8 (H, W, 3), got {first.dtype} {first.shape}")
        if self._buffer is None or tuple(self._buffer.shape) != shape:
            self._buffer = torch.empty(shape, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
        host = self._buffer.numpy()
        for i, frame in enumerate(frames):
            if np.shape(frame) != first.shape:
                raise ValueError(f"env {i} rendered {np.shape(frame)}, env 0 rendered {first.shape}: sizes must match")
            host[i] = frame
        return self._buffer

    @property
    def tensor(self) -> torch.Tensor:
        if self._buffer is None:
            raise RuntimeError("no frames yet: step the environments first")
        return self._buffer

    @contextlib.contextmanager
    def lend(self, rows: slice, stream: torch.cuda.Stream | None = None) -> Iterator[FrameView]:
        yield FrameView.of(self.tensor[rows])
