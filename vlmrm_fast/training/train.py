"""``vlmrm-fast train CONFIG.yaml``: SB3 training with a VLM reward, from a config file.

Writes into ``output_dir``: ``config.yaml`` (as resolved), ``tensorboard/`` (VLM and
ground-truth episode rewards side by side), ``videos/`` (policy mp4s),
``checkpoints/`` (model and replay buffer every ``checkpoint_every`` steps, and on
Ctrl-C), ``final_model.zip``. ``--resume`` continues from the newest checkpoint.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from typing import Any

import gymnasium
import numpy as np
import torch
import yaml
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.vec_env import VecMonitor

from vlmrm_fast.distributed import jobs as distributed_jobs
from vlmrm_fast.distributed.channel import RankFailure
from vlmrm_fast.distributed.launch import LayoutError
from vlmrm_fast.training.callbacks import EpisodeBatchRewards, EpisodeStats, PolicyVideo, RewardLogger, RolloutCheckpoints
from vlmrm_fast.training.config import ConfigError, TrainConfig, load_config

ALGORITHM_CLASSES = {"SAC": SAC, "PPO": PPO, "DQN": DQN}
CHECKPOINT_PREFIX = "model"
_STEPS = re.compile(rf"{CHECKPOINT_PREFIX}_(?:interrupted_)?(\d+)_steps\.zip$")


def make_env(cfg: TrainConfig):
    r, e = cfg.reward, cfg.env
    return distributed_jobs.make_vec_env(  # under torchrun: the envs split over the ranks
        cfg.task,
        e.n_envs,
        target_prompts=r.target_prompts,
        baseline_prompts=r.baseline_prompts,
        alpha=r.alpha,
        model=r.model,
        pretrained=r.pretrained,
        checkpoint=r.checkpoint,
        episode_length=e.episode_length,
        render_size=e.render_size,
        device=r.device,
        backend=r.backend,
        precision=r.precision,
        cache_dir=r.cache_dir,
        seed=cfg.seed,
        engine=e.engine,
        defer_rewards=r.episode_batch,
        timeout=e.rank_timeout,
    )


def latest_checkpoint(run_dir: pathlib.Path) -> pathlib.Path | None:
    found = []
    for path in (run_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}_*steps.zip"):
        match = _STEPS.search(path.name)
        if match:
            found.append((int(match.group(1)), path.stat().st_mtime, path))
    return max(found)[2] if found else None


def _replay_buffer_path(checkpoint: pathlib.Path) -> pathlib.Path:
    return checkpoint.with_name(checkpoint.name.replace(f"{CHECKPOINT_PREFIX}_", f"{CHECKPOINT_PREFIX}_replay_buffer_").replace(".zip", ".pkl"))


def _save_checkpoint(model, run_dir: pathlib.Path, tag: str) -> pathlib.Path:
    path = run_dir / "checkpoints" / f"{CHECKPOINT_PREFIX}_{tag}{model.num_timesteps}_steps.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    if hasattr(model, "replay_buffer") and model.replay_buffer is not None:
        # Replay buffers are large (preallocated arrays): keep only the newest one.
        buffer = _replay_buffer_path(path)
        model.save_replay_buffer(buffer)
        for old in path.parent.glob(f"{CHECKPOINT_PREFIX}_replay_buffer_*.pkl"):
            if old != buffer:
                old.unlink()
    return path


def _score_frames(reward_model) -> Any:
    def score(steps: list[torch.Tensor]) -> np.ndarray:
        frames = torch.cat(steps)
        return reward_model(frames).float().cpu().numpy().reshape(len(steps), -1)

    return score


def build_model(cfg: TrainConfig, venv, run_dir: pathlib.Path):
    algo = ALGORITHM_CLASSES[cfg.rl.algorithm]
    kwargs = dict(cfg.rl.kwargs)
    tensorboard = str(run_dir / "tensorboard") if cfg.logging.tensorboard else None
    try:
        return algo(cfg.rl.policy, venv, seed=cfg.seed, device=cfg.rl.device, tensorboard_log=tensorboard, verbose=0, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"rl.kwargs: {cfg.rl.algorithm} rejected the arguments: {exc}") from None
    except AssertionError as exc:  # SB3 checks spaces with asserts (e.g. DQN needs discrete actions)
        raise ConfigError(f"rl.algorithm: {cfg.rl.algorithm} cannot train task {cfg.task!r}: {exc}") from None


def train(cfg: TrainConfig, *, resume: bool = False) -> int:
    if distributed_jobs.serving_rank():  # torchrun rank != 0: step, render and score envs for rank 0; write nothing
        return distributed_jobs.serve_for_training(cfg.env.rank_timeout)
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    venv = make_env(cfg)
    monitored = VecMonitor(venv)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        print(f"--resume: no checkpoint in {run_dir / 'checkpoints'}; starting from scratch", file=sys.stderr)
    if checkpoint is not None:
        model = ALGORITHM_CLASSES[cfg.rl.algorithm].load(checkpoint, env=monitored, device=cfg.rl.device, tensorboard_log=str(run_dir / "tensorboard") if cfg.logging.tensorboard else None)
        buffer = _replay_buffer_path(checkpoint)
        if hasattr(model, "load_replay_buffer") and buffer.is_file():
            model.load_replay_buffer(buffer)
        print(f"resuming from {checkpoint} at {model.num_timesteps} steps")
    else:
        model = build_model(cfg, monitored, run_dir)

    stats = EpisodeStats(venv.num_envs)
    rewards = EpisodeBatchRewards(stats, _score_frames(venv.reward_model)) if cfg.reward.episode_batch else RewardLogger(stats)
    callbacks = [rewards, RolloutCheckpoints(lambda tag: _save_checkpoint(model, run_dir, tag), cfg.logging.checkpoint_every)]
    if cfg.logging.video_every:
        task, episode_length, render_size = venv.task, venv.episode_length, venv.render_size

        def video_env() -> gymnasium.Env:
            kwargs = {"height": render_size[0], "width": render_size[1]} if render_size and task.engine == "mujoco" else {}
            env = task.make_env(render_mode="rgb_array", **kwargs)
            return gymnasium.wrappers.TimeLimit(env, episode_length) if episode_length else env

        callbacks.append(PolicyVideo(video_env, venv.reward_model, run_dir / "videos", cfg.logging.video_every, cfg.logging.video_episodes))

    remaining = cfg.rl.total_timesteps - model.num_timesteps
    status = 0
    try:
        if remaining > 0:
            model.learn(
                total_timesteps=remaining,
                callback=CallbackList(callbacks),
                progress_bar=True,
                reset_num_timesteps=checkpoint is None,
                tb_log_name=cfg.rl.algorithm,
            )
        model.save(run_dir / "final_model.zip")
        print(f"done: {model.num_timesteps} steps; model, logs and videos in {run_dir}")
    except KeyboardInterrupt:
        if isinstance(rewards, EpisodeBatchRewards):
            rewards.flush()
        path = _save_checkpoint(model, run_dir, "interrupted_")
        print(f"\ninterrupted at {model.num_timesteps} steps: saved {path}; continue with --resume", file=sys.stderr)
        status = 130
    except RankFailure as exc:  # another rank died or hung: the model is intact, keep it
        path = _save_checkpoint(model, run_dir, "interrupted_")
        print(f"\n{exc}\nsaved {path}; continue with --resume", file=sys.stderr)
        status = 1
    finally:
        monitored.close()
    return status


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an SB3 agent with a VLM reward from a YAML config")
    p.add_argument("config", help="YAML config (see configs/)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in the run folder")
    p.add_argument("--output-dir", help="override output_dir")
    p.add_argument("--total-timesteps", type=int, help="override rl.total_timesteps")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
        if args.output_dir:
            cfg.output_dir = args.output_dir
        if args.total_timesteps is not None:
            cfg.rl.total_timesteps = args.total_timesteps
            load_config(cfg.to_dict())
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    try:
        return train(cfg, resume=args.resume)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except LayoutError as exc:  # under torchrun: more ranks than envs, or than GPUs
        print(f"the job cannot run: {exc}", file=sys.stderr)
        return 2
