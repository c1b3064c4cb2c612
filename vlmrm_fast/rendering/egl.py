"""Headless batch rendering: the frames of N simulations of one model per call.

    renderer = EGLRenderer(model, num_envs=64, height=224, width=224, camera=-1)
    frames = renderer.render(qpos)                  # uint8 (64, 224, 224, 3), upright
    frames = renderer.render_sim(sim, device="cuda")  # torch CUDA tensor, no host copy
    renderer.draw(sim, slice(0, 32))                # frames 0..31 of the sim's states, kept in place
    with renderer.lend(slice(0, 32), stream) as view:   # a FrameView of them (vlmrm_fast.frames.views)
        ...

Pixels equal ``mujoco.Renderer``'s for the same model, camera, size and state. One EGL
context per renderer: on NVIDIA the EGL device of CUDA device ``gpu``; on a CPU-only
machine Mesa's software EGL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import mujoco
import numpy as np

import vlmrm_fast.runtime.native  # noqa: F401  (libmujoco, then the core)
from vlmrm_fast._core import render as _native_render
from vlmrm_fast.frames.views import FrameLayout, FrameView
from vlmrm_fast.physics.batch import BatchSimulator
from vlmrm_fast.physics.simulator import HOST_DATA, HOST_POSITIONS, NATIVE_DATA
from vlmrm_fast.rendering.base import RendererBase
from vlmrm_fast.runtime.device import build_info, native_cuda_usable

if TYPE_CHECKING:
    import torch


def egl_unavailable() -> str | None:
    """None when headless EGL can draw here, else why not (the one EGL probe of the package)."""
    info = build_info()
    return None if info["egl_available"] else str(info["egl_error"])


class EGLRenderer(RendererBase):
    """Renders ``num_envs`` frames of ``model`` per call (the calls: :class:`RendererBase`).

    Args:
        model: the ``mujoco.MjModel`` (copied).
        num_envs: frames per call.
        height, width: frame size in pixels (no ``offwidth``/``offheight`` limit: the
            renderer sizes its own offscreen buffer).
        camera: -1 for the free camera (as ``mujoco.Renderer``), a camera id or name.
        gpu: CUDA index of the GPU to render on; None picks one (Mesa's software EGL on a
            CPU-only machine).
        max_geom: scene capacity per frame, ``mujoco.Renderer``'s default.
        nthread: threads for scene updates from positions (``render(qpos)``, a simulator's ``qpos``);
            0: every CPU we may use.

    It draws a simulator from its native data where the simulator offers it (the simulator env's:
    scene updates on the simulator's own threads), else from its positions (``qpos`` on the host,
    set into MuJoCo data of the renderer's own). Gymnasium envs' own data (:data:`HOST_DATA`, the
    batched drawing) it draws as it lies, frame ``i`` from env ``i``'s camera, which it keeps from one draw
    to the next as the env's own viewer keeps its camera.
    """

    draws: ClassVar[tuple[str, ...]] = (NATIVE_DATA, HOST_POSITIONS, HOST_DATA)

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        height: int,
        width: int,
        camera: int | str = -1,
        gpu: int | None = None,
        *,
        max_geom: int = 10000,
        nthread: int = 0,
    ) -> None:
        self._native = None
        self._positions: BatchSimulator | None = None  # MuJoCo data for drawing host positions, made on first use
        self._env_data: Any = None  # the host data source whose cameras and option are set (HOST_DATA)
        self._aimed = np.zeros(0, dtype=bool)  # per frame: its camera set from its env's
        super().__init__(model, num_envs, height, width)
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, (int, np.integer)) or gpu < 0):
            raise ValueError(f"gpu must be None or a CUDA device index >= 0, got {gpu!r}")
        if isinstance(camera, np.integer):
            camera = int(camera)
        self._nthread = int(nthread)
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

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], camera: Any, device: torch.device
    ) -> EGLRenderer:
        """The simulator env's EGL renderer (its row of ``vlmrm_fast.rendering.RENDERERS``): on the EGL device of
        ``device``'s GPU, or Mesa's on the CPU."""
        height, width = render_size
        return cls(model, num_envs, height, width, camera=camera, gpu=device.index if device.type == "cuda" else None)

    @classmethod
    def for_env_data(
        cls, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], max_geom: int, device: torch.device
    ) -> EGLRenderer:
        """The batched drawing's EGL renderer (see ``RendererBase.for_env_data``)."""
        height, width = render_size
        gpu = device.index if device.type == "cuda" else None
        return cls(model, num_envs, height, width, camera=-1, gpu=gpu, max_geom=max_geom)

    # ------------------------------------------------------------------ properties
    @property
    def num_envs(self) -> int:
        return self._native_live().num_envs

    @property
    def width(self) -> int:
        return self._native_live().width

    @property
    def height(self) -> int:
        return self._native_live().height

    @property
    def camera_id(self) -> int:
        """-1 for the free camera, else the model's camera id."""
        return self._native_live().camera

    @property
    def cuda_device(self) -> int | None:
        """CUDA index of the GPU the frames are drawn on; None for software EGL."""
        index = self._native_live().cuda_device
        return None if index < 0 else index

    @property
    def software(self) -> bool:
        """True on Mesa's software rasterizer (llvmpipe)."""
        return self._native_live().software

    @property
    def host_reads_through_cuda(self) -> bool:
        """True when frames read for the host (``render``, ``frames``, ``lend`` without a stream)
        are copied through CUDA into page-locked memory: a renderer on a CUDA GPU's EGL device,
        whose pixel buffer thus stays in video memory for the kernels. False on Mesa, where the
        pixel buffer is mapped into host memory."""
        return self._native_live().host_reads_through_cuda

    @property
    def closed(self) -> bool:
        return self._native is None

    # ------------------------------------------------------------------- drawing
    def _draw_qpos(self, qpos: np.ndarray) -> None:
        self._native_live().render(qpos)

    def _draw_sim(self, sim: Any, state: str, start: int, count: int, stream=None, kinematics: bool = True) -> None:
        # GL orders its own work: the stream of the frame-source interface is not needed here.
        if state == HOST_DATA:
            self._draw_env_data(sim, start, count)
            return
        if state == NATIVE_DATA:
            self._native_live().render_sim(sim.native, start, count, kinematics)
            return
        if self._positions is None:
            self._positions = BatchSimulator(self.model, self.num_envs, nthread=self._nthread)
        rows = slice(start, start + count)
        self._positions.qpos[rows] = sim.qpos[rows]
        self._native_live().render_sim(self._positions.native, start, count)  # forward kinematics, then the scene

    def _draw_env_data(self, source: Any, start: int, count: int) -> None:
        """Frames ``start .. start + count - 1`` of gymnasium envs' own data (``source``: HOST_DATA), each as it
        lies; a frame's camera is its env's, set at the frame's first draw (gymnasium aims its free camera
        at the data of its first ``render()``) and kept from then on."""
        native = self._native_live()
        if self._env_data is not source:
            native.set_option(source.option)
            self._env_data = source
            self._aimed = np.zeros(self.num_envs, dtype=bool)
        for frame in np.flatnonzero(~self._aimed[start : start + count]) + start:
            native.set_frame_camera(int(frame), source.camera(int(frame)))
            self._aimed[frame] = True
        native.render_data(
            source.model_addresses[start : start + count], source.data_addresses[start : start + count], start
        )

    def camera_of_frame(self, frame: int) -> dict[str, Any]:
        """The camera frame ``frame`` of envs' own data is drawn from now (``mujoco.MjvCamera``'s fields)."""
        return dict(self._native_live().frame_camera(int(frame)))

    @contextlib.contextmanager
    def lend(self, rows: slice | None = None, stream: torch.cuda.Stream | None = None) -> Iterator[FrameView]:
        """Lends frames ``rows`` of the pixel buffer in place as a :class:`FrameView`: mapped into
        CUDA on ``stream`` (a renderer on a CUDA device's EGL; GL's drawing completes before
        work on ``stream`` reads them), else in host memory (see ``host_reads_through_cuda``).
        No drawing until the block ends."""
        import torch

        native = self._native_live()
        layout = FrameLayout(**native.frame_layout)  # RGBA, rows bottom-up, as GL reads them
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

    def _fetch(self, target):
        native = self._native_live()
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

    def _drawn_on(self) -> str:
        own = self.cuda_device
        return "the CPU (Mesa's software EGL)" if own is None else f"cuda:{own} (pass gpu= to choose)"

    # ------------------------------------------------------------------ life cycle
    def close(self) -> None:
        """Free the GL context, buffers and threads now (idempotent)."""
        native, self._native = getattr(self, "_native", None), None
        if native is not None:
            native.close()
        positions, self._positions = getattr(self, "_positions", None), None
        if positions is not None:
            positions.close()

    def __del__(self) -> None:
        self.close()

    def _cuda_output_ready(self) -> bool:
        return native_cuda_usable()  # the pixel buffer reaches torch through the core's CUDA-GL interop

    def _native_live(self):
        self._live()
        assert self._native is not None
        return self._native
