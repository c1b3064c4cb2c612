"""A test double of a physics backend whose state lives on a device: all that such a backend is, one module and
one row.

:class:`DeviceKinematicSimulator` moves its envs by the kinematic scheme of ``double_physics.py`` (over a step of
``dt`` each actuated joint turns or slides at its control, nothing else moves), with its state, ``qpos`` and
``qvel``, kept as torch tensors on the stack's device and stepped there; only what the host asks for (its outputs
and positions) is copied out, and each copy is counted (:attr:`host_reads`). It computes the outputs ``qpos`` and
``qvel`` alone, so it runs the tasks that read no other field (``HalfCheetah-v5``, ``Hopper-v5``, ...), and only
models whose actuators drive hinges and slides, whose positions advance by their velocity.

:data:`ROW` is its row of ``vlmrm_fast.physics.PHYSICS``: it declares the memory one env needs on the device
(:func:`bytes_per_env`), its dynamics (those of ``double_physics.py``'s row, so that a run may move between the
two) and its device observations (``torch_outputs``); a test registers it and the plan, the simulator env, a
renderer of host positions and the training config's run identity take it from there.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np
import torch

from vlmrm_fast.physics import EnvBytes, Physics
from vlmrm_fast.physics.simulator import HOST_POSITIONS, OutputSpec, SimulatorBase, parse_outputs

NAME = "device-kinematic"
#: The outputs it computes: its state itself.
FIELDS = ("qpos", "qvel")


class DeviceKinematicSimulator(SimulatorBase):
    """``num_envs`` copies of ``model`` moved by the kinematic scheme of the module docstring, on ``device``."""

    offers = (HOST_POSITIONS,)

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        frame_skip: int = 1,
        outputs: Sequence[OutputSpec] = (),
        device: torch.device | str = "cpu",
    ):
        super().__init__(model, num_envs, frame_skip)
        joints = model.actuator_trnid[:, 0]
        kinds = {int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)}
        if (model.actuator_trntype != int(mujoco.mjtTrn.mjTRN_JOINT)).any() or not all(
            int(model.jnt_type[j]) in kinds for j in joints
        ):
            raise ValueError("the device double moves models whose actuators drive hinges and slides only")
        self.device = torch.device(device)
        self._closed = False
        self._qpos = torch.zeros((self.num_envs, model.nq), dtype=torch.float64, device=self.device)
        self._qvel = torch.zeros((self.num_envs, model.nv), dtype=torch.float64, device=self.device)
        self._position_of = torch.as_tensor(model.jnt_qposadr[joints], device=self.device)  # each actuator's joint
        self._velocity_of = torch.as_tensor(model.jnt_dofadr[joints], device=self.device)
        state = {"qpos": self._qpos, "qvel": self._qvel}
        self._torch_outputs = {}
        for name, start, count in parse_outputs(outputs):
            if name not in FIELDS:
                raise ValueError(f"output {name!r}: the device double computes {' and '.join(FIELDS)} only")
            self._torch_outputs[name] = state[name][:, start:] if count < 0 else state[name][:, start : start + count]
        self._last_warnings = np.zeros(self.num_envs, dtype=np.int32)
        self.host_reads = 0  # copies of its state to the host
        self.reset()

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: Sequence[OutputSpec], device: torch.device
    ) -> DeviceKinematicSimulator:
        return cls(model, num_envs, frame_skip, outputs, device)

    @property
    def torch_outputs(self) -> dict[str, torch.Tensor]:
        """The outputs where they lie: views of its state on its device."""
        self._live()
        return self._torch_outputs

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        self._live()
        self.host_reads += 1
        return {name: value.cpu().numpy().copy() for name, value in self._torch_outputs.items()}

    @property
    def qpos(self) -> np.ndarray:
        self._live()
        self.host_reads += 1
        return self._qpos.cpu().numpy().copy()

    @property
    def qvel(self) -> np.ndarray:
        self._live()
        self.host_reads += 1
        return self._qvel.cpu().numpy().copy()

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
        envs = slice(start, start + count)
        velocity = torch.as_tensor(ctrl[envs], device=self.device)
        self._qvel[envs] = 0.0
        self._qvel[envs, self._velocity_of] = velocity
        self._qpos[envs, self._position_of] += velocity * self.dt  # (mj_integratePos of a hinge or a slide)
        self._last_warnings[envs] = 0

    def _reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        rows = torch.as_tensor(ids, device=self.device)
        self._qpos[rows] = torch.as_tensor(qpos, device=self.device)
        self._qvel[rows] = torch.as_tensor(qvel, device=self.device)
        self._last_warnings[ids] = 0

    def close(self) -> None:
        self._closed = True


def bytes_per_env(model: mujoco.MjModel, frame_shape: tuple[int, int], device: torch.device) -> EnvBytes:
    """One env's memory on ``device``: its qpos and qvel, float64 (the frames are the renderer's, on the host)."""
    return EnvBytes(8 * (model.nq + model.nv), "the device double's qpos and qvel", device)


ROW = Physics(
    NAME,
    "a test double: the kinematic double's scheme with its state on the device (python_tests/double_device_physics.py)",
    "a MuJoCo task that reads qpos and qvel alone",
    unavailable=lambda task, device: None if task.vector_task is not None else f"task {task.name!r} is no MuJoCo task",
    simulator="double_device_physics:DeviceKinematicSimulator",
    bytes_per_env="double_device_physics:bytes_per_env",
    dynamics="kinematic",
    device_observations=True,
)
