"""What the batch env (:mod:`vlmrm_fast.stack.batch_env`) needs of a MuJoCo task: its model, observation,
camera, and its own reward with whatever per-env state that needs. A task offers it as
``TaskSpec.batch`` (e.g. :class:`~vlmrm_fast.envs.humanoid.HumanoidBatch`)."""

from __future__ import annotations

from typing import Protocol

import mujoco
import numpy as np

__all__ = ["BatchTask", "StepReward"]


class StepReward(Protocol):
    """A task's own reward for the batch env's envs, with whatever per-env state it needs."""

    def before_step(self, fields: dict[str, np.ndarray], rows: slice) -> None:
        """Envs ``rows`` are about to step; ``fields`` are the simulator's outputs of their current state."""

    def __call__(
        self, fields: dict[str, np.ndarray], ctrl: np.ndarray, dt: float
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(rewards (N,), per-env info arrays) of the step every env took with controls ``ctrl``."""
        ...


class BatchTask(Protocol):
    """What the batch env needs of a MuJoCo task (e.g. :class:`~vlmrm_fast.envs.humanoid.HumanoidBatch`)."""

    frame_skip: int
    reset_noise_scale: float
    outputs: tuple[str, ...]  # the mjData fields the simulator copies out after each step

    @property
    def camera(self) -> str: ...

    def build_model(self, render_size: int) -> mujoco.MjModel: ...

    def observation(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        """Every env's observation from the simulator's output fields: numpy in, numpy out; a task
        that also takes torch tensors (a simulator's fields on the device) gives a GPU-native learner
        its observations where they lie (``stack.batch_env.MujocoBatchVecEnv.device_observation``)."""
        ...

    def step_reward(self, model: mujoco.MjModel, num_envs: int) -> StepReward: ...
