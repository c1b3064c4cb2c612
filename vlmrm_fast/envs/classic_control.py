"""CartPole and MountainCarContinuous as Rocamonde et al. (2024) ran them (Appendix C.1).

The stock environments end an episode when the pole falls or the car reaches the
flag. With a VLM reward that is positive on every step, that termination leaks
the task: surviving longer pays in CartPole whatever the prompt says, and ending
early costs in MountainCar, so the agent learns to avoid the flag. The paper
removes the terminations; episodes end only at their fixed length (a time limit
that the tasks add, ``episode_length``), and ``info["success"]`` reports on every
step whether the task is done.

The dynamics and pictures are gymnasium's (each step calls the stock ``step``);
what changes:

* :class:`PaperCartPoleEnv`: the pole may fall and swing on; its angle wraps to
  [-pi, pi) and the cart stops at the track's ends (position clipped to +-2.4,
  velocity kept), as in the paper's code. Success: the pole within 12 degrees of
  upright and the cart within +-2.4, the states in which CartPole-v1 would not
  have ended.
* :class:`PaperMountainCarContinuousEnv`: success is sticky from the first step
  at the flag (position >= 0.45 at non-negative velocity, the stock goal), and
  from then on the car is held at the flag: its position is capped at 0.45, as in
  the paper's code (its velocity is kept, so a car that stops pushing rolls back
  down while ``success`` stays true). ``absorbing=True`` stops the car at the flag
  instead, the absorbing goal state the paper's text describes.

The environment reward (the ground truth, ``info["gt_reward"]`` in the VecEnv)
is the stock env's up to and including the step that would have ended its
episode, and 0 after: an episode's ground-truth return is the return the stock
env pays for the same actions.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.continuous_mountain_car import Continuous_MountainCarEnv

# The paper's fixed episode length for its classic-control runs (Appendix C.1, "DQN hyperparameters").
PAPER_EPISODE_LENGTH = 200


def wrap_angle(theta):
    """An angle in [-pi, pi)."""
    return (theta + np.pi) % (2 * np.pi) - np.pi


class PaperCartPoleEnv(CartPoleEnv):
    """CartPole-v1 without early termination; ``info["success"]`` on every step (see the module)."""

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        high = np.array([self.x_threshold * 2, np.inf, np.pi, np.inf], dtype=np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.failed = False  # the pole has fallen (or the cart hit an end) in this episode

    def is_success(self, state) -> bool:
        """Pole within 12 degrees of upright (gymnasium's failure angle) and cart within +-2.4."""
        x, _, theta, _ = state
        return bool(abs(x) <= self.x_threshold and abs(wrap_angle(theta)) <= self.theta_threshold_radians)

    def step(self, action):
        self.steps_beyond_terminated = None  # the stock "stepped after the end" bookkeeping does not apply
        super().step(action)
        success = self.is_success(self.state)  # before clipping: a cart pushed past an end fails this step
        reward = 0.0 if self.failed else 1.0  # CartPole-v1 pays the step on which the pole falls too
        self.failed = self.failed or not success
        x, x_dot, theta, theta_dot = self.state
        x = float(np.clip(x, -self.x_threshold, self.x_threshold))
        self.state = np.array((x, x_dot, wrap_angle(theta), theta_dot), dtype=np.float64)
        return np.array(self.state, dtype=np.float32), reward, False, False, {"success": success}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.failed = False
        return super().reset(seed=seed, options=options)


class PaperMountainCarContinuousEnv(Continuous_MountainCarEnv):
    """MountainCarContinuous-v0 without early termination; sticky ``info["success"]`` (see the module)."""

    def __init__(self, render_mode: str | None = None, goal_velocity: float = 0.0, absorbing: bool = False):
        super().__init__(render_mode=render_mode, goal_velocity=goal_velocity)
        self.absorbing = bool(absorbing)
        self.success = False

    def step(self, action):
        if self.success and self.absorbing:
            return np.array(self.state, dtype=np.float32), 0.0, False, False, {"success": True}
        _, reward, reached, _, _ = super().step(action)
        reward = 0.0 if self.success else float(reward)  # nothing is paid after the goal
        self.success = self.success or reached
        if self.success:
            position, velocity = self.state
            position = min(position, self.goal_position)
            if self.absorbing:
                position, velocity = self.goal_position, 0.0
            self.state = np.array([position, velocity], dtype=np.float32)
        return np.array(self.state, dtype=np.float32), reward, False, False, {"success": self.success}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.success = False
        return super().reset(seed=seed, options=options)
