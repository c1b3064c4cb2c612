"""VLM rewards for any Stable-Baselines3 VecEnv whose environments render.

:class:`VLMRewardVecEnvWrapper` replaces a VecEnv's reward by a CLIP reward model's. Over
a VecEnv that steps and draws range by range (``frames.SteppedFrameSource``: the MuJoCo
batch engine) it scores each range while the next is simulated and drawn; over any other
VecEnv (gymnasium envs in SB3's DummyVecEnv or SubprocVecEnv) it steps, then scores the
recorded frames range by range (on a GPU, uploading one range while encoding the last).

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
import torch
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from vlmrm_fast.actions import check_actions
from vlmrm_fast.checks import number
from vlmrm_fast.frames import HostFrames, SteppedFrameSource
from vlmrm_fast.pipeline import ChunkedScorer, plan_chunks
from vlmrm_fast.profiling import NULL_TIMER, StageTimer
from vlmrm_fast.reward.protocol import RewardModel, check_reward_model

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

    ``reward_model``: a :class:`~vlmrm_fast.reward.protocol.RewardModel` (a loaded ``VLMRewardModel``). With several tasks the first is
    the reward and all are in ``info["vlm_rewards"]`` by name. ``pipeline_chunks``: the ranges
    of envs a step is scored in (see ``pipeline.plan_chunks``). ``defer_rewards``: return zero
    rewards and leave the frames to ``last_frames()`` (episode-batch scoring).
    ``env_reward_weight`` (rho): the reward is ``vlm + rho * env`` (FuRL's mix), the VLM part in
    ``info["vlm_reward"]``. The envs of a VecEnv that is not a stepped frame source must be
    :class:`RecordFrame`-wrapped.
    """

    def __init__(
        self,
        venv: VecEnv,
        reward_model: RewardModel,
        *,
        pipeline_chunks: int | str = "auto",
        defer_rewards: bool = False,
        env_reward_weight: float = 0.0,
    ):
        super().__init__(venv)
        self.reward_model = check_reward_model(reward_model)
        self.reward_tasks = task_names(reward_model)
        self.defer_rewards = bool(defer_rewards)
        self.env_reward_weight = number(env_reward_weight, "env_reward_weight")
        self.timer = NULL_TIMER
        self._scorer = ChunkedScorer(reward_model, plan_chunks(venv.num_envs, pipeline_chunks, reward_model.device))
        self._source: SteppedFrameSource | None = venv if isinstance(venv, SteppedFrameSource) else None
        self._frames = HostFrames()
        self._actions: np.ndarray | None = None
        self._stepped = False

    def reset(self):
        return self.venv.reset()

    def step_async(self, actions: np.ndarray) -> None:
        # The batch engine checks its actions itself; any other VecEnv gets them checked here.
        self._actions = (
            actions if self._source is not None else check_actions(actions, self.action_space, self.num_envs)
        )
        self.venv.step_async(self._actions)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        self._actions = None
        scorer, timer = self._scorer, self.timer
        scorer.begin()
        if self._source is not None:  # simulate and draw range k + 1 while the encoder runs range k
            for rows in scorer.chunks:
                self._source.advance(rows, scorer.render_stream)
                self._score(rows, self._source.lend(rows, scorer.render_stream))
            obs, env_rewards, dones, infos = self.venv.step_wait()  # observations, resets of finished envs
        else:
            with timer.stage("physics_render"):
                obs, env_rewards, dones, infos = self.venv.step_wait()
                self._frames.stack(pop_frames(infos))
            for rows in scorer.chunks:
                self._score(rows, self._frames.lend(rows))
        self._stepped = True
        for info, gt in zip(infos, env_rewards):
            info["gt_reward"] = float(gt)
        if self.defer_rewards:  # scored later (episode batches), mixed in there
            return obs, np.zeros(self.num_envs, dtype=np.float32), dones, infos
        return obs, self._rewards(scorer.finish(timer), env_rewards, infos), dones, infos

    def _score(self, rows: slice, lent) -> None:
        if not self.defer_rewards:
            with lent as frames:
                self._scorer.submit(frames, rows, self.timer)  # preprocess, encode, reward: not waited for

    def _rewards(self, scores: np.ndarray, env_rewards: np.ndarray, infos: list[dict]) -> np.ndarray:
        if scores.ndim == 2:  # several prompt sets: all in the info, the first is the reward
            for info, row in zip(infos, scores.tolist()):
                info["vlm_rewards"] = dict(zip(self.reward_tasks, row))
            scores = np.ascontiguousarray(scores[:, 0])
        if self.env_reward_weight:
            for info, vlm in zip(infos, scores.tolist()):
                info["vlm_reward"] = vlm
            scores = (scores + self.env_reward_weight * np.asarray(env_rewards)).astype(np.float32)
        return scores

    def profile(self, enabled: bool = True) -> StageTimer:
        """Starts timing each stage of ``step_wait`` (see :mod:`vlmrm_fast.profiling`)."""
        self.timer = StageTimer(enabled, self.reward_model.device)
        if self._source is not None:
            self._source.timer = self.timer
        return self.timer

    def last_frames(self) -> torch.Tensor:
        """The frames the last step reached (uint8 (N, H, W, 3); may be reused by the next step: copy to keep).

        With ``defer_rewards=True`` the step's rewards are zero and the caller scores
        these frames later (see ``training.callbacks.EpisodeBatchRewards``).
        """
        if not self._stepped:
            raise RuntimeError("no step has been taken yet")
        if self._source is None:
            return self._frames.tensor
        device = self.reward_model.device
        frames = self._source.last_frames(device if device.type == "cuda" else None)
        return frames if isinstance(frames, torch.Tensor) else torch.from_numpy(frames)


def find_reward_wrapper(venv: VecEnv) -> VLMRewardVecEnvWrapper:
    """The VLM reward wrapper in a stack of VecEnv wrappers (e.g. under VecMonitor or VecNormalize)."""
    while True:
        if isinstance(venv, VLMRewardVecEnvWrapper):
            return venv
        if not isinstance(venv, VecEnvWrapper):
            raise TypeError("no VLMRewardVecEnvWrapper (or FastVLMRewardVecEnv) in this VecEnv stack")
        venv = venv.venv


def task_names(reward_model: RewardModel) -> tuple[str, ...]:
    """The reward model's task names, unique (each is logged under its name)."""
    names = tuple(str(task.name) for task in reward_model.tasks)
    if len(set(names)) != len(names):
        raise ValueError(
            f"reward task names must be unique to be logged apart, got {list(names)}; give each task a name="
        )
    return names
