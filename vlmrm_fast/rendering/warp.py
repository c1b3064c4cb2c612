"""Batch rendering on MuJoCo Warp: all envs' frames in one launch of its ray tracer, on the GPU.

    renderer = WarpRenderer(model, num_envs=1024, height=224, width=224, camera="vlmrm_front")
    frames = renderer.render(qpos)                  # uint8 (1024, 224, 224, 3) numpy, upright RGB
    frames = renderer.render(qpos, device="cuda")   # a torch CUDA tensor, no host copy

Per call only ``qpos`` travels to the device; kinematics (bodies, centres of mass,
cameras, lights), the refit of the scene's BVH, the render and the unpacking of
MuJoCo Warp's packed pixels into RGB bytes all run there, captured once into a
CUDA graph per range of envs. Warp's CPU backend runs the same code (slowly) on
a machine without a GPU.

Streams: a range is drawn on the caller's torch stream (torch's current one by default, which
may be the legacy default stream). Its first draw runs eagerly there (loading Warp's modules),
then the same launches are captured on a stream the renderer owns, since CUDA cannot capture
on the legacy stream; later draws replay the graph on the caller's stream. Nothing here makes
that stream wait for other work: the order comes from the qpos upload and the ``ready`` event.

The first renderer of a process on a fresh machine compiles MuJoCo Warp's kernels into Warp's
kernel cache (``WARP_CACHE_PATH``, else ``~/.cache/warp``); docs/renderers.md says what that costs.

The picture is a ray tracer's: the geometry is ``mujoco.Renderer``'s, the shading,
shadows and edges differ in detail (docs/renderers.md gives the difference per scene).
Physics stays elsewhere (:mod:`vlmrm_fast.physics`); this module only draws states: a simulator's
worlds on the device where it offers them (MuJoCo Warp physics), else its positions from the host, or
gymnasium envs' own data (the batched drawing); the poses computed first, or the data drawn as it lies
(``physics.simulator.DRAWN_POSITIONS``). On Warp's CPU backend a draw from the host is split into parts
drawn at once on the CPU's threads.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import mujoco
import numpy as np
import torch

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.frames.views import FrameLayout, FrameView
from vlmrm_fast.physics.simulator import DEVICE_WORLDS, HOST_DATA, HOST_POSITIONS
from vlmrm_fast.rendering.base import RendererBase
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.warp import import_warp, warp_stream_of

MAX_FRAME_SIDE = 8192
_UNPACK_KERNEL = None


def _unpack_kernel():
    """uint32 pixels packed as MuJoCo Warp stores them (0xAARRGGBB) -> RGB bytes (N, H, W, 3)."""
    global _UNPACK_KERNEL
    if _UNPACK_KERNEL is None:
        wp, _ = import_warp()

        @wp.kernel(module="unique")
        def unpack_rgb(packed: wp.array2d(dtype=wp.uint32), first: int, width: int, out: wp.array4d(dtype=wp.uint8)):
            world, pixel = wp.tid()
            value = packed[world, first + pixel]
            row = pixel // width
            col = pixel - row * width
            out[world, row, col, 0] = wp.uint8((value >> wp.uint32(16)) & wp.uint32(255))
            out[world, row, col, 1] = wp.uint8((value >> wp.uint32(8)) & wp.uint32(255))
            out[world, row, col, 2] = wp.uint8(value & wp.uint32(255))

        _UNPACK_KERNEL = unpack_rgb
    return _UNPACK_KERNEL


def render_data_sizes() -> dict[str, int]:
    """``mujoco_warp.make_data`` sizes for drawing only: no contact or constraint rows.

    Drawing runs kinematics, centres of mass, cameras and lights, never collision or the
    solver, so the contact and constraint buffers (about half of a humanoid's Data) stay empty.
    """
    return {"nconmax": 0, "njmax": 0}


@dataclasses.dataclass
class _Slot:
    """The device state for one range of envs: their data, render context and captured graph."""

    rows: slice
    model: Any  # the mujoco_warp.Model drawn (the renderer's, or a simulator's)
    data: Any  # mujoco_warp.Data with one world per env of the range (a simulator's: all its worlds)
    context: Any  # mujoco_warp RenderContext
    frames: Any  # warp view of the renderer's frames for the range
    first_pixel: int  # where the camera's pixels start in the context's packed rows
    # For positions drawn from the host (none for a simulator's worlds, drawn where they lie):
    qpos: torch.Tensor | None = None  # the data's qpos as a torch view (float32, on the device)
    staging: torch.Tensor | None = None  # this range's own host rows for qpos (pinned on a GPU), no other range's
    uploaded: Any = None  # CUDA event after the last qpos upload (the staging rows may be rewritten after it)
    drawn: Any = None  # CUDA event after the last draw of the range (its memory is free to go after it)
    graph: Any = None
    kinematics: bool = True  # the poses computed from qpos first; False: the data drawn as it lies (as stepped)
    loaded: bool = False  # drawn once: Warp's modules are loaded (CPU backend: later draws may run on threads)


class WarpRenderer(RendererBase):
    """Renders ``num_envs`` frames of ``model`` per call with MuJoCo Warp.

    Args:
        model: the ``mujoco.MjModel`` (copied; its solver is irrelevant here and set to
            one MuJoCo Warp loads).
        num_envs: frames per call.
        height, width: frame size in pixels.
        camera: a camera id or name of the model (MuJoCo Warp renders model cameras only).
        device: "cuda", "cuda:N", "cpu", or None / "auto" (the first GPU when there is one).
        shadows: cast shadows; None: when a light of the model casts them.
        cuda_graph: replay each range's launches as one CUDA graph (GPU only).
        cpu_threads: on Warp's CPU backend, which runs a kernel on one thread, the envs of a draw are split
            into this many parts drawn at once on as many threads (None: one per CPU this process may use).
    """

    draws: ClassVar[tuple[str, ...]] = (DEVICE_WORLDS, HOST_POSITIONS, HOST_DATA)

    #: The fields of gymnasium envs' own data (HOST_DATA) that MuJoCo Warp's render reads, uploaded as they lie.
    ENV_DATA_FIELDS = ("geom_xpos", "geom_xmat", "cam_xpos", "cam_xmat", "light_xpos", "light_xdir", "flexvert_xpos")

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        height: int,
        width: int,
        camera: int | str,
        device: str | torch.device | None = None,
        *,
        shadows: bool | None = None,
        cuda_graph: bool = True,
        cpu_threads: int | None = None,
    ) -> None:
        self._workers: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: dict[tuple[Any, ...], _Slot] = {}  # by range (start, stop, kinematics), or a simulator's worlds
        self._closed = True  # until built
        wp, mjw = import_warp()
        super().__init__(model, num_envs, height, width)
        for name, value in (("height", height), ("width", width)):
            if value > MAX_FRAME_SIDE:
                raise FieldError(name, f"must be at most {MAX_FRAME_SIDE} pixels, got {value!r}")
        self._wp, self._mjw = wp, mjw
        self._shape = (int(num_envs), int(height), int(width))
        self.camera_id = _camera_id(model, camera)
        self.device = resolve_device(device)
        self._wp_device = wp.get_device(str(self.device))
        self.shadows = bool(model.light_castshadow.any()) if shadows is None else bool(shadows)
        self.cuda_graph = bool(cuda_graph) and self.device.type == "cuda"
        self._render_model = _loadable_copy(model)
        self._model: Any = None  # put on the device at the first draw of positions (a simulator's worlds bring theirs)
        self._frames = torch.zeros((self.num_envs, self.height, self.width, 3), dtype=torch.uint8, device=self.device)
        self._ready: torch.cuda.Event | None = None
        self._capture_stream: Any = None  # a wp.Stream of this renderer's own, made at the first capture
        self._view_model: mujoco.MjModel | None = None  # the envs' model (HOST_DATA), whose cameras they draw from
        self._views: list[dict[str, Any] | None] = [None] * int(num_envs)  # per frame: its env's camera (HOST_DATA)
        threads = len(os.sched_getaffinity(0)) if cpu_threads is None else positive_int(cpu_threads, "cpu_threads")
        self._cpu_parts = min(threads, self.num_envs) if self.device.type == "cpu" else 1
        if self._cpu_parts > 1:
            self._workers = concurrent.futures.ThreadPoolExecutor(self._cpu_parts, thread_name_prefix="warp-draw")
        self._closed = False

    @classmethod
    def for_env_data(
        cls, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], max_geom: int, device: torch.device
    ) -> WarpRenderer:
        """The batched drawing's MuJoCo Warp renderer (see ``RendererBase.for_env_data``): the envs' own
        poses drawn as they lie (no kinematics), from each env's camera: a model camera as it is, or the free
        camera of the env's ``render()`` put in the place of the model's first camera (MuJoCo Warp draws model
        cameras only). Its picture is a ray tracer's, not the envs' ``render()``: docs/environments.md gives
        the difference per family."""
        if model.ncam == 0:
            raise TypeError(
                "MuJoCo Warp draws model cameras, and this env's model has none to put its view in: use renderer='egl'"
            )
        height, width = render_size
        renderer = cls(model, num_envs, height, width, camera=0, device=device)
        renderer._view_model = model
        return renderer

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], camera: Any, device: torch.device
    ) -> WarpRenderer:
        """The simulator env's MuJoCo Warp renderer (its row of ``vlmrm_fast.rendering.RENDERERS``), on ``device``."""
        height, width = render_size
        return cls(model, num_envs, height, width, camera=camera, device=device)

    # ------------------------------------------------------------------ properties
    @property
    def num_envs(self) -> int:
        return self._shape[0]

    @property
    def height(self) -> int:
        return self._shape[1]

    @property
    def width(self) -> int:
        return self._shape[2]

    @property
    def cuda_device(self) -> int | None:
        """CUDA index of the GPU the frames are drawn on; None on the CPU backend."""
        return self.device.index if self.device.type == "cuda" else None

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------- drawing
    def _draw_qpos(self, qpos: np.ndarray) -> None:
        self._draw(qpos, slice(0, self.num_envs), self._current_stream())

    def _draw_sim(
        self, sim: Any, state: str, start: int, count: int, stream: torch.cuda.Stream | None, kinematics: bool = True
    ) -> None:
        """On ``stream`` (default: torch's current stream); the host does not wait. A simulator's worlds on
        the device are drawn where they lie (see :meth:`_draw_worlds`)."""
        if state == DEVICE_WORLDS:
            self._draw_worlds(sim, start, count, kinematics)
        elif state == HOST_DATA:
            self._draw_env_data(sim, start, count, stream if stream is not None else self._current_stream())
        else:
            self._draw(sim.qpos, slice(start, start + count), stream if stream is not None else self._current_stream())

    def _draw_worlds(self, sim: Any, start: int, count: int, kinematics: bool) -> None:
        """Every world of a simulator's device worlds (MuJoCo Warp physics) drawn from its device state: no positions travel and no
        second Data exists. The launches (kinematics first unless the data is drawn as its step left it:
        after a step the derived fields are those of its last forward pass) run on the simulator's stream,
        after its step; ``ready`` marks them done."""
        if (start, count) != (0, self.num_envs) or sim.num_envs != self.num_envs:
            raise ValueError(
                f"a simulator's {sim.num_envs} device worlds are drawn all at once, as it steps them: draw rows "
                f"0..{self.num_envs - 1} of a simulator of {self.num_envs} (the plan gives physics='warp' one range)"
            )
        wp = self._wp
        slot = self._world_slot(sim, kinematics)
        stream = sim.warp_stream
        if stream is None:  # Warp's CPU backend: every call completes before it returns
            with wp.ScopedDevice(self._wp_device):
                self._launch(slot)
            return
        with wp.ScopedStream(stream, sync_enter=False):
            if slot.graph is not None:
                wp.capture_launch(slot.graph, stream=stream)
            else:
                self._launch(slot)  # the first, eager run loads Warp's modules
                if self.cuda_graph:
                    with wp.ScopedCapture(device=self._wp_device, stream=stream) as capture:
                        self._launch(slot)
                    slot.graph = capture.graph
            slot.drawn = self._ready = _recorded(wp.stream_to_torch(stream))

    def _draw_env_data(self, source: Any, start: int, count: int, stream: torch.cuda.Stream | None) -> None:
        """Frames ``start .. start + count - 1`` of gymnasium envs' own data (``source``: HOST_DATA): the fields
        MuJoCo Warp's render reads (:attr:`ENV_DATA_FIELDS`) uploaded as they lie, then the BVH refit and the
        render; each frame's camera is its env's, fixed at its first draw (a free camera's pose computed as
        MuJoCo computes it, put in the first model camera's place)."""
        for frame in range(start, start + count):
            if self._views[frame] is None:
                camera = source.camera(frame)
                if not self._slots and camera["type"] == mujoco.mjtCamera.mjCAMERA_FIXED:
                    self.camera_id = _camera_id(self.model, int(camera["fixedcamid"]))  # (before any context is made)
                self._views[frame] = self._view_of(camera)
        rows = slice(start, start + count)
        if stream is None and self._cpu_parts > 1:
            self._draw_on_cpus(rows, lambda slot: self._upload_env_data(source, slot), kinematics=False)
            return
        slot = self._slot(rows, kinematics=False)
        self._upload_env_data(source, slot)
        with self._wp.ScopedDevice(self._wp_device):
            if stream is None:
                self._launch(slot)
                return
            with torch.cuda.stream(stream), self._wp.ScopedStream(warp_stream_of(stream), sync_enter=False):
                self._launch(slot)
                slot.drawn = self._ready = _recorded(stream)

    def _upload_env_data(self, source: Any, slot: _Slot) -> None:
        """The fields of :attr:`ENV_DATA_FIELDS` of the envs of ``slot`` as their data holds them, a free
        camera's pose in the first model camera's place."""
        envs = range(slot.rows.start, slot.rows.stop)
        for name in self.ENV_DATA_FIELDS:
            target = self._wp.to_torch(getattr(slot.data, name))
            if target.numel() == 0:
                continue
            rows_host = np.stack([getattr(source.datas[env], name) for env in envs])
            if name in ("cam_xpos", "cam_xmat"):
                for k, env in enumerate(envs):
                    view = self._views[env]
                    assert view is not None
                    if view.get(name) is not None:  # a free camera, in the first model camera's place
                        rows_host[k, self.camera_id] = view[name]
            target.copy_(torch.from_numpy(rows_host.reshape(target.shape)).to(target.dtype), non_blocking=False)

    def _view_of(self, camera: dict[str, Any]) -> dict[str, Any]:
        """Where a frame's camera puts the view: a fixed camera of the model (the renderer's own, whose pose the
        env's data holds), or a free camera's pose (``cam_xpos``, ``cam_xmat``) from its lookat, distance,
        azimuth and elevation, as ``mjv_updateCamera`` computes it."""
        model = self._view_model
        assert model is not None
        if camera["type"] == mujoco.mjtCamera.mjCAMERA_FIXED:
            if camera["fixedcamid"] != self.camera_id:
                raise ValueError(
                    f"MuJoCo Warp draws one model camera for every env; this env draws from camera "
                    f"{camera['fixedcamid']}, the renderer from {self.camera_id}: use renderer='egl'"
                )
            return {}
        if camera["type"] != mujoco.mjtCamera.mjCAMERA_FREE or model.vis.global_.orthographic:
            raise ValueError("MuJoCo Warp draws model cameras and free perspective views; use renderer='egl'")
        azimuth, elevation = np.deg2rad(camera["azimuth"]), np.deg2rad(camera["elevation"])
        forward = np.array(
            [np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)]
        )
        up = np.array([-np.sin(elevation) * np.cos(azimuth), -np.sin(elevation) * np.sin(azimuth), np.cos(elevation)])
        right = np.cross(forward, up)
        position = np.asarray(camera["lookat"]) - camera["distance"] * forward
        return {"cam_xpos": position, "cam_xmat": np.stack([right, up, -forward], axis=1).reshape(9)}

    def _world_slot(self, sim: Any, kinematics: bool) -> _Slot:
        """The render context over a simulator's worlds (its model and Data), made on first use."""
        key = ("worlds" if kinematics else "worlds as stepped", id(sim.warp_data))
        slot = self._slots.get(key)
        if slot is None:
            if str(sim.device) != str(self.device):
                raise ValueError(f"the simulator's worlds are on {sim.device}; this renderer draws on {self.device}")
            slot = self._slots[key] = self._make_slot(slice(0, self.num_envs), sim.warp_model, sim.warp_data)
            slot.kinematics = kinematics
        return slot

    @contextlib.contextmanager
    def lend(self, rows: slice | None = None, stream: torch.cuda.Stream | None = None) -> Iterator[FrameView]:
        """Lends frames ``rows`` in place (upright RGB on the device), ready after the last draw."""
        self._live()
        frames = self._frames[rows if rows is not None else slice(None)]
        yield FrameView(frames.data_ptr(), FrameLayout.stacked(frames), frames.device, ready=self._ready, owner=frames)

    def close(self) -> None:
        """Drops the device buffers (idempotent), after the uploads and draws queued on them have run."""
        if self._closed:
            return
        for event in self._pending_events():
            event.synchronize()
        self._slots.clear()
        if self._workers is not None:
            self._workers.shutdown()
            self._workers = None
        # The device model and frames go now, not when a reference cycle through this renderer is collected.
        self._model = self._render_model = self._ready = None
        self._frames = self._frames.new_empty(0)
        self._closed = True

    def __del__(self) -> None:
        if hasattr(self, "_closed"):
            self.close()

    # ------------------------------------------------------------------- drawing
    def _draw(self, qpos: np.ndarray, rows: slice, stream: torch.cuda.Stream | None) -> None:
        if stream is None and self._cpu_parts > 1:
            self._draw_on_cpus(rows, lambda slot: self._upload_positions(qpos, slot))
            return
        slot = self._slot(rows)
        qpos_device, staging = slot.qpos, slot.staging
        assert qpos_device is not None and staging is not None, "a range's slot uploads positions"
        if slot.uploaded is not None:
            slot.uploaded.synchronize()  # the previous upload has left the staging rows
        staging.numpy()[:] = qpos[rows]
        wp = self._wp
        if stream is None:  # Warp's CPU backend: every call completes before it returns
            qpos_device.copy_(staging)
            with wp.ScopedDevice(self._wp_device):
                self._launch(slot)
            return
        caller = warp_stream_of(stream)
        # sync_enter=False: Warp's ScopedStream would otherwise make the caller's stream wait for
        # the device's previous Warp stream, a blocking stream that waits for the legacy stream,
        # and so for all of torch's work there (the encoder's, in the pipelined step).
        with torch.cuda.stream(stream), wp.ScopedStream(caller, sync_enter=False):
            qpos_device.copy_(staging, non_blocking=True)
            slot.uploaded = _recorded(stream)
            if slot.graph is not None:
                wp.capture_launch(slot.graph, stream=caller)
            else:
                self._launch(slot)  # the first, eager run loads Warp's modules
                if self.cuda_graph:
                    slot.graph = self._capture(slot)
            slot.drawn = self._ready = _recorded(stream)

    def _draw_on_cpus(self, rows: slice, upload: Callable[[_Slot], None], kinematics: bool = True) -> None:
        """Warp's CPU backend: the envs of ``rows`` in up to ``cpu_threads`` consecutive parts, each its own
        slot given its input by ``upload`` (positions, or envs' own data drawn as it lies), drawn at once on as
        many threads (a kernel launch leaves Python's lock while it runs). The first draw of a slot loads Warp's
        modules, one slot after another; Warp's default device is set here, once, for all of them (it is the
        process's, not a thread's)."""
        bounds = np.linspace(rows.start, rows.stop, min(self._cpu_parts, rows.stop - rows.start) + 1).astype(int)
        slots = [self._slot(slice(int(a), int(b)), kinematics) for a, b in zip(bounds[:-1], bounds[1:])]
        for slot in slots:
            upload(slot)
        with self._wp.ScopedDevice(self._wp_device):
            if all(slot.loaded for slot in slots) and self._workers is not None:
                for done in [self._workers.submit(self._launch, slot) for slot in slots]:
                    done.result()
            else:
                for slot in slots:
                    self._launch(slot)
                    slot.loaded = True

    @staticmethod
    def _upload_positions(qpos: np.ndarray, slot: _Slot) -> None:
        """The positions of the envs of ``slot`` into its device rows (Warp's CPU backend: at once)."""
        assert slot.qpos is not None and slot.staging is not None, "a range's slot uploads positions"
        slot.staging.numpy()[:] = qpos[slot.rows]
        slot.qpos.copy_(slot.staging)

    def _capture(self, slot: _Slot):
        """The range's launches captured into a graph, on this renderer's own stream (nothing runs)."""
        wp = self._wp
        if self._capture_stream is None:
            self._capture_stream = wp.Stream(self._wp_device)
        with (
            wp.ScopedStream(self._capture_stream, sync_enter=False),
            wp.ScopedCapture(device=self._wp_device, stream=self._capture_stream) as capture,
        ):
            self._launch(slot)
        return capture.graph

    def _launch(self, slot: _Slot) -> None:
        wp, mjw, m, d = self._wp, self._mjw, slot.model, slot.data
        if slot.kinematics:
            mjw.kinematics(m, d)
            mjw.com_pos(m, d)  # subtree centres of mass: cameras and lights that track them
            mjw.camlight(m, d)
        mjw.refit_bvh(m, d, slot.context)
        mjw.render(m, d, slot.context)
        wp.launch(
            _unpack_kernel(),
            dim=(slot.rows.stop - slot.rows.start, self.height * self.width),
            inputs=[slot.context.rgb_data, slot.first_pixel, self.width, slot.frames],
        )

    def _slot(self, rows: slice, kinematics: bool = True) -> _Slot:
        """The device state of the envs ``rows`` drawn with or without the kinematics pass, made on first use
        (one per range the caller draws)."""
        key = (rows.start, rows.stop, kinematics)
        slot = self._slots.get(key)
        if slot is None:
            if self._view_model is not None:  # a free view in the first camera's place: the free camera's field of view
                if any(self._views):
                    self._render_model.cam_fovy[self.camera_id] = self._view_model.vis.global_.fovy
            with self._wp.ScopedDevice(self._wp_device):
                if self._model is None:
                    self._model = self._mjw.put_model(self._render_model)
                data = self._mjw.make_data(self._render_model, nworld=rows.stop - rows.start, **render_data_sizes())
            slot = self._slots[key] = self._make_slot(rows, self._model, data)
            slot.kinematics = kinematics
            slot.qpos = self._wp.to_torch(data.qpos)
            pinned = self.device.type == "cuda"
            slot.staging = torch.zeros((rows.stop - rows.start, self.model.nq), dtype=torch.float32, pin_memory=pinned)
        return slot

    def _make_slot(self, rows: slice, model: Any, data: Any) -> _Slot:
        """A render context over ``data``'s worlds (envs ``rows``) and their frames."""
        wp, mjw = self._wp, self._mjw
        n = rows.stop - rows.start
        with wp.ScopedDevice(self._wp_device):
            context = mjw.create_render_context(
                self._render_model,
                nworld=n,
                cam_res=(self.width, self.height),
                render_rgb=True,
                render_depth=False,
                use_textures=True,
                use_shadows=self.shadows,
                render_skybox=_has_skybox(self.model),
                cam_active=[self.camera_id],
            )
            first_pixel = int(context.rgb_adr.numpy()[0])
            return _Slot(rows, model, data, context, wp.from_torch(self._frames[rows]), first_pixel)

    # ------------------------------------------------------------------- helpers
    def _current_stream(self) -> torch.cuda.Stream | None:
        return torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None

    def _pending_events(self) -> list[Any]:
        """The events after the last upload and draw of every range (none on the CPU backend)."""
        events = [e for slot in self._slots.values() for e in (slot.uploaded, slot.drawn) if e is not None]
        return events + ([self._ready] if self._ready is not None else [])

    def _fetch(self, target: torch.device | None):
        self._live()
        if self._ready is not None:  # drawn on another stream: read after it, on the current one
            torch.cuda.current_stream(self.device).wait_event(self._ready)
        if target is None:
            return self._frames.cpu().numpy() if self.device.type == "cuda" else self._frames.numpy().copy()
        return self._frames.clone()


def _recorded(stream: torch.cuda.Stream) -> torch.cuda.Event:
    event = torch.cuda.Event()
    event.record(stream)
    return event


def _camera_id(model: mujoco.MjModel, camera: int | str) -> int:
    if isinstance(camera, str):
        cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam < 0:
            names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) or f"#{i}" for i in range(model.ncam)]
            raise ValueError(f"camera {camera!r} is not in the model; its cameras: {', '.join(names) or 'none'}")
        return cam
    if isinstance(camera, bool) or not isinstance(camera, (int, np.integer)):
        raise TypeError(f"camera must be a camera id or name, got {camera!r}")
    if camera == -1:
        raise ValueError(
            "MuJoCo Warp renders model cameras only; camera=-1 (the free camera) needs renderer='egl' "
            "or a camera added to the model"
        )
    if not 0 <= camera < model.ncam:
        raise ValueError(f"camera id {camera} is outside [0, {model.ncam})")
    return int(camera)


def _loadable_copy(model: mujoco.MjModel) -> mujoco.MjModel:
    """A copy MuJoCo Warp accepts: only positions are drawn, so the constraint solver is free to
    change (MuJoCo Warp has no PGS, gymnasium's humanoid uses it)."""
    render_model = copy.deepcopy(model)
    if render_model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
        render_model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    return render_model


def _has_skybox(model: mujoco.MjModel) -> bool:
    return bool(np.any(model.tex_type == mujoco.mjtTexture.mjTEXTURE_SKYBOX))
