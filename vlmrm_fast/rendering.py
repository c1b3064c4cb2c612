"""Headless batch rendering: the frames of N simulations of one model per call.

    renderer = BatchRenderer(model, num_envs=64, width=224, height=224, camera=-1)
    frames = renderer.render(qpos)                  # uint8 (64, 224, 224, 3), upright
    frames = renderer.render_sim(sim, device="cuda")  # torch CUDA tensor, no host copy
    renderer.draw(sim, slice(0, 32))                # frames 0..31 of the sim's states, kept in place
    with renderer.lend(slice(0, 32), stream) as view:   # a FrameView of them (vlmrm_fast.frames)
        ...

Pixels equal ``mujoco.Renderer``'s for the same model, camera, size and state. One EGL
context per renderer: on NVIDIA the EGL device of CUDA device ``gpu``; on a CPU-only
machine Mesa's software EGL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from vlmrm_fast._core import render as _native_render
from vlmrm_fast.device import build_info, native_cuda_usable
from vlmrm_fast.frames import FrameLayout, FrameView
from vlmrm_fast.sim import BatchSimulator

if TYPE_CHECKING:
    import torch


def egl_unavailable() -> str | None:
    """None when headless EGL can draw here, else why not (the one EGL probe of the package)."""
    info = build_info()
    return None if info["egl_available"] else str(info["egl_error"])


class BatchRenderer:
    """Renders ``num_envs`` frames of ``model`` per call.

    Args:
        model: the ``mujoco.MjModel`` (copied).
        num_envs: frames per call.
        width, height: frame size in pixels (no ``offwidth``/``offheight`` limit: the
            renderer sizes its own offscreen buffer).
        camera: -1 for the free camera (as ``mujoco.Renderer``), a camera id or name.
        gpu: CUDA index of the GPU to render on; None picks one (Mesa's software EGL on a
            CPU-only machine).
        max_geom: scene capacity per frame, ``mujoco.Renderer``'s default.
        nthread: threads for scene updates in ``render(qpos)``; 0: every CPU we may use.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        width: int,
        height: int,
        camera: int | str = -1,
        gpu: int | None = None,
        *,
        max_geom: int = 10000,
        nthread: int = 0,
    ) -> None:
        self._native = None
        if not isinstance(model, mujoco.MjModel):
            raise TypeError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, (int, np.integer)) or gpu < 0):
            raise ValueError(f"gpu must be None or a CUDA device index >= 0, got {gpu!r}")
        if isinstance(camera, np.integer):
            camera = int(camera)
        self.model = model
        self._native = _native_render.BatchRenderer(
            model._address,
            int(num_envs),
            int(width),
            int(height),
            camera,
            -1 if gpu is None else int(gpu),
            int(max_geom),
            int(nthread),
        )

    # ------------------------------------------------------------------ properties
    @property
    def num_envs(self) -> int:
        return self._live().num_envs

    @property
    def width(self) -> int:
        return self._live().width

    @property
    def height(self) -> int:
        return self._live().height

    @property
    def camera_id(self) -> int:
        """-1 for the free camera, else the model's camera id."""
        return self._live().camera

    @property
    def cuda_device(self) -> int | None:
        """CUDA index of the GPU the frames are drawn on; None for software EGL."""
        index = self._live().cuda_device
        return None if index < 0 else index

    @property
    def software(self) -> bool:
        """True on Mesa's software rasterizer (llvmpipe)."""
        return self._live().software

    @property
    def host_reads_through_cuda(self) -> bool:
        """True when frames read for the host (``render``, ``frames``, ``lend`` without a stream)
        are copied through CUDA into page-locked memory: a renderer on a CUDA GPU's EGL device,
        whose pixel buffer thus stays in video memory for the kernels. False on Mesa, where the
        pixel buffer is mapped into host memory."""
        return self._live().host_reads_through_cuda

    @property
    def closed(self) -> bool:
        return self._native is None

    # --------------------------------------------------------------------- calls
    def render(self, qpos: np.ndarray, device: str | torch.device | None = None):
        """Frames for positions ``qpos`` (num_envs, nq); the rest of the state at model defaults.

        Returns uint8 (num_envs, height, width, 3), row 0 at the top: a numpy array on
        the host (``device`` None or "cpu"), a torch tensor filled through CUDA-GL
        interop for ``device="cuda"``.
        """
        native = self._live()
        qpos = np.asarray(qpos, dtype=np.float64)
        expected = (native.num_envs, native.nq)
        if qpos.shape != expected:
            raise ValueError(f"qpos must have shape {expected}, got {qpos.shape}")
        if not np.isfinite(qpos).all():
            raise ValueError("qpos has non-finite values (NaN or inf)")
        target = self._target(device)
        native.render(qpos)
        return self._fetch(target)

    def render_sim(self, sim: BatchSimulator, device: str | torch.device | None = None, *, fetch: bool = True):
        """Frames of the current state of each of ``sim``'s simulations (same model and
        num_envs), updated on the simulator's threads with no Python per env. Returns as
        ``render``; with ``fetch=False`` the frames stay in the renderer (see ``frames``
        and ``lend``) and None is returned."""
        target = self._target(device) if fetch else None
        self.draw(sim)
        return self._fetch(target) if fetch else None

    def draw(self, sim: BatchSimulator, rows: slice | None = None, stream: torch.cuda.Stream | None = None) -> None:
        """Draws frames ``rows`` (default all) of the current states of ``sim``'s simulations
        ``rows``; the other frames keep what they hold. GL orders its own work, so ``stream``
        is not needed (it is part of the frame-source interface)."""
        native = self._live()
        if not isinstance(sim, BatchSimulator):
            raise TypeError(f"sim must be a BatchSimulator, got {type(sim).__name__}")
        start, count = sim._range(rows)
        native.render_sim(sim._live(), start, count)

    @contextlib.contextmanager
    def lend(self, rows: slice | None = None, stream: torch.cuda.Stream | None = None) -> Iterator[FrameView]:
        """Lends frames ``rows`` of the pixel buffer in place as a :class:`FrameView`: mapped into
        CUDA on ``stream`` (a renderer on a CUDA device's EGL; GL's drawing completes before
        work on ``stream`` reads them), else in host memory (see ``host_reads_through_cuda``).
        No drawing until the block ends."""
        import torch

        native = self._live()
        layout = FrameLayout.bottom_up(native.num_envs, native.height, native.width)
        offset, layout = layout.rows(rows if rows is not None else slice(None))
        if stream is not None and native.cuda_device >= 0:
            address = native.lend_device(stream.cuda_stream)
            device = torch.device("cuda", native.cuda_device)
        else:
            address = native.lend_host()
            device = torch.device("cpu")
        try:
            yield FrameView(address + offset, layout, device, owner=self)
        finally:
            native.release_frames()

    def frames(self, device: str | torch.device | None = None):
        """The last drawn frames, as ``render`` returns them."""
        return self._fetch(self._target(device))

    def close(self) -> None:
        """Free the GL context, buffers and threads now (idempotent)."""
        native, self._native = getattr(self, "_native", None), None
        if native is not None:
            native.close()

    def __enter__(self) -> BatchRenderer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # ------------------------------------------------------------------- helpers
    def _live(self):
        if self._native is None:
            raise RuntimeError("the renderer is closed")
        return self._native

    def _target(self, device):
        """None for host output, else the torch CUDA device to fill; checked before drawing."""
        if device is None or (isinstance(device, str) and device == "cpu"):
            return None
        import torch

        try:
            requested = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device={device!r} is not a device; use None, 'cpu' or 'cuda[:N]'") from exc
        if requested.type == "cpu":
            return None
        if requested.type != "cuda":
            raise ValueError(f"device={device!r}: frames go to the host (None, 'cpu') or to 'cuda[:N]'")
        if not (native_cuda_usable() and torch.cuda.is_available()):
            raise RuntimeError(
                f"device={device!r} requested but no CUDA device is usable "
                f"({build_info()['cuda_error'] or 'torch sees none'}); use device=None for host frames"
            )
        own = self._native.cuda_device
        if own < 0:
            raise RuntimeError(
                f"device={device!r} needs the renderer on a CUDA GPU's EGL device (NVIDIA driver), "
                "but it runs on software EGL; use device=None for host frames"
            )
        if requested.index is not None and requested.index != own:
            raise ValueError(f"device={device!r}: this renderer draws on cuda:{own}; pass gpu= to choose")
        return torch.device("cuda", own)

    def _fetch(self, target):
        native = self._live()
        shape = (native.num_envs, native.height, native.width, 3)
        if target is None:
            frames = np.empty(shape, dtype=np.uint8)
            native.copy_frames(frames.ctypes.data)
            return frames
        import torch

        frames = torch.empty(shape, dtype=torch.uint8, device=target)
        stream = torch.cuda.current_stream(target).cuda_stream
        native.copy_frames_cuda(frames.data_ptr(), stream)
        return frames
