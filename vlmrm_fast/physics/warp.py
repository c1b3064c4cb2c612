"""MuJoCo Warp physics: ``num_envs`` worlds of one model, their state on one device, stepped by one graph.

    sim = WarpSimulator(with_solver(model, "newton"), num_envs=4096, frame_skip=5,
                        outputs=["qpos", ("cfrc_ext", 6)], rne_post_constraint=True, device="cuda")
    sim.reset(seed=0, noise_scale=1e-2)
    sim.step(actions)             # (4096, nu): one host->device copy, one graph, one device->host copy
    sim.outputs["cfrc_ext"]       # (4096, 78) float64 numpy, as BatchSimulator's
    sim.torch_outputs["cfrc_ext"] # the same values on the device (a torch view, no copy)

The interface is :class:`vlmrm_fast.physics.simulator.SimulatorBase`'s, as :class:`vlmrm_fast.physics.batch.BatchSimulator`'s; the step the same recipe: write ctrl,
``frame_skip`` x ``mujoco_warp.step``, optionally ``mujoco_warp.rne_postconstraint``, then the
output fields of every world gathered into one packed float64 buffer on the device. On a GPU
those launches are captured into a CUDA graph on the first call and replayed by the later ones.
Resets run on the device too (``mujoco_warp.reset_data``, the new qpos/qvel rows, ``forward``),
their noise drawn on the host by every simulator's generators (:class:`vlmrm_fast.physics.simulator.ResetStates`):
the same seed gives the CPU simulator's reset states, rounded to float32.

Where it differs from the CPU simulator (docs/physics.md):

* float32 throughout; MuJoCo Warp's Newton and CG solvers only (no PGS: see
  :func:`vlmrm_fast.physics.solver.with_solver`);
* all worlds step at once: ``step(ctrl, rows)`` takes ``rows`` None or all envs, no part;
* ``qpos`` and ``qvel`` are read-only host copies of the state: set a state with ``reset(ids, qpos=, qvel=)``;
* ``last_warnings`` holds MuJoCo's warning bits for what MuJoCo Warp can tell: a bad state after
  a step (NaN, inf or above ``mjMAXVAL`` in qpos/qvel/qacc: ``mjWARN_BADQPOS``/``BADQVEL``/``BADQACC``;
  the world is then reset to the model's defaults, where ``mj_step`` resets it within the step and
  steps on), full contact buffers (``mjWARN_CONTACTFULL``) and full constraint rows (``mjWARN_CNSTRFULL``).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import mujoco
import numpy as np
import torch

from vlmrm_fast.physics import EnvBytes
from vlmrm_fast.physics.simulator import DEVICE_WORLDS, OutputSpec, SimulatorBase, parse_outputs
from vlmrm_fast.physics.solver import WARP_DEFAULT_SOLVER, WARP_SOLVERS, solver_name, with_solver
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.warp import import_warp, warp_stream_of

wp, mjw = import_warp()

from vlmrm_fast.physics.warp_kernels import (  # noqa: E402  (after Warp's quiet initialization)
    BAD_STATE_BITS,
    check_worlds,
    gather_columns,
    set_reset_state,
)

BATCH_WAY_OUT = 'physics="batch" (CPU MuJoCo) runs it'


class UnsupportedModelError(ValueError):
    """MuJoCo Warp cannot run this model (a plugin, a feature it lacks, the PGS solver)."""


@dataclasses.dataclass(frozen=True)
class _Column:
    """An output's columns of the packed buffer and where they come from."""

    name: str
    column: int
    count: int
    start: int
    field_size: int
    source: Any  # wp.array2d float32 (num_envs, field_size): the Data field, one row per world


class WarpSimulator(SimulatorBase):
    """``num_envs`` worlds of ``model`` on ``device``, stepped together by MuJoCo Warp.

    Args:
        model: the ``mujoco.MjModel``; its solver must be Newton or CG (PGS raises: give
            ``with_solver(model, "newton")``). Copied to the device; later edits are not seen.
        num_envs: number of worlds.
        frame_skip: ``mujoco_warp.step`` calls per ``step``.
        outputs: Data fields copied out after every step and reset, as BatchSimulator takes
            them (name, ``(name, start)`` or ``(name, start, count)`` of the flattened field):
            the same names, sizes and order of values as MuJoCo's mjData.
        rne_post_constraint: run ``mujoco_warp.rne_postconstraint`` after stepping (as gymnasium
            runs ``mj_rnePostConstraint``), so that ``cacc``, ``cfrc_int`` and ``cfrc_ext`` are current.
        device: "cuda", "cuda:N", "cpu" (Warp's CPU backend: slow, for testing) or None/"auto".
        host_outputs: copy the packed outputs to the host at every step and reset (``outputs``,
            ``qpos``, ``qvel`` ready to read); False: they stay on the device (``torch_outputs``)
            and are copied to the host when first read after a call.
        cuda_graph: replay each call's launches as one CUDA graph (GPU only).
        nconmax, njmax: MuJoCo Warp's contact and constraint capacity per world (None: its defaults).

    A renderer draws it from its worlds on the device (``warp_model``, ``warp_data``, ``warp_stream``).
    """

    offers: ClassVar[tuple[str, ...]] = (DEVICE_WORLDS,)

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        frame_skip: int = 1,
        outputs: Sequence[OutputSpec] = (),
        rne_post_constraint: bool = False,
        device: str | torch.device | None = None,
        *,
        host_outputs: bool = True,
        cuda_graph: bool = True,
        nconmax: int | None = None,
        njmax: int | None = None,
    ) -> None:
        self._closed = True  # until built
        super().__init__(model, num_envs, frame_skip)
        if isinstance(outputs, str):
            outputs = [outputs]
        self.rne_post_constraint = bool(rne_post_constraint)
        self.device = resolve_device(device)
        self.host_outputs = bool(host_outputs)
        self.cuda_graph = bool(cuda_graph) and self.device.type == "cuda"
        self._wp_device = wp.get_device(str(self.device))
        # Every call runs on this one stream (the device's Warp stream when built): ordered among themselves.
        self._stream = self._wp_device.stream if self._wp_device.is_cuda else None
        self._warp_model, self._data = self._load(model, nconmax, njmax)
        self._build_buffers(parse_outputs(outputs))
        self._graphs: dict[str, Any] = {}
        self._closed = False
        self._host_current = False
        self.reset()

    # ---------------------------------------------------------------- building
    def _load(self, model: mujoco.MjModel, nconmax: int | None, njmax: int | None) -> tuple[Any, Any]:
        """The model and data on the device; a model MuJoCo Warp cannot run raises UnsupportedModelError."""
        if solver_name(model) not in WARP_SOLVERS:
            raise UnsupportedModelError(
                f"MuJoCo Warp has no {solver_name(model).upper()} solver (this model's); physics='warp' runs "
                f'vlmrm_fast.physics.solver.with_solver(model, "{WARP_DEFAULT_SOLVER}"), or {BATCH_WAY_OUT} with its own solver'
            )
        with wp.ScopedDevice(self._wp_device):
            try:
                warp_model = mjw.put_model(model)
            except (NotImplementedError, ValueError) as exc:
                raise UnsupportedModelError(
                    f"MuJoCo Warp cannot run this model ({str(exc).strip() or type(exc).__name__}); {BATCH_WAY_OUT}"
                ) from None
            warp_model.opt.warn_overflow = 0  # overflows become SimulationWarnings, not device printf
            data = mjw.make_data(model, nworld=self._num_envs, nconmax=nconmax, njmax=njmax)
        return warp_model, data

    def _build_buffers(self, requests: list[tuple[str, int, int]]) -> None:
        """The packed buffers: one float64 allocation per side, [warning bits (N) | rows (N, width)]
        where a row is the outputs' columns in order, then qpos and qvel."""
        n = self._num_envs
        reference = mujoco.MjData(self.model)
        columns: list[_Column] = []
        width = 0
        names = [name for name, _, _ in requests]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"output {name!r} is requested twice")
        for name, start, count in [*requests, ("qpos", 0, -1), ("qvel", 0, -1)]:
            source, size = self._field_rows(name, reference)
            count = size - start if count < 0 else count
            if start < 0 or count < 0 or start + count > size:
                raise ValueError(
                    f"output {name!r} slice [{start}, {start + count}) is outside the field's {size} values"
                )
            columns.append(_Column(name, width, count, start, size, source))
            width += count
        self._columns = columns[:-2]
        self._state_columns = {c.name: c for c in columns[-2:]}
        self._width = width
        pinned = self.device.type == "cuda"
        self._device_packed = torch.zeros(n + n * width, dtype=torch.float64, device=self.device)
        self._host_packed = torch.zeros(n + n * width, dtype=torch.float64, pin_memory=pinned)
        self._wp_device_packed = wp.from_torch(self._device_packed)
        self._wp_host_packed = wp.from_torch(self._host_packed)
        self._wp_rows = wp.from_torch(self._device_packed[n:].view(n, width))
        self._wp_warning_bits = wp.from_torch(self._device_packed[:n])
        host_rows = self._host_packed[n:].view(n, width).numpy()
        host_rows.flags.writeable = False
        self._host_bits = self._host_packed[:n].numpy()
        self._host_rows = host_rows
        device_rows = self._device_packed[n:].view(n, width)
        self._torch_outputs = {c.name: device_rows[:, c.column : c.column + c.count] for c in self._columns}
        self._outputs = {c.name: host_rows[:, c.column : c.column + c.count] for c in self._columns}
        self._state_views = {
            name: host_rows[:, c.column : c.column + c.count] for name, c in self._state_columns.items()
        }
        with wp.ScopedDevice(self._wp_device):
            self._all_worlds = wp.full(n, True, dtype=wp.bool)
            self._reset_worlds = wp.zeros(n, dtype=wp.bool)
            self._reset_rows = wp.zeros((n, self.model.nq + self.model.nv), dtype=wp.float32)
        nu = self.model.nu
        self._host_ctrl = torch.zeros((n, nu), dtype=torch.float32, pin_memory=pinned)
        self._host_reset_worlds = torch.zeros(n, dtype=torch.bool, pin_memory=pinned)
        self._host_reset_rows = torch.zeros((n, self.model.nq + self.model.nv), dtype=torch.float32, pin_memory=pinned)
        self._wp_host_ctrl = wp.from_torch(self._host_ctrl)
        self._wp_host_reset_worlds = wp.from_torch(self._host_reset_worlds, dtype=wp.bool)
        self._wp_host_reset_rows = wp.from_torch(self._host_reset_rows)
        self._last_warnings = np.zeros(n, dtype=np.int32)
        if pinned:  # torch filled its tensors on its own stream: done before Warp's stream writes them
            torch.cuda.synchronize(self.device)

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: Sequence[OutputSpec], device: torch.device
    ) -> WarpSimulator:
        """The simulator env's simulator (its row of ``vlmrm_fast.physics.PHYSICS``): every world on ``device`` (the
        CPU: Warp's CPU backend, said in one line), gymnasium's step with ``rne_postconstraint``."""
        if device.type == "cpu":
            warnings.warn(
                "physics='warp' on the CPU runs MuJoCo Warp's CPU backend: correct but slow, for testing; on a GPU "
                "it runs on CUDA (physics='batch' is the fast choice on a CPU)",
                CPUBackendWarning,
                stacklevel=2,
            )
        return cls(model, num_envs, frame_skip, outputs, rne_post_constraint=True, device=device)

    def _field_rows(self, name: str, reference: mujoco.MjData) -> tuple[Any, int]:
        """Data field ``name`` as float32 rows (num_envs, size) on the device, and its size per world;
        refuses a field that is not MuJoCo's float field of the same size."""
        mj_field = getattr(reference, name, None)
        if not isinstance(mj_field, np.ndarray) or mj_field.dtype != np.float64 or name.startswith("_"):
            raise ValueError(f"output {name!r} is not an mjData field of type mjtNum")
        size = int(mj_field.size)
        field = getattr(self._data, name, None)
        if not isinstance(field, wp.array) or field.ndim < 1 or field.shape[0] != self._num_envs:
            raise ValueError(f"output {name!r}: MuJoCo Warp keeps no per-world {name!r}; {BATCH_WAY_OUT}")
        scalar = getattr(field.dtype, "_wp_scalar_type_", field.dtype)
        per_world = field.size // self._num_envs * wp.types.type_size(field.dtype)
        if scalar is not wp.float32 or per_world != size or not field.is_contiguous:
            raise ValueError(
                f"output {name!r}: MuJoCo Warp's field ({per_world} {wp.types.type_repr(scalar)} per world) is not "
                f"mjData's ({size} float values); {BATCH_WAY_OUT}"
            )
        rows = wp.array(ptr=field.ptr, dtype=wp.float32, shape=(self._num_envs, size), device=field.device)
        return rows, size

    # ------------------------------------------------------------------- views
    @property
    def qpos(self) -> np.ndarray:
        """Read-only (num_envs, nq) host copy of the positions (float32 values); set them with ``reset``."""
        return self._host("qpos")

    @property
    def qvel(self) -> np.ndarray:
        """Read-only (num_envs, nv) host copy of the velocities (float32 values); set them with ``reset``."""
        return self._host("qvel")

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """Read-only (num_envs, count) float64 host view per output name, refreshed by each call."""
        self._host(None)
        return self._outputs

    @property
    def output_array(self) -> np.ndarray:
        """Read-only (num_envs, width) host view: every output's columns in order, then qpos and qvel."""
        self._host(None)
        return self._host_rows

    @property
    def torch_outputs(self) -> dict[str, torch.Tensor]:
        """(num_envs, count) float64 torch view per output name, on the device: current after each
        call, no copy (the tensors are this simulator's: clone what must outlive the next call)."""
        self._live()
        return self._torch_outputs

    @property
    def last_warnings(self) -> np.ndarray:
        """(num_envs,) int32: bit w set where warning w (mjtWarning) was raised in the last call."""
        self._live()
        return self._last_warnings

    @property
    def warp_model(self) -> Any:
        """The ``mujoco_warp.Model`` on the device (read by a renderer drawing these worlds)."""
        self._live()
        return self._warp_model

    @property
    def warp_data(self) -> Any:
        """The ``mujoco_warp.Data`` of all worlds (one world per env), current after each call: the
        state (``qpos``, ``qvel``, ...) as the call left it; derived fields (``xpos``, ``geom_xpos``,
        ...) as of the last substep's start, before its integration. A renderer drawing these worlds
        runs kinematics on it first; that rewrites derived fields only, which the next step recomputes,
        but it must not overlap a step: launch it on :attr:`warp_stream`."""
        self._live()
        return self._data

    @property
    def warp_stream(self) -> Any:
        """The ``warp.Stream`` every call of this simulator runs on (None on Warp's CPU backend): work
        that reads or writes :attr:`warp_data` on it is ordered with the steps and resets."""
        self._live()
        return self._stream

    # ------------------------------------------------------------------ properties
    @property
    def output_slots(self) -> list[tuple[str, int, int, int, int]]:
        """(name, column, count, start, field_size) of each output."""
        return [(c.name, c.column, c.count, c.start, c.field_size) for c in self._columns]

    @property
    def closed(self) -> bool:
        return self._closed

    def env_range(self, rows: slice | None) -> tuple[int, int]:
        """(0, num_envs): MuJoCo Warp steps every world at once, so ``rows`` must be None or all envs."""
        if rows is not None:
            start, stop, stride = rows.indices(self._num_envs)
            if (start, stop, stride) != (0, self._num_envs, 1):
                raise ValueError(
                    f"MuJoCo Warp physics steps all {self._num_envs} worlds at once: rows must be None or "
                    f"slice(0, {self._num_envs}), got {rows!r}; advance the envs as one range"
                )
        return 0, self._num_envs

    # --------------------------------------------------------------------- calls
    def step(self, ctrl: np.ndarray, rows: slice | None = None) -> None:
        """Apply controls (num_envs, nu) and advance every world by ``frame_skip`` steps.

        Raises ValueError for ``rows`` other than all envs, a wrong shape or non-finite controls
        (no world is stepped). Warns with SimulationWarning when a world raised warnings; a world
        whose state went bad (NaN, inf, above mjMAXVAL) is reset to the model's defaults, as
        ``mj_step`` resets it.
        """
        self._live()
        self.env_range(rows)
        nu = self.model.nu
        ctrl = np.asarray(ctrl)
        if ctrl.ndim != 2 or ctrl.shape != (self._num_envs, nu):
            raise ValueError(f"ctrl must have shape ({self._num_envs}, {nu}), got {ctrl.shape}")
        if not np.isfinite(ctrl).all():
            raise ValueError("ctrl has non-finite values (NaN or inf); no simulation was stepped")
        np.copyto(self._host_ctrl.numpy(), ctrl, casting="unsafe")
        with self._on_stream():
            if nu:
                wp.copy(self._data.ctrl, self._wp_host_ctrl)
            self._run("step", self._step_launches)
            self._fetch(self.host_outputs)
        bits = self._host_bits.astype(np.int32)
        broken = np.flatnonzero(bits & BAD_STATE_BITS)
        if broken.size:  # as mj_step: the world's data reset to the model's defaults
            qpos0 = np.tile(self.model.qpos0, (broken.size, 1))
            self._reset_on_device(broken, qpos0, np.zeros((broken.size, self.model.nv)))
            bits[broken] |= self._host_bits[broken].astype(np.int32)
        self._last_warnings[:] = bits
        self._warn("step")

    def _reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """On the device: ``mujoco_warp.reset_data`` of worlds ``ids``, their qpos/qvel rows (rounded to
        float32), ``forward`` and their outputs. The other worlds keep their state and outputs
        (``forward`` recomputes their derived fields from the same state)."""
        self._reset_on_device(ids, qpos, qvel)
        self._last_warnings[:] = 0
        # As mj_forward after mj_resetData, a reset checks no state (the next step does).
        self._last_warnings[ids] = self._host_bits[ids].astype(np.int32) & ~BAD_STATE_BITS

    def close(self) -> None:
        """Drops the device state (idempotent); host views still referenced keep their memory."""
        if self._closed:
            return
        if self.device.type == "cuda":
            wp.synchronize_device(self._wp_device)
        self._graphs.clear()
        self._warp_model = self._data = None
        self._columns, self._state_columns, self._torch_outputs = [], {}, {}
        self._wp_device_packed = self._wp_rows = self._wp_warning_bits = None
        self._device_packed = self._device_packed.new_empty(0)
        self._all_worlds = self._reset_worlds = self._reset_rows = None
        self._closed = True

    def __del__(self) -> None:
        if hasattr(self, "_closed"):
            self.close()

    # ------------------------------------------------------------------- helpers
    def _reset_on_device(self, ids: np.ndarray, qpos_rows: np.ndarray, qvel_rows: np.ndarray) -> None:
        worlds = self._host_reset_worlds.numpy()
        worlds[:] = False
        worlds[ids] = True
        rows = self._host_reset_rows.numpy()
        nq = self.model.nq
        rows[ids, :nq] = qpos_rows
        rows[ids, nq:] = qvel_rows
        with self._on_stream():
            wp.copy(self._reset_worlds, self._wp_host_reset_worlds)
            wp.copy(self._reset_rows, self._wp_host_reset_rows)
            self._run("reset", self._reset_launches)
            self._fetch(self.host_outputs)

    def _step_launches(self) -> None:
        m, d = self._warp_model, self._data
        for _ in range(self._frame_skip):
            mjw.step(m, d)
        if self.rne_post_constraint:
            mjw.rne_postconstraint(m, d)
        self._gather(self._all_worlds)

    def _reset_launches(self) -> None:
        m, d, worlds = self._warp_model, self._data, self._reset_worlds
        mjw.reset_data(m, d, reset=worlds)
        wp.launch(
            set_reset_state,
            dim=self._num_envs,
            inputs=[worlds, self._reset_rows],
            outputs=[d.qpos, d.qvel, d.cacc, d.cfrc_int, d.cfrc_ext],
        )
        mjw.forward(m, d)
        self._gather(worlds)

    def _gather(self, worlds: Any) -> None:
        """The output and state columns of ``worlds`` into the packed rows, and their warning bits."""
        for c in [*self._columns, *self._state_columns.values()]:
            if c.count:
                wp.launch(
                    gather_columns,
                    dim=(self._num_envs, c.count),
                    inputs=[c.source, c.start, c.column, worlds],
                    outputs=[self._wp_rows],
                )
        d = self._data
        wp.launch(
            check_worlds,
            dim=self._num_envs,
            inputs=[d.qpos, d.qvel, d.qacc, d.overflow, worlds],
            outputs=[self._wp_warning_bits],
        )

    def _run(self, name: str, launches: Callable[[], None]) -> None:
        """``launches`` on the device: eagerly on the first call (loading Warp's modules), then, on a
        GPU, captured once into a graph that every later call replays."""
        graph = self._graphs.get(name)
        if graph is not None:
            wp.capture_launch(graph)
            return
        launches()
        if self.cuda_graph:
            with wp.ScopedCapture(device=self._wp_device, stream=self._stream) as capture:
                launches()
            self._graphs[name] = capture.graph

    def _fetch(self, everything: bool) -> None:
        """The warning bits (and, when ``everything``, the packed rows) to the host; waits for the device."""
        count = self._host_packed.numel() if everything else self._num_envs
        wp.copy(self._wp_host_packed, self._wp_device_packed, count=count)
        if self._wp_device.is_cuda:
            wp.synchronize_stream(self._stream)
        self._host_current = everything

    def _host(self, name: str | None) -> Any:
        self._live()
        if not self._host_current:
            with self._on_stream():
                self._fetch(True)
        return self._state_views[name] if name is not None else None

    def _on_stream(self) -> Any:
        """Warp's current device (and, on a GPU, stream) for this simulator's launches and copies.

        On a GPU the stream first waits for torch's current stream: work queued there before this
        call (a learner reading ``torch_outputs``) is done before the call rewrites them. Nothing
        else is waited for: controls and reset rows come from the host, and what others read of this
        simulator is complete when a call returns."""
        if self._stream is None:
            return wp.ScopedDevice(self._wp_device)
        self._stream.wait_stream(warp_stream_of(torch.cuda.current_stream(self.device)))
        return wp.ScopedStream(self._stream, sync_enter=False)


def model_problem(model: mujoco.MjModel) -> str | None:
    """What of ``model`` MuJoCo Warp cannot run (its own words, naming the feature), or None. A constraint
    solver it lacks is not one: ``physics="warp"`` runs the model with Newton (:mod:`.solver`)."""
    if solver_name(model) not in WARP_SOLVERS:
        model = with_solver(model, WARP_DEFAULT_SOLVER)
    try:
        with wp.ScopedDevice("cpu"):
            mjw.put_model(model)
    except (NotImplementedError, ValueError) as exc:
        return str(exc).strip() or type(exc).__name__
    return None


@functools.lru_cache(maxsize=64)
def task_model_problem(task: Any) -> str | None:
    """Why MuJoCo Warp cannot run ``task``'s model (a ``TaskSpec`` with a vector task), in one line, or None."""
    problem = model_problem(task.vector_task.build_model(64))
    if problem is None:
        return None
    return f"MuJoCo Warp cannot run task {task.name!r}'s model: {problem} (a feature MuJoCo Warp lacks)"


class CPUBackendWarning(UserWarning):
    """MuJoCo Warp physics runs on Warp's CPU backend: correct, for testing, far slower than CPU MuJoCo."""


def world_and_frame_bytes(model: mujoco.MjModel, frame_shape: tuple[int, int], device: torch.device) -> EnvBytes:
    """One env of the ``warp`` row (its ``bytes_per_env``): MuJoCo Warp's data of one world and its RGB frame,
    both on ``device``, where the simulations run and are drawn."""
    height, width = frame_shape
    what = f"MuJoCo Warp's data of one world and its {height}x{width} RGB frame"
    return EnvBytes(world_bytes(model) + 3 * height * width, what, device)


def world_bytes(model: mujoco.MjModel) -> int:
    """The bytes of MuJoCo Warp's data of one world of ``model`` (its default contact and constraint capacity):
    two worlds' arrays less one's, made on Warp's CPU device (the sizes are the same on a GPU)."""

    def arrays(data: Any) -> int:
        total = 0
        for value in vars(data).values():
            if isinstance(value, wp.array):
                total += value.capacity
            elif hasattr(value, "__dict__") and not isinstance(value, type):
                total += sum(v.capacity for v in vars(value).values() if isinstance(v, wp.array))
        return total

    with wp.ScopedDevice("cpu"):
        return arrays(mjw.make_data(model, nworld=2)) - arrays(mjw.make_data(model, nworld=1))
