"""A test double of a physics backend: all that a new physics backend is, one module and one row.

:class:`KinematicSimulator` is a simulator of the simulator env's shape (``vlmrm_fast.physics.simulator``) whose
"physics" is a plain, deterministic scheme: over a step of ``dt`` each actuated joint turns (or slides)
at its control, in units per second, and nothing else moves; MuJoCo computes the rest of the state
(the bodies' poses, the outputs the task reads) from that, one ``mujoco.MjData`` per env. It offers a
renderer its positions on the host. :data:`ROW` is its row of ``vlmrm_fast.physics.PHYSICS``; a test
registers it (``monkeypatch.setitem(PHYSICS, ROW.name, ROW)``) and the plan, the simulator env and the
renderers take it from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import torch

from vlmrm_fast.physics import Physics
from vlmrm_fast.physics.simulator import HOST_POSITIONS, OutputSpec, SimulatorBase, parse_outputs


class KinematicSimulator(SimulatorBase):
    """``num_envs`` copies of ``model`` moved by the kinematic scheme of the module docstring."""

    offers = (HOST_POSITIONS,)

    def __init__(self, model: mujoco.MjModel, num_envs: int, frame_skip: int = 1, outputs: Sequence[OutputSpec] = ()):
        super().__init__(model, num_envs, frame_skip)
        self._closed = False
        self._data = [mujoco.MjData(model) for _ in range(self.num_envs)]
        self._requests = parse_outputs(outputs)
        self._outputs = {
            name: np.zeros((self.num_envs, self._field(self._data[0], name, start, count).size))
            for name, start, count in self._requests
        }
        self._last_warnings = np.zeros(self.num_envs, dtype=np.int32)
        self._joint_dofs = model.jnt_dofadr[model.actuator_trnid[:, 0]]  # the dof each actuator drives
        self.reset()

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: Sequence[OutputSpec], device: torch.device
    ) -> KinematicSimulator:
        return cls(model, num_envs, frame_skip, outputs)

    @property
    def qpos(self) -> np.ndarray:
        self._live()
        return np.stack([d.qpos for d in self._data])

    @property
    def qvel(self) -> np.ndarray:
        self._live()
        return np.stack([d.qvel for d in self._data])

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        self._live()
        return self._outputs

    @property
    def last_warnings(self) -> np.ndarray:
        return self._last_warnings

    @property
    def closed(self) -> bool:
        return self._closed

    def step(self, ctrl: np.ndarray, rows: slice | None = None) -> None:
        self._live()
        start, count = self.env_range(rows)
        ctrl = np.asarray(ctrl, dtype=np.float64)
        if ctrl.shape != (self.num_envs, self.model.nu) or not np.isfinite(ctrl).all():
            raise ValueError(f"ctrl must be finite, of shape ({self.num_envs}, {self.model.nu}), got {ctrl.shape}")
        for env in range(start, start + count):
            data = self._data[env]
            data.qvel[:] = 0.0
            data.qvel[self._joint_dofs] = ctrl[env]
            mujoco.mj_integratePos(self.model, data.qpos, data.qvel, self.dt)
            data.ctrl[:] = ctrl[env]
            self._compute(env)
        self._last_warnings[start : start + count] = 0

    def _reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        for row, env in enumerate(ids):
            data = self._data[env]
            mujoco.mj_resetData(self.model, data)
            data.qpos[:], data.qvel[:] = qpos[row], qvel[row]
            self._compute(int(env))
        self._last_warnings[ids] = 0

    def close(self) -> None:
        self._closed = True

    def _compute(self, env: int) -> None:
        """Env ``env``'s derived quantities from its state, as after a MuJoCo step, and its outputs."""
        data = self._data[env]
        mujoco.mj_forward(self.model, data)
        mujoco.mj_rnePostConstraint(self.model, data)
        for name, start, count in self._requests:
            self._outputs[name][env] = self._field(data, name, start, count)

    @staticmethod
    def _field(data: mujoco.MjData, name: str, start: int, count: int) -> Any:
        values = np.asarray(getattr(data, name), dtype=np.float64).reshape(-1)
        return values[start:] if count < 0 else values[start : start + count]


ROW = Physics(
    "kinematic",
    "a test double: each actuated joint moves at its control, MuJoCo computes the rest (python_tests/double_physics.py)",
    "a MuJoCo task",
    unavailable=lambda task, device: (
        None if task.vector_task is not None else f"task {task.name!r} has no simulator-env version"
    ),
    simulator="double_physics:KinematicSimulator",
    dynamics="kinematic",
)
