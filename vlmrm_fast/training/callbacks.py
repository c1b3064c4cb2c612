"""SB3 callbacks for VLM-rewarded training: episode rewards (VLM and ground truth),
policy videos, and episode-batch reward scoring for off-policy algorithms."""

from __future__ import annotations

import collections
import pathlib
from collections.abc import Callable
from typing import Any

import gymnasium
import imageio
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import Video
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from vlmrm_fast.envs.success import LAST_STEP_RATE, RATE_NAMES, check_rule, rule_holds
from vlmrm_fast.reward.batch_scoring import FrameBatchScorer
from vlmrm_fast.reward.protocol import RewardModel
from vlmrm_fast.stack.wrappers import RewardMix, find_reward_wrapper
from vlmrm_fast.training.run_files import RunFiles, relative_to


class EpisodeStats:
    """Running per-env episode sums of the VLM and ground-truth rewards, and what the infos add:
    ``info["vlm_rewards"]`` (every prompt set of a multi-task env, by name) and
    ``info["success"]`` (the tasks that define one, see :mod:`vlmrm_fast.envs.success`): per
    episode, the task's own verdict (``success_rule``: CartPole upright on every step, MountainCar
    at the flag at any step, as the paper evaluated them), whether its last step succeeded, and the
    share of its steps that did."""

    def __init__(self, n_envs: int, window: int = 100, success_rule: str | None = None):
        self.window = window
        self.success_rule = check_rule(success_rule)
        self.vlm = np.zeros(n_envs)
        self.gt = np.zeros(n_envs)
        self.steps = np.zeros(n_envs)
        self.successes = np.zeros(n_envs)  # the episode's steps so far that succeeded (of self.steps)
        self.per_criterion: dict[str, np.ndarray] = {}
        self.finished_vlm: collections.deque = collections.deque(maxlen=window)
        self.finished_gt: collections.deque = collections.deque(maxlen=window)
        self.finished_success: collections.deque = collections.deque(maxlen=window)  # at the last step
        self.finished_success_fraction: collections.deque = collections.deque(maxlen=window)
        self.finished_rule_success: collections.deque = collections.deque(maxlen=window)  # success_rule's
        self.finished_per_criterion: dict[str, collections.deque] = {}
        self.episodes = 0  # finished since the start of this process

    def add(self, vlm: np.ndarray, gt: np.ndarray, dones: np.ndarray, infos: list[dict] | None = None) -> None:
        self.vlm += vlm
        self.gt += gt
        self.steps += 1
        infos = infos or [{}] * len(dones)
        success = [info.get("success") for info in infos]
        has_success = any(value is not None for value in success)
        if has_success:
            self.successes += np.array([bool(value) for value in success])
        for i, info in enumerate(infos):
            for name, value in info.get("vlm_rewards", {}).items():
                self.per_criterion.setdefault(name, np.zeros_like(self.vlm))[i] += value
        for i in np.nonzero(dones)[0]:
            self.finished_vlm.append(float(self.vlm[i]))
            self.finished_gt.append(float(self.gt[i]))
            if has_success:
                self.finished_success.append(float(bool(success[i])))
                self.finished_success_fraction.append(float(self.successes[i] / self.steps[i]))
                if self.success_rule is not None:
                    verdict = rule_holds(self.success_rule, int(self.successes[i]), int(self.steps[i]))
                    self.finished_rule_success.append(float(verdict))
            for name, sums in self.per_criterion.items():
                self.finished_per_criterion.setdefault(name, collections.deque(maxlen=self.window)).append(
                    float(sums[i])
                )
                sums[i] = 0.0
            self.vlm[i] = self.gt[i] = self.steps[i] = self.successes[i] = 0.0
            self.episodes += 1

    def record(self, logger) -> None:
        if self.finished_vlm:
            logger.record("rollout/ep_vlm_reward_mean", float(np.mean(self.finished_vlm)))
            logger.record("rollout/ep_gt_reward_mean", float(np.mean(self.finished_gt)))
        if self.finished_success:
            logger.record(f"rollout/{LAST_STEP_RATE}", float(np.mean(self.finished_success)))
            logger.record("rollout/ep_success_fraction", float(np.mean(self.finished_success_fraction)))
        if self.finished_rule_success and self.success_rule is not None:
            logger.record(f"rollout/{RATE_NAMES[self.success_rule]}", float(np.mean(self.finished_rule_success)))
        for name, finished in self.finished_per_criterion.items():
            if finished:
                logger.record(f"rollout/ep_vlm_reward_mean/{name}", float(np.mean(finished)))

    def state(self) -> dict[str, Any]:
        """The finished episodes' returns in the window (saved with a checkpoint: a resumed run's means go on)."""
        return {
            "vlm": list(self.finished_vlm),
            "gt": list(self.finished_gt),
            "success": list(self.finished_success),
            "success_fraction": list(self.finished_success_fraction),
            "rule_success": list(self.finished_rule_success),
            # (under the key checkpoints have always held it by)
            "per_task": {name: list(values) for name, values in self.finished_per_criterion.items()},
        }

    def restore(self, state: dict[str, Any] | None) -> None:
        if state:
            self.finished_vlm.extend(float(v) for v in state.get("vlm", []))
            self.finished_gt.extend(float(v) for v in state.get("gt", []))
            self.finished_success.extend(float(v) for v in state.get("success", []))
            self.finished_success_fraction.extend(float(v) for v in state.get("success_fraction", []))
            self.finished_rule_success.extend(float(v) for v in state.get("rule_success", []))
            for name, values in state.get("per_task", {}).items():
                self.finished_per_criterion.setdefault(name, collections.deque(maxlen=self.window)).extend(
                    float(v) for v in values
                )


def _gt_rewards(infos: list[dict]) -> np.ndarray:
    return np.array([info.get("gt_reward", 0.0) for info in infos], dtype=np.float64)


class RewardLogger(BaseCallback):
    """Logs the VLM episode reward beside the environment's own (``info["gt_reward"]``).

    The means are recorded in the step an episode ends, before SB3 writes the step's logs
    (off-policy algorithms write them right after an episode ends), and for on-policy
    algorithms (which write after each rollout) at rollout end: each written value covers
    the episodes finished by the step it is written at.
    """

    def __init__(self, stats: EpisodeStats):
        super().__init__()
        self.stats = stats

    def _on_step(self) -> bool:
        dones = np.asarray(self.locals["dones"])
        infos = self.locals["infos"]
        rewards = np.asarray(self.locals["rewards"], np.float64)
        vlm = np.array(
            [info.get("vlm_reward", r) for info, r in zip(infos, rewards)], np.float64
        )  # mixed rewards keep it apart
        self.stats.add(vlm, _gt_rewards(infos), dones, infos)
        if dones.any():
            self.stats.record(self.logger)
        return True

    def _on_rollout_end(self) -> None:
        if not isinstance(self.model, OffPolicyAlgorithm):  # off-policy logs were recorded at the episode ends
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

    def __init__(self, stats: EpisodeStats, scorer: FrameBatchScorer, env_reward_weight: float = 0.0):
        super().__init__()
        self.stats = stats
        self.scorer = scorer
        self.mix = RewardMix((), env_reward_weight)  # the buffer gets what a step's reward means: vlm + rho * env
        self._pending: list[tuple[int, int, np.ndarray, np.ndarray, list[dict]]] = []

    def _on_step(self) -> bool:
        frames = find_reward_wrapper(self.training_env).last_frames()
        position = self.model.replay_buffer.pos
        self.scorer.add(frames)  # copied into the scorer's buffer: the env may reuse its frames
        infos = self.locals["infos"]
        successes = [{"success": info["success"]} if "success" in info else {} for info in infos]
        self._pending.append(
            (position, frames.shape[0], _gt_rewards(infos), np.asarray(self.locals["dones"]).copy(), successes)
        )
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
        for position, n_envs, gt, dones, successes in self._pending:
            step_rewards = rewards[offset : offset + n_envs]
            offset += n_envs
            buffer.rewards[position % buffer.buffer_size, :n_envs] = self.mix(step_rewards, gt).rewards
            self.stats.add(step_rewards.astype(np.float64), gt, dones, successes)
        self._pending.clear()
        self.stats.record(self.logger)


class EpisodeBatchLogs(BaseCallback):
    """Episode-batch runs: writes the logs at rollout end, once the rollout's rewards are known.

    SB3 writes an off-policy run's logs in the step an episode ends, when episode-batch
    rewards are not scored yet; such runs learn with ``log_interval=None`` and this
    callback (placed after :class:`EpisodeBatchRewards`) writes them instead. The env
    returned zero rewards while collecting, so the episode returns SB3 keeps for
    ``rollout/ep_rew_mean`` are set to the VLM returns first.
    """

    def __init__(self, stats: EpisodeStats):
        super().__init__()
        self.stats = stats
        self._seen = 0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        new = self.stats.episodes - self._seen
        self._seen = self.stats.episodes
        if new <= 0:
            return
        infos = self.model.ep_info_buffer
        count = min(new, len(infos), len(self.stats.finished_vlm))
        for info, vlm in zip(
            list(infos)[len(infos) - count :], list(self.stats.finished_vlm)[len(self.stats.finished_vlm) - count :]
        ):
            info["r"] = vlm
        self.model.dump_logs()


class PolicyVideo(BaseCallback):
    """Every ``every`` env steps, films ``episodes`` episodes of the deterministic policy (mp4)."""

    def __init__(
        self,
        make_env: Callable[[], gymnasium.Env],
        reward_model: RewardModel,
        out_dir: pathlib.Path,
        every: int,
        episodes: int = 1,
        fps: int = 30,
        run_files: RunFiles | None = None,
    ):
        super().__init__()
        self.run_files = run_files  # the run's record of its files: each video goes on it
        self.make_env = make_env
        self.reward_model = reward_model
        self.out_dir = pathlib.Path(out_dir)
        self.every = every
        self.episodes = episodes
        self.fps = fps
        self._next = every

    def _on_training_start(self) -> None:
        self._next = _next_multiple(
            self.model.num_timesteps, self.every
        )  # a resumed run films what is due, not at once

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next = _next_multiple(self.num_timesteps, self.every)
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
                # The episode's rewards as the model scores a whole episode (a window model: its windows in it).
                rewards = self.reward_model.score_frames(np.stack(episode_frames), [np.arange(len(episode_frames))])
                vlm_returns.append(float(torch.nansum(rewards[:, 0])))
                frames += episode_frames
        finally:
            env.close()
        path = self.out_dir / f"policy_{self.num_timesteps:09d}_steps.mp4"

        def make(target: pathlib.Path) -> None:
            imageio.mimsave(target, frames, fps=self.fps, macro_block_size=1)

        relative = relative_to(self.run_files.folder, path) if self.run_files is not None else None
        if self.run_files is not None and relative is not None:
            self.run_files.write_made(relative, make)
        else:
            make(path)
        self.logger.record("video/ep_vlm_reward", float(np.mean(vlm_returns)))
        self.logger.record("video/path", str(path), exclude=("stdout",))
        # TensorBoard shows it as an animated GIF (training/tensorboard.py); the text formats cannot hold it.
        self.logger.record(
            "video/policy_gif", Video(np.stack(frames), self.fps), exclude=("stdout", "log", "json", "csv")
        )
        return path

    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        normalize = getattr(self.model.get_vec_normalize_env(), "normalize_obs", None)
        return normalize(obs) if normalize else obs


def _next_multiple(steps: int, every: int) -> int:
    return (steps // every + 1) * every


class RolloutCheckpoints(BaseCallback):
    """Saves model and replay buffer at the first rollout start after every ``every`` env steps.

    A rollout start is the one point where a run's state is whole: the previous
    rollout's transitions are stored with their rewards (episode-batch rewards are
    written at rollout end) and its gradient steps are taken; none of the next rollout's
    steps are. A run resumed from there continues exactly as it would have gone on.
    """

    def __init__(self, save: Callable[[str], Any], every: int):
        super().__init__()
        self.save = save
        self.every = every
        self._next = every

    def _on_training_start(self) -> None:
        self._next = _next_multiple(self.model.num_timesteps, self.every)  # no checkpoint at the resume step

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        if self.num_timesteps >= self._next:
            self.save("")
            self._next = _next_multiple(self.num_timesteps, self.every)


class TrainingControl(CallbackList):
    """The run's callbacks, and a stop at a consistent point when a signal asks for one.

    Off-policy algorithms stop at the next rollout start (within ``train_freq`` steps, after
    the rollout's gradient steps); on-policy ones at the next step, discarding the partial
    rollout (on-policy data is never saved). Either way :attr:`resume_steps` is the step
    count of that rollout start, the state the checkpoint then holds. The step SB3 takes
    before asking the callbacks whether to go on is not shown to them.
    """

    def __init__(self, callbacks: list[BaseCallback], stop: Any, *, on_policy: bool):
        super().__init__(callbacks)
        self.stop = stop
        self.on_policy = on_policy
        self.stopped = False
        self.resume_steps = 0

    def _on_training_start(self) -> None:
        self.resume_steps = self.model.num_timesteps
        super()._on_training_start()

    def _on_rollout_start(self) -> None:
        self.resume_steps = self.model.num_timesteps
        if self.stop.requested:
            self.stopped = True
            return
        super()._on_rollout_start()

    def _on_step(self) -> bool:
        if self.stopped or (self.on_policy and self.stop.requested):
            self.stopped = True
            return False
        return super()._on_step()

    def _on_rollout_end(self) -> None:
        if not self.stopped:
            super()._on_rollout_end()


class TrainingProgress(BaseCallback):
    """The run's env steps out of ``total`` (a resumed run starts where it left off) and the mean VLM
    return of the last episodes (``stats``): a bar on a terminal, plain lines in a log (vlmrm_fast.progress)."""

    def __init__(self, total: int, stats: EpisodeStats | None = None):
        super().__init__()
        self.total = total
        self.stats = stats
        self.bar: Any = None
        self._shown = -1  # the episode count whose mean the bar shows

    def _on_training_start(self) -> None:
        from vlmrm_fast.progress import progress_bar

        self.bar = progress_bar(
            total=self.total, initial=self.model.num_timesteps, desc="train", unit="step", leave=True, rich=True
        )
        self._show_reward()

    def _on_step(self) -> bool:
        self._show_reward()
        self.bar.update(self.model.num_timesteps - self.bar.n)
        return True

    def _show_reward(self) -> None:
        stats = self.stats
        if stats is None or not stats.finished_vlm or stats.episodes == self._shown:
            return
        self._shown = stats.episodes
        self.bar.set_postfix({"vlm_reward": f"{np.mean(stats.finished_vlm):.4g}"}, refresh=False)

    def close(self, steps: int | None = None) -> None:
        if self.bar is not None:
            if steps is not None and steps != self.bar.n:
                self.bar.update(steps - self.bar.n)
            self.bar.close()
            self.bar = None
