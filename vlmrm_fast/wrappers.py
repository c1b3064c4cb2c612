"""VLM rewards for any Stable-Baselines3 VecEnv whose environments render.

The frame a step's reward is computed on must show the state that step reached.
SB3's vector envs reset finished environments inside ``step_wait``, so a frame
taken afterwards (``get_images()``) would show the reset state for exactly the
steps that end episodes (the paper's code scores that reset frame). Wrapping
each env in :class:`RecordFrame` puts the frame of the reached state in the
step's ``info``, which the vector env returns for finished environments too.

Follows imitation's ``RewardVecEnvWrapper`` conventions: the environment's own
reward is kept in ``info["gt_reward"]``.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from vlmrm_fast.frames import HostFrames

FRAME_KEY = "vlmrm_frame"


class RecordFrame(gymnasium.Wrapper):
    """Adds ``info["vlmrm_frame"]``, the rendered frame of the state each step reached."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ValueError(f"RecordFrame needs an env made with render_mode='rgb_array', got {env.render_mode!r}")

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info[FRAME_KEY] = self.env.render()
        return obs, reward, terminated, truncated, info


def pop_frames(infos: list[dict[str, Any]]) -> list[np.ndarray]:
    """Takes the recorded frames out of the step infos (so replay buffers don't keep them)."""
    try:
        return [info.pop(FRAME_KEY) for info in infos]
    except KeyError:
        raise RuntimeError(
            "the step infos carry no frames: wrap each env in vlmrm_fast.RecordFrame "
            "(e.g. DummyVecEnv([lambda: RecordFrame(gym.make(id, render_mode='rgb_array'))]))"
        ) from None


class VLMRewardVecEnvWrapper(VecEnvWrapper):
    """Replaces a VecEnv's reward by a VLM reward model's; the env reward goes to ``info["gt_reward"]``.

    The wrapped envs must be :class:`RecordFrame`-wrapped (see the module docstring).
    ``reward_model`` is a :class:`~vlmrm_fast.VLMRewardModel` with one task.
    """

    def __init__(self, venv: VecEnv, reward_model: Any):
        if getattr(reward_model, "multi_task", False):
            raise ValueError("VLMRewardVecEnvWrapper needs a single-task reward model (rewards (N,))")
        super().__init__(venv)
        self.reward_model = reward_model
        self._frames = HostFrames()

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, env_rewards, dones, infos = self.venv.step_wait()
        frames = self._frames.stack(pop_frames(infos))
        rewards = self.reward_model(frames).float().cpu().numpy()
        for info, gt in zip(infos, env_rewards):
            info["gt_reward"] = float(gt)
        return obs, rewards, dones, infos
