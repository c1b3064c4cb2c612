"""SB3 callbacks for VLM-rewarded training: episode rewards (VLM and ground truth),
policy videos, and episode-batch reward scoring for off-policy algorithms."""

from __future__ import annotations

import collections
import pathlib
from typing import Any, Callable

import gymnasium
import imageio
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback


class EpisodeStats:
    """Running per-env episode sums of the VLM and ground-truth rewards."""

    def __init__(self, n_envs: int, window: int = 100):
        self.vlm = np.zeros(n_envs)
        self.gt = np.zeros(n_envs)
        self.finished_vlm: collections.deque = collections.deque(maxlen=window)
        self.finished_gt: collections.deque = collections.deque(maxlen=window)

    def add(self, vlm: np.ndarray, gt: np.ndarray, dones: np.ndarray) -> None:
        self.vlm += vlm
        self.gt += gt
        for i in np.nonzero(dones)[0]:
            self.finished_vlm.append(self.vlm[i])
            self.finished_gt.append(self.gt[i])
            self.vlm[i] = self.gt[i] = 0.0

    def record(self, logger) -> None:
        if self.finished_vlm:
            logger.record("rollout/ep_vlm_reward_mean", float(np.mean(self.finished_vlm)))
            logger.record("rollout/ep_gt_reward_mean", float(np.mean(self.finished_gt)))


def _gt_rewards(infos: list[dict]) -> np.ndarray:
    return np.array([info.get("gt_reward", 0.0) for info in infos], dtype=np.float64)


class RewardLogger(BaseCallback):
    """Logs the VLM episode reward beside the environment's own (``info["gt_reward"]``)."""

    def __init__(self, stats: EpisodeStats):
        super().__init__()
        self.stats = stats

    def _on_step(self) -> bool:
        self.stats.add(np.asarray(self.locals["rewards"], np.float64), _gt_rewards(self.locals["infos"]), np.asarray(self.locals["dones"]))
        return True

    def _on_rollout_end(self) -> None:
        self.stats.record(self.logger)


class EpisodeBatchRewards(BaseCallback):
    """Off-policy: the env returns no reward while collecting; each step's frames go to a
    :class:`~vlmrm_fast.reward.batch_scoring.FrameBatchScorer`, which keeps them on the reward
    model's device and scores them in batches of its own size (independent of the number of
    envs) as they fill up. At the end of each rollout (before any gradient step) the last,
    partial batch is scored and all rewards are written into the replay buffer.

    SB3 calls ``on_step`` before storing a transition, so the replay buffer's
    position at that moment is where the step lands. Frames are those of the
    reached states (recorded before auto-reset), as in the per-step mode.
    """

    def __init__(self, stats: EpisodeStats, scorer: Any):
        super().__init__()
        self.stats = stats
        self.scorer = scorer
        self._pending: list[tuple[int, int, np.ndarray, np.ndarray]] = []

    def _on_step(self) -> bool:
        frames = self.training_env.unwrapped.last_frames()
        position = self.model.replay_buffer.pos
        self.scorer.add(frames)  # copied into the scorer's buffer: the env may reuse its frames
        self._pending.append((position, frames.shape[0], _gt_rewards(self.locals["infos"]), np.asarray(self.locals["dones"]).copy()))
        return True

    def _on_rollout_end(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Scores the pending frames and writes their rewards into the replay buffer."""
        if not self._pending:
            return
        buffer = self.model.replay_buffer
        rewards = self.scorer.finish()
        offset = 0
        for position, n_envs, gt, dones in self._pending:
            step_rewards = rewards[offset : offset + n_envs]
            offset += n_envs
            buffer.rewards[position % buffer.buffer_size, :n_envs] = step_rewards
            self.stats.add(step_rewards.astype(np.float64), gt, dones)
        self._pending.clear()
        self.stats.record(self.logger)


class PolicyVideo(BaseCallback):
    """Every ``every`` env steps, films ``episodes`` episodes of the deterministic policy (mp4)."""

    def __init__(self, make_env: Callable[[], gymnasium.Env], reward_model: Any, out_dir: pathlib.Path, every: int, episodes: int = 1, fps: int = 30):
        super().__init__()
        self.make_env = make_env
        self.reward_model = reward_model
        self.out_dir = pathlib.Path(out_dir)
        self.every = every
        self.episodes = episodes
        self.fps = fps
        self._next = every

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next += self.every
            self.record()
        return True

    def record(self) -> pathlib.Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        env = self.make_env()
        frames, vlm_returns = [], []
        try:
            for episode in range(self.episodes):
                obs, _ = env.reset(seed=10_000 + episode)
                episode_frames = []
                done = False
                while not done:
                    action, _ = self.model.predict(self._normalize(obs), deterministic=True)
                    obs, _, terminated, truncated, _ = env.step(action)
                    episode_frames.append(env.render())
                    done = terminated or truncated
                vlm_returns.append(float(self.reward_model(np.stack(episode_frames)).sum()))
                frames += episode_frames
        finally:
            env.close()
        path = self.out_dir / f"policy_{self.num_timesteps:09d}_steps.mp4"
        imageio.mimsave(path, frames, fps=self.fps, macro_block_size=1)
        self.logger.record("video/ep_vlm_reward", float(np.mean(vlm_returns)))
        self.logger.record("video/path", str(path), exclude=("stdout",))
        return path

    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        normalize = getattr(self.model.get_vec_normalize_env(), "normalize_obs", None)
        return normalize(obs) if normalize else obs


class RolloutCheckpoints(BaseCallback):
    """Saves model and replay buffer at the first rollout end after every ``every`` env steps.

    SB3's CheckpointCallback saves from ``on_step``, mid-rollout, which would store
    episode-batch transitions before their rewards are written; rollout ends are
    after. Place this callback after :class:`EpisodeBatchRewards`.
    """

    def __init__(self, save: Callable[[str], pathlib.Path], every: int):
        super().__init__()
        self.save = save
        self.every = every
        self._next = every

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.num_timesteps >= self._next:
            self.save("")
            self._next = (self.num_timesteps // self.every + 1) * self.every
