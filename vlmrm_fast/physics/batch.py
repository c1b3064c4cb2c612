"""Batched MuJoCo physics: N simulations of one model on MuJoCo's batch thread pool.

    sim = BatchSimulator(model, num_envs=64, frame_skip=5,
                         outputs=["qpos", ("cfrc_ext", 6)], rne_post_constraint=True)
    sim.reset(seed=0, noise_scale=1e-2)
    sim.step(actions)            # (64, nu); GIL released while stepping
    sim.outputs["cfrc_ext"]      # live (64, 78) view, refreshed by every step

A step is gymnasium's ``MujocoEnv.do_simulation`` on every simulation, bit for bit:
write ctrl, ``frame_skip`` x ``mj_step``, optionally ``mj_rnePostConstraint``, then copy
the output fields from the same ``mjData``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import mujoco
import numpy as np

import vlmrm_fast.runtime.native  # noqa: F401  (libmujoco, then the core)
from vlmrm_fast._core import sim as _native_sim
from vlmrm_fast.physics.simulator import HOST_POSITIONS, NATIVE_DATA, OutputSpec, SimulatorBase, parse_outputs

if TYPE_CHECKING:
    import torch

SimulationError = _native_sim.SimulationError


class BatchSimulator(SimulatorBase):
    """``num_envs`` simulations of a copy of ``model``, stepped together.

    Args:
        model: the ``mujoco.MjModel`` (copied; later edits to it are not seen).
        num_envs: number of simulations.
        frame_skip: ``mj_step`` calls per ``step``.
        outputs: mjData fields (float64) copied out after every step and reset, each a
            name (the whole field, flattened), ``(name, start)`` or ``(name, start, count)``
            (a slice of the flattened field), in the order of ``output_array``'s columns.
        rne_post_constraint: run ``mj_rnePostConstraint`` after stepping, as gymnasium does,
            so that ``cacc``, ``cfrc_int`` and ``cfrc_ext`` are current.
        nthread: threads including the caller's; 0: every CPU this process may use.
        persistent: one ``mjData`` per simulation, so fields a step does not compute keep
            that simulation's own values as in a gymnasium env; False: one per thread (less
            memory; such fields then hold another simulation's values).

    State views (``qpos``, ``qvel``, ``act``, ``ctrl``, ``time``) are live: writing one sets
    that state for the next call. ``outputs`` and ``output_array`` are read-only views
    refreshed by each call. Views stay valid while referenced, also after ``close``.
    A renderer draws it from its native data (``native``) or from ``qpos``.
    """

    offers: ClassVar[tuple[str, ...]] = (NATIVE_DATA, HOST_POSITIONS)

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        frame_skip: int = 1,
        outputs: Sequence[OutputSpec] = (),
        rne_post_constraint: bool = False,
        nthread: int = 0,
        persistent: bool = True,
    ) -> None:
        self._native: Any = None
        super().__init__(model, num_envs, frame_skip)
        if isinstance(outputs, str):
            outputs = [outputs]
        self._native = _native_sim.BatchSim(
            model._address,
            int(num_envs),
            int(frame_skip),
            parse_outputs(outputs),
            bool(rne_post_constraint),
            int(nthread),
            bool(persistent),
        )
        native = self._native
        output_array = native.outputs_view()
        output_array.flags.writeable = False
        last_warnings = native.last_warnings_view()
        last_warnings.flags.writeable = False
        self._views = {
            "qpos": native.state_view(int(mujoco.mjtState.mjSTATE_QPOS)),
            "qvel": native.state_view(int(mujoco.mjtState.mjSTATE_QVEL)),
            "act": native.state_view(int(mujoco.mjtState.mjSTATE_ACT)),
            "ctrl": native.state_view(int(mujoco.mjtState.mjSTATE_CTRL)),
            "time": native.state_view(int(mujoco.mjtState.mjSTATE_TIME))[:, 0],
            "output_array": output_array,
            "last_warnings": last_warnings,
        }
        self._outputs = {
            name: output_array[:, column : column + count] for name, column, count, _start, _size in native.output_slots
        }

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: Sequence[OutputSpec], device: torch.device
    ) -> BatchSimulator:
        """The simulator env's simulator (its row of ``vlmrm_fast.physics.PHYSICS``): gymnasium's step on every env,
        ``mj_rnePostConstraint`` included, on every CPU this process may use (``device`` plays no part)."""
        return cls(model, num_envs, frame_skip=frame_skip, outputs=outputs, rne_post_constraint=True)

    # ------------------------------------------------------------------- views
    @property
    def qpos(self) -> np.ndarray:
        """Live (num_envs, nq) view of the positions."""
        return self._view("qpos")

    @property
    def qvel(self) -> np.ndarray:
        """Live (num_envs, nv) view of the velocities."""
        return self._view("qvel")

    @property
    def act(self) -> np.ndarray:
        """Live (num_envs, na) view of the actuator activations."""
        return self._view("act")

    @property
    def ctrl(self) -> np.ndarray:
        """Live (num_envs, nu) view of the controls the last step applied."""
        return self._view("ctrl")

    @property
    def time(self) -> np.ndarray:
        """Live (num_envs,) view of the simulation times."""
        return self._view("time")

    @property
    def output_array(self) -> np.ndarray:
        """Read-only (num_envs, total) view: every output's columns, in the order given."""
        return self._view("output_array")

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """Read-only (num_envs, count) view per output name."""
        self._live()
        return self._outputs

    @property
    def last_warnings(self) -> np.ndarray:
        return self._view("last_warnings")

    @property
    def nthread(self) -> int:
        return self._live().nthread

    @property
    def output_slots(self) -> list[tuple[str, int, int, int, int]]:
        """(name, column, count, start, field_size) of each output."""
        return list(self._live().output_slots)

    @property
    def native(self):
        """The native simulator (``_core.sim.BatchSim``) a renderer draws from; raises once closed."""
        return self._live()

    # --------------------------------------------------------------------- calls
    def step(self, ctrl: np.ndarray, rows: slice | None = None) -> None:
        """Apply controls (num_envs, nu) and advance every simulation by ``frame_skip`` steps;
        with ``rows`` (a slice of env indices, step 1) only those, reading their rows of ``ctrl``.

        Raises ValueError for a wrong shape or non-finite controls (no simulation is
        stepped), SimulationError if MuJoCo raised in some simulations (those keep their
        state). Warns with SimulationWarning when MuJoCo raised warnings.
        """
        start, count = self.env_range(rows)
        self._live().step(ctrl, start, count)
        self._warn("step", start, count)

    def _reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        # mj_resetData, the rows, mj_forward and the outputs of each, on the thread pool
        self._live().reset(ids.astype(np.int32), qpos, qvel)

    def close(self) -> None:
        """Release the simulator; views still referenced keep their memory until dropped."""
        self._native = None
        self._views = {}
        self._outputs = {}

    @property
    def closed(self) -> bool:
        return self._native is None

    # ------------------------------------------------------------------- helpers
    def _view(self, name: str) -> np.ndarray:
        self._live()
        return self._views[name]

    def _live(self) -> Any:
        super()._live()
        return self._native
