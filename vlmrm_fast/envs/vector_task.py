"""What the simulator env (:mod:`vlmrm_fast.stack.simulator_env`) needs of a MuJoCo task: its model, observation,
camera, reset noise, terminations, and its own reward with whatever per-env state that needs. A task
offers it as ``TaskSpec.vector_task`` (e.g. :class:`~vlmrm_fast.envs.humanoid.HumanoidVectorTask`, or a row of
gymnasium's MuJoCo suite, :class:`~vlmrm_fast.envs.mujoco_suite.SuiteVectorTask`)."""

from __future__ import annotations

from typing import Protocol

import mujoco
import numpy as np

from vlmrm_fast.physics.simulator import ResetNoise

__all__ = ["VectorTask", "StepReward"]


class StepReward(Protocol):
    """A task's own reward for the simulator env's envs, with whatever per-env state it needs."""

    def before_step(self, fields: dict[str, np.ndarray], rows: slice) -> None:
        """Envs ``rows`` are about to step; ``fields`` are the simulator's outputs of their current state."""

    def __call__(
        self, fields: dict[str, np.ndarray], actions: np.ndarray, dt: float
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(rewards (N,) float64, per-env info arrays) of the step every env took with ``actions`` (N, nu), as
        the caller gave them (their dtype is theirs: gymnasium's envs compute with the action they are given)."""
        ...


class VectorTask(Protocol):
    """What the simulator env needs of a MuJoCo task (e.g. :class:`~vlmrm_fast.envs.humanoid.HumanoidVectorTask`)."""

    frame_skip: int
    reset_noise: ResetNoise  # how a reset perturbs the start state (the task's ``reset_model``)
    outputs: tuple[str | tuple[str, int] | tuple[str, int, int], ...]  # mjData fields copied out after each step

    @property
    def camera(self) -> str: ...

    def build_model(self, render_size: int) -> mujoco.MjModel: ...

    def observation(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        """Every env's observation from the simulator's output fields: numpy in, numpy out; a task
        that also takes torch tensors (a simulator's fields on the device) gives a GPU-native learner
        its observations where they lie (``stack.simulator_env.SimulatorVecEnv.device_observation``)."""
        ...

    def terminated(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        """(N,) bool: the envs whose episode the state of ``fields`` ends (the task's own termination,
        not the time limit)."""
        ...

    def step_reward(self, model: mujoco.MjModel, num_envs: int) -> StepReward: ...
