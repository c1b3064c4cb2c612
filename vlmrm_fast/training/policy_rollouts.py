"""Rolling out a saved policy: ``vlmrm-fast rollout RUN_DIR/checkpoints/model_N_steps.zip``.

A checkpoint (or ``final_model.zip``) is played for a number of episodes in the envs of the run
that saved it, as its ``config.yaml`` describes them (task, frame size, episode length, time
limit, scene assets, reward model), one env per episode, all stepped together. Each episode gives:

* its VLM return: the sum of the reward model's rewards (the VLM part, if the run mixed in the
  env's reward), the quantity the paper's ``get_best_model`` ranked checkpoints by;
* its ground-truth return: the sum of the environment's own rewards;
* the paper's success, for tasks that define one (``TaskSpec.success_rule``; see
  :mod:`vlmrm_fast.envs.success`): CartPole upright on every step, MountainCar at the flag at any.

This is what the paper's ``eval_on_toy_rl_env`` reported for the classic tasks (success and
reward), for any task. The command prints the results, writes them per episode to a CSV and
films the first episodes (mp4). :mod:`vlmrm_fast.training.best_checkpoint` ranks a run's
checkpoints with the same rollouts.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import pathlib
import zipfile
from typing import Any

import numpy as np

from vlmrm_fast.envs import get_task
from vlmrm_fast.envs.success import episode_success
from vlmrm_fast.failures import ExpectedFailure
from vlmrm_fast.progress import on_terminal, progress_bar
from vlmrm_fast.training.config import TrainConfig, load_config, resolved
from vlmrm_fast.training.run_files import write_in_run
from vlmrm_fast.training.run_folder import CONFIG_FILE, ROLLOUTS

#: The seed of the first rollout env when none is given (env i gets seed + i); the same for every
#: checkpoint, so that checkpoints are compared on the same start states.
DEFAULT_SEED = 10_000


class RolloutError(ExpectedFailure):
    """A checkpoint or run folder that cannot be rolled out as asked."""


@dataclasses.dataclass(frozen=True)
class EpisodeResult:
    vlm_return: float
    gt_return: float
    length: int
    success: bool | None  # the task's success rule; None: the task defines none


@dataclasses.dataclass
class Rollout:
    """The episodes of one policy, and the frames of the first ones (if asked for)."""

    episodes: list[EpisodeResult]
    frames: list[np.ndarray]  # per filmed episode: (T, H, W, 3) uint8

    @property
    def mean_vlm_return(self) -> float:
        return float(np.mean([e.vlm_return for e in self.episodes]))

    @property
    def std_vlm_return(self) -> float:
        return float(np.std([e.vlm_return for e in self.episodes]))

    @property
    def mean_gt_return(self) -> float:
        return float(np.mean([e.gt_return for e in self.episodes]))

    @property
    def success_rate(self) -> float | None:
        if any(e.success is None for e in self.episodes):
            return None
        return float(np.mean([e.success for e in self.episodes]))


def run_folder_of(checkpoint: pathlib.Path) -> pathlib.Path:
    """The run folder a checkpoint belongs to: above ``checkpoints/``, or the one holding ``final_model.zip``."""
    folder = checkpoint.resolve().parent
    return folder.parent if folder.name == "checkpoints" else folder


def run_config(run_dir: pathlib.Path, config: str | pathlib.Path | None = None) -> TrainConfig:
    """The run's config (``RUN_DIR/config.yaml``, or ``config``), with the task's defaults written in."""
    path = pathlib.Path(config) if config else pathlib.Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RolloutError(
            f"{path} does not exist: the rollout needs the config of the run that saved the policy "
            f"(train writes it into the run folder); pass it with --config"
        )
    return resolved(load_config(path))


def rollout_env(
    cfg: TrainConfig,
    episodes: int,
    *,
    device: str | None = None,
    precision: str | None = None,
    seed: int = DEFAULT_SEED,
):
    """One env per episode, as the run drew and scored them (rewards scored at every step); the
    reward model on ``device`` in ``precision`` where given (default the run's)."""
    from vlmrm_fast.encoders import PRECISION_NAMES
    from vlmrm_fast.runtime.device import resolve_device
    from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv

    env = cfg.env.replace(n_envs=episodes, pipeline_chunks="auto")
    reward = cfg.reward.with_task_defaults(get_task(cfg.env.task))
    if device is not None:
        reward = reward.replace(device=device)
    if precision is not None:
        if precision not in PRECISION_NAMES:
            raise RolloutError(f"--precision must be one of {', '.join(PRECISION_NAMES)}, got {precision!r}")
        reward = reward.replace(precision=precision)
    elif reward.precision not in ("auto", "fp32") and resolve_device(reward.device).type == "cpu":
        # A run of configs/paper pins fp16 (the paper's autocast), which the CPU does not compute.
        raise RolloutError(
            f"the run scored its frames in {reward.precision}, which the CPU does not run; "
            "pass --precision fp32 (or auto) to score them on the CPU"
        )
    return FastVLMRewardVecEnv.from_specs(env, reward, seed=seed)


def load_policy(cfg: TrainConfig, checkpoint: pathlib.Path, device: str = "cpu") -> Any:
    """The SB3 model saved in ``checkpoint``, of the run's algorithm."""
    from vlmrm_fast.training.train import ALGORITHM_CLASSES

    check_checkpoint_path(checkpoint)
    damage = checkpoint_damage(checkpoint)
    if damage is not None:
        raise RolloutError(
            f"{checkpoint} is damaged ({damage}); roll out another checkpoint (vlmrm-fast best RUN_DIR ranks the "
            f"whole ones)"
        )
    algorithm: Any = ALGORITHM_CLASSES[cfg.rl.algorithm]
    try:
        return algorithm.load(checkpoint, device=device)
    except (ValueError, KeyError, OSError) as exc:  # a zip of another algorithm, or not a model at all
        raise RolloutError(f"{checkpoint} is not a {cfg.rl.algorithm} model of this run: {exc}") from None


def check_checkpoint_path(checkpoint: pathlib.Path) -> None:
    """A RolloutError naming what ``checkpoint`` is when it is no file (missing, a folder)."""
    if checkpoint.is_dir():
        zips = sorted(p.name for p in checkpoint.glob("*.zip"))[:3]
        inside = f" (it holds {', '.join(zips)})" if zips else ""
        raise RolloutError(
            f"{checkpoint} is a folder{inside}; give a model zip: RUN_DIR/checkpoints/model_N_steps.zip or "
            f"RUN_DIR/final_model.zip"
        )
    if not checkpoint.is_file():
        raise RolloutError(f"checkpoint {checkpoint} does not exist")


def checkpoint_damage(checkpoint: pathlib.Path) -> str | None:
    """What is wrong with a model zip, or None: its sha256 against the run's records (its checkpoint's manifest,
    or the run's record of ``final_model.zip``) where they hold one, else whether it reads as a zip at all."""
    from vlmrm_fast.training import checkpoints
    from vlmrm_fast.training.run_files import RunFiles

    manifest = checkpoint.with_suffix(".json")
    expected: str | None = None
    if checkpoint.parent.name == "checkpoints" and manifest.is_file():
        try:
            expected = json.loads(manifest.read_text())["files"]["model"][checkpoints.HASH]
        except (OSError, ValueError, KeyError, TypeError):
            expected = None
        against = f"its manifest's, {manifest.name}"
    else:
        entry = RunFiles(checkpoint.parent).entry(checkpoint.name) or {}
        expected = (entry.get("sha256") or [None])[0]
        against = "the run's record of it"
    if expected is not None and checkpoints.file_sha256(checkpoint) != expected:
        return f"its sha256 differs from {against}"
    if not zipfile.is_zipfile(checkpoint):
        return "not a zip file: cut short, or another kind of file"
    return None


def roll_out(
    policy: Any,
    venv: Any,
    *,
    seed: int = DEFAULT_SEED,
    deterministic: bool = True,
    film: int = 0,
    progress: Any = None,
) -> Rollout:
    """One episode in each env of ``venv`` (reset with ``seed``), actions from ``policy.predict``;
    the frames of the first ``film`` episodes are kept. ``progress``: a tqdm-like bar advanced per step."""
    n = venv.num_envs
    rule = venv.task.success_rule
    venv.seed(seed)
    obs = venv.reset()
    running = np.ones(n, bool)
    vlm, gt, lengths = np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
    successes: list[list[bool]] = [[] for _ in range(n)]  # each episode's info["success"], step by step
    frames: list[list[np.ndarray]] = [[] for _ in range(min(film, n))]
    limit = venv.episode_length or 1_000_000
    for _ in range(limit):
        actions, _ = policy.predict(obs, deterministic=deterministic)
        obs, rewards, dones, infos = venv.step(actions)
        vlm[running] += np.array([info.get("vlm_reward", r) for info, r in zip(infos, rewards)])[running]
        gt[running] += np.array([info.get("gt_reward", 0.0) for info in infos])[running]
        lengths[running] += 1
        if rule is not None:
            for k in np.flatnonzero(running):
                successes[k].append(bool(infos[k].get("success", False)))
        if frames:
            shown = venv.last_frames()[: len(frames)].cpu().numpy()
            for i, episode in enumerate(frames):
                if running[i]:
                    episode.append(shown[i].copy())
        running &= ~np.asarray(dones, bool)
        if progress is not None:
            progress.update(1)
        if not running.any():
            break
    episodes = [
        EpisodeResult(
            float(vlm[i]),
            float(gt[i]),
            int(lengths[i]),
            None if rule is None else episode_success(successes[i], rule),
        )
        for i in range(n)
    ]
    return Rollout(episodes, [np.stack(f) for f in frames])


def describe(rollout: Rollout) -> str:
    """``VLM return 12.3 +- 0.4, ground-truth return 150.0, success 80% (every step)`` for one policy."""
    text = (
        f"VLM return {rollout.mean_vlm_return:.6g} +- {rollout.std_vlm_return:.2g}, "
        f"ground-truth return {rollout.mean_gt_return:.4g}"
    )
    rate = rollout.success_rate
    return text if rate is None else f"{text}, success {100 * rate:.0f}%"


def write_episodes_csv(path: pathlib.Path, rollout: Rollout) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["episode", "vlm_return", "gt_return", "length", "success"])
        for i, e in enumerate(rollout.episodes):
            writer.writerow([i, e.vlm_return, e.gt_return, e.length, "" if e.success is None else int(e.success)])


def write_video(path: pathlib.Path, rollout: Rollout, fps: int = 30) -> None:
    import imageio

    imageio.mimsave(path, list(np.concatenate(rollout.frames)), fps=fps, macro_block_size=1)


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollout",
        help="play a saved policy: VLM and ground-truth returns, the paper's success, a video",
        description="Plays a checkpoint of a training run for --episodes episodes in the run's envs (its "
        "config.yaml) and reports the mean VLM return, the ground-truth return and, for CartPole and "
        "MountainCar, the paper's success rate; writes the episodes to a CSV and films the first ones.",
    )
    p.add_argument("checkpoint", help="a model zip: RUN_DIR/checkpoints/model_N_steps.zip or RUN_DIR/final_model.zip")
    add_rollout_options(p)
    p.add_argument("--film", type=int, default=1, metavar="N", help="episodes to film into the mp4 (0: none)")
    p.add_argument("--out", metavar="DIR", help="where the CSV and video go (default RUN_DIR/rollouts)")
    p.set_defaults(func=_main, setup=True)


def add_rollout_options(p: argparse.ArgumentParser) -> None:
    """The options ``rollout`` and ``best`` share."""
    p.add_argument("--episodes", type=int, default=10, help="episodes per policy (default 10)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"seed of the first env (default {DEFAULT_SEED})")
    p.add_argument(
        "--stochastic",
        action="store_true",
        help="sample actions (the paper's evaluation did) instead of the policy's deterministic ones",
    )
    p.add_argument("--device", help="the reward model's device (default the run's)")
    p.add_argument(
        "--precision",
        help="the reward model's precision (default the run's; a configs/paper run's fp16 needs a GPU: "
        "fp32 on the CPU)",
    )
    p.add_argument("--config", help="the run's config (default RUN_DIR/config.yaml)")


def check_episodes(episodes: int) -> int:
    if episodes < 1:
        raise RolloutError(f"--episodes must be at least 1, got {episodes}")
    return episodes


def _main(args: argparse.Namespace) -> int:
    checkpoint = pathlib.Path(args.checkpoint)
    check_checkpoint_path(checkpoint)  # before the config, which is looked for beside it
    episodes = check_episodes(args.episodes)
    if args.film < 0:
        raise RolloutError(f"--film must be 0 or more, got {args.film}")
    run_dir = run_folder_of(checkpoint)
    cfg = run_config(run_dir, args.config)
    policy = load_policy(cfg, checkpoint)
    out = pathlib.Path(args.out) if args.out else run_dir / ROLLOUTS
    venv = rollout_env(cfg, episodes, device=args.device, precision=args.precision, seed=args.seed)
    try:
        # a bar on a terminal only: the commands print a line per result
        with progress_bar(
            total=venv.episode_length or 0, desc=checkpoint.name, unit="step", enabled=on_terminal()
        ) as bar:
            result = roll_out(
                policy, venv, seed=args.seed, deterministic=not args.stochastic, film=args.film, progress=bar
            )
    finally:
        venv.close()
    out.mkdir(parents=True, exist_ok=True)
    table = out / f"{checkpoint.stem}.csv"
    write_in_run(run_dir, table, lambda path: write_episodes_csv(path, result))
    print(f"{checkpoint}: {episodes} episodes of {cfg.env.task}: {describe(result)}")
    print(f"episodes: {table}")
    if result.frames:
        video = out / f"{checkpoint.stem}.mp4"
        write_in_run(run_dir, video, lambda path: write_video(path, result))
        print(f"video: {video}")
    return 0
