"""Choosing a run's result as the paper did: ``vlmrm-fast best RUN_DIR``.

The paper's code chose, among the checkpoints of its runs, the one with the highest CLIP reward
(its ``get_best_model`` read the logged mean episode reward at each checkpoint's step), and people
then rated that checkpoint's rollouts. Here every complete checkpoint in ``RUN_DIR/checkpoints``
is rolled out for the same episodes (the same seeds, :mod:`vlmrm_fast.training.policy_rollouts`)
and ranked by its mean VLM return; rolling out measures each policy as it is, where the logged
training reward mixes the episodes of several policies and the exploration noise. The ranking
goes to ``RUN_DIR/best_checkpoints.csv`` and the winner is printed: film it with
``vlmrm-fast rollout``.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
from typing import Any

from vlmrm_fast.progress import on_terminal, progress_bar
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.policy_rollouts import (
    DEFAULT_SEED,
    Rollout,
    RolloutError,
    add_rollout_options,
    check_episodes,
    describe,
    load_policy,
    roll_out,
    rollout_env,
    run_config,
)
from vlmrm_fast.training.run_files import write_in_run
from vlmrm_fast.training.run_folder import RANKING_FILE


def rank_checkpoints(
    run_dir: pathlib.Path,
    *,
    episodes: int,
    seed: int = DEFAULT_SEED,
    deterministic: bool = True,
    device: str | None = None,
    precision: str | None = None,
    config: str | None = None,
    report: Any = None,
) -> list[tuple[checkpoints.Checkpoint, Rollout]]:
    """Every complete checkpoint of the run with its rollout, best (highest mean VLM return) first;
    ties keep the earlier checkpoint first. ``report(line)`` is told each result as it comes, and each
    checkpoint skipped as damaged (its checksum, or a model that does not load), with why."""
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        what = "is a file" if run_dir.exists() else "does not exist"
        raise RolloutError(f"run folder {run_dir} {what}; give a training run's folder (its output_dir)")
    if not (run_dir / "checkpoints").is_dir():
        raise RolloutError(f"{run_dir} holds no checkpoints/ folder: give a training run's folder (its output_dir)")
    saved = checkpoints.scan(run_dir / "checkpoints").complete
    if not saved:
        raise RolloutError(f"{run_dir / 'checkpoints'} holds no complete checkpoint to rank")
    cfg = run_config(run_dir, config)
    venv = rollout_env(cfg, episodes, device=device, precision=precision, seed=seed)
    results, skipped = [], []
    say = report or (lambda line: None)
    try:
        total = len(saved) * (venv.episode_length or 0)
        with progress_bar(total=total, desc="checkpoints", unit="step", enabled=on_terminal()) as bar:
            for checkpoint in saved:
                bar.set_description(checkpoint.name)
                damage = checkpoints.verify(checkpoint)[0]
                try:
                    if damage is not None:
                        raise RolloutError(damage)
                    policy = load_policy(cfg, checkpoint.model)
                except RolloutError as exc:  # one damaged checkpoint does not cost the ranking of the others
                    skipped.append(checkpoint.name)
                    say(f"skipped {checkpoint.name} ({checkpoint.steps} steps): {exc}")
                    bar.update(venv.episode_length or 0)
                    continue
                rollout = roll_out(policy, venv, seed=seed, deterministic=deterministic, progress=bar)
                results.append((checkpoint, rollout))
                say(f"{checkpoint.name} ({checkpoint.steps} steps): {describe(rollout)}")
    finally:
        venv.close()
    if not results:
        raise RolloutError(
            f"no checkpoint in {run_dir / 'checkpoints'} is whole to rank: {', '.join(skipped)} are damaged"
        )
    order = sorted(range(len(results)), key=lambda i: (-results[i][1].mean_vlm_return, i))
    return [results[i] for i in order]


def write_ranking(path: pathlib.Path, ranking: list[tuple[checkpoints.Checkpoint, Rollout]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["rank", "checkpoint", "steps", "mean_vlm_return", "std_vlm_return", "mean_gt_return", "success_rate"]
        )
        for rank, (checkpoint, rollout) in enumerate(ranking, 1):
            rate = rollout.success_rate
            writer.writerow(
                [
                    rank,
                    checkpoint.model.name,
                    checkpoint.steps,
                    rollout.mean_vlm_return,
                    rollout.std_vlm_return,
                    rollout.mean_gt_return,
                    "" if rate is None else rate,
                ]
            )


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "best",
        help="rank a run's checkpoints by their rollouts' mean VLM return (the paper's choice of result)",
        description="Rolls out every complete checkpoint in RUN_DIR/checkpoints for --episodes episodes (the "
        "same seeds for each) and ranks them by mean VLM return, as the paper's get_best_model chose its "
        "results; writes RUN_DIR/best_checkpoints.csv and prints the winner.",
    )
    p.add_argument("run_dir", help="a training run's folder (output_dir)")
    add_rollout_options(p)
    p.set_defaults(func=_main, setup=True)


def _main(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    run_dir = pathlib.Path(args.run_dir)
    ranking = rank_checkpoints(
        run_dir,
        episodes=check_episodes(args.episodes),
        seed=args.seed,
        deterministic=not args.stochastic,
        device=args.device,
        precision=args.precision,
        config=args.config,
        report=tqdm.write,
    )
    path = run_dir / RANKING_FILE
    write_in_run(run_dir, path, lambda target: write_ranking(target, ranking))
    winner, rollout = ranking[0]
    print(f"ranking: {path}")
    ranked = {c.name for c, _ in ranking}
    skipped = [c.name for c in checkpoints.scan(run_dir / "checkpoints").complete if c.name not in ranked]
    if skipped:
        print(f"not ranked (damaged, see above): {', '.join(skipped)}")
    print(f"best: {winner.model} ({winner.steps} steps): {describe(rollout)}")
    return 0
