"""``vlmrm-fast dataset | evaluate | landscape``: evaluating reward models from the command line.

vlmrm-fast dataset sample humanoid-kneeling -n 200 -o data/kneeling.npz [--policy runs/x/final_model.zip]
vlmrm-fast dataset sample humanoid-kneeling --episodes 10 -o data/kneeling-episodes.npz   (whole episodes)
vlmrm-fast dataset label data/kneeling.npz data/kneeling_labels.csv
vlmrm-fast evaluate data/kneeling.npz --models ViT-B-32/laion2b_s34b_b79k ViT-L-14/laion2b_s32b_b82k -o eval/
vlmrm-fast evaluate data/kneeling-episodes.npz --models viclip-b16 --window-step 4 -o eval/   (windows of frames)
vlmrm-fast landscape cartpole --variable pole_angle --model ViT-L-14/laion2b_s32b_b82k -o eval/
"""

from __future__ import annotations

import argparse
import csv
import pathlib
from typing import Any

DEFAULT_ALPHAS = [0.0, 0.25, 0.5, 0.75, 1.0]


def _size(values: list[int] | None) -> tuple[int, int] | None:
    return None if values is None else (values[0], values[1])


# ------------------------------------------------------------------------- dataset
def _dataset_sample(args: argparse.Namespace) -> int:
    from vlmrm_fast.evaluation.dataset import StateDataset
    from vlmrm_fast.evaluation.states import load_policy

    policy = load_policy(args.policy, args.algorithm) if args.policy else None
    if args.episodes is not None:
        ds = StateDataset.sample_episodes(
            args.task, args.episodes, policy=policy, seed=args.seed, size=_size(args.size), progress=True
        )
    else:
        ds = StateDataset.sample(
            args.task, args.n, policy=policy, seed=args.seed, size=_size(args.size), thin=args.thin, progress=True
        )
    if args.policy:
        ds.source = str(args.policy)
    out = ds.save(args.output)
    sheets = ds.contact_sheet(out.with_name(out.stem + "_sheet.png"))
    labels = out.with_name(out.stem + "_labels.csv")
    print(f"{len(ds)} states of {ds.task} ({ds.source}), frames {ds.frames.shape[2]}x{ds.frames.shape[1]}: {out}")
    print(f"contact sheet: {', '.join(map(str, sheets))}")
    if labels.exists():
        print(f"labels: {labels} exists, left as it is")
    else:
        ds.write_label_template(labels)
        print(
            f"labels: fill the `label` column of {labels} (1 = goal, 0 = not), then `vlmrm-fast dataset label {out} {labels}`"
        )
    return 0


def _dataset_label(args: argparse.Namespace) -> int:
    from vlmrm_fast.evaluation.dataset import StateDataset, read_labels

    ds = StateDataset.load(args.dataset)
    ds = ds.with_labels(read_labels(args.labels, len(ds)))
    out = ds.save(args.output or args.dataset)
    ds.contact_sheet(out.with_name(out.stem + "_sheet.png"))
    labelled = ds.labels[ds.labelled]
    print(
        f"{labelled.size} of {len(ds)} states labelled (mean label {labelled.mean() if labelled.size else float('nan'):.3g}): {out}"
    )
    return 0


def _dataset_render(args: argparse.Namespace) -> int:
    from vlmrm_fast.evaluation.dataset import StateDataset

    ds = StateDataset.load(args.dataset).rendered(_size(args.size), progress=True)
    out = ds.save(args.output or args.dataset)
    ds.contact_sheet(out.with_name(out.stem + "_sheet.png"))
    print(f"{len(ds)} frames of {ds.frames.shape[2]}x{ds.frames.shape[1]}: {out}")
    return 0


def add_dataset(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dataset", help="labelled-state datasets: sample and render states, import labels")
    jobs = p.add_subparsers(dest="job", required=True)

    s = jobs.add_parser("sample", help="sample states of a task (random actions or a saved policy) and render them")
    s.add_argument("task", help="task name (vlmrm_fast.envs.TASKS) or gymnasium id")
    s.add_argument("-n", type=int, default=100, help="number of states (default 100)")
    s.add_argument(
        "-o", "--output", required=True, help="dataset file (.npz); the contact sheet and label CSV go beside it"
    )
    s.add_argument("--policy", help="SB3 model to roll out (final_model.zip or a checkpoint); default random actions")
    s.add_argument(
        "--algorithm", choices=["SAC", "PPO", "DQN"], help="the policy's algorithm if it cannot be told from its run"
    )
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"), help="frame size (default: the task's)")
    s.add_argument("--thin", type=int, default=4, help="roll out n*thin steps and keep n states at random (default 4)")
    s.add_argument(
        "--episodes",
        type=int,
        help="keep every state of this many whole episodes, in order, instead of n states at random "
        "(a dataset of episodes, which window models score)",
    )
    s.set_defaults(func=_dataset_sample)

    lab = jobs.add_parser("label", help="import labels from a CSV with columns index,label")
    lab.add_argument("dataset", help="dataset file (.npz)")
    lab.add_argument("labels", help="CSV with columns index,label (empty label = unlabelled)")
    lab.add_argument("-o", "--output", help="write here instead of updating the dataset in place")
    lab.set_defaults(func=_dataset_label)

    r = jobs.add_parser("render", help="render a dataset's states again at another size")
    r.add_argument("dataset", help="dataset file (.npz)")
    r.add_argument("--size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"), help="frame size (default: the task's)")
    r.add_argument("-o", "--output", help="write here instead of updating the dataset in place")
    r.set_defaults(func=_dataset_render)


# ------------------------------------------------------------------------ evaluate
def _evaluate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from vlmrm_fast.evaluation.dataset import StateDataset, read_labels
    from vlmrm_fast.evaluation.evaluate import evaluate_models
    from vlmrm_fast.runtime.device import check_device_option

    check_device_option(args.device)
    ds = StateDataset.load(args.dataset)
    if args.labels:
        ds = ds.with_labels(read_labels(args.labels, len(ds)))
    result = evaluate_models(
        ds,
        args.models,
        args.alphas,
        target_prompts=args.target,
        baseline_prompts=args.baseline,
        negative_prompts=args.negatives,
        threshold=args.threshold,
        device=args.device,
        batch_size=args.batch_size,
        progress=True,
        window_size=args.window_size,
        window_step=args.window_step,
    )
    out = pathlib.Path(args.output)
    Console().print(result.table())
    written = [result.save_csv(out / "epic.csv"), result.plot(out / "epic.png")]
    pr_plot = result.plot_precision_recall(out / "precision_recall.png")
    if pr_plot is not None:
        written += [pr_plot, _save_pr_points(result, out / "precision_recall.csv")]
    print("wrote " + ", ".join(map(str, written)))
    return 0


def _save_pr_points(result: Any, path: pathlib.Path) -> pathlib.Path:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["model", "threshold", "precision", "recall", "average_precision"])
        for m in result.models:
            if m.binary is None:
                continue
            for t, p, r in zip(m.binary.thresholds, m.binary.precision, m.binary.recall):
                writer.writerow([m.model, f"{t:.6g}", f"{p:.6g}", f"{r:.6g}", f"{m.binary.average_precision:.6g}"])
    return path


def _add_prompt_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--alphas",
        type=float,
        nargs="+",
        default=DEFAULT_ALPHAS,
        help="goal-baseline strengths (default 0 .25 .5 .75 1)",
    )
    p.add_argument("--target", nargs="+", help="target prompts (default: the task's)")
    p.add_argument("--baseline", nargs="+", help="baseline prompts (default: the task's)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--batch-size", type=int, help="frames per encoder call")


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="EPIC distance of reward models to human labels, per model and alpha")
    p.add_argument("dataset", help="labelled dataset (.npz, from `vlmrm-fast dataset sample`)")
    p.add_argument(
        "--models",
        nargs="+",
        required=True,
        help="CLIP or video models, e.g. ViT-B-32/laion2b_s34b_b79k ViT-L-14/laion2b_s32b_b82k viclip-b16, or generative "
        "VLM judges (Qwen/Qwen2-VL-2B-Instruct: one question about the first target prompt)",
    )
    p.add_argument("--labels", help="labels CSV (index,label) to use instead of the dataset's")
    _add_prompt_options(p)
    p.add_argument(
        "--negatives", nargs="+", help="negative prompts of the binary reward (default: the baseline prompts)"
    )
    p.add_argument("--threshold", type=float, default=0.5, help="binary reward threshold on the goal probability")
    p.add_argument(
        "--window-size",
        type=int,
        help="frames per window (a dataset of episodes): video models read windows (default: the model's frame "
        "count); with it, a CLIP model scores the mean of a window's frame embeddings",
    )
    p.add_argument(
        "--window-step", type=int, default=1, help="a window starts every this many frames of an episode (default 1)"
    )
    p.add_argument(
        "-o", "--output", default="eval", help="folder for epic.csv, epic.png, precision_recall.* (default eval/)"
    )
    p.set_defaults(func=_evaluate)


# ----------------------------------------------------------------------- landscape
def _landscape(args: argparse.Namespace) -> int:
    import numpy as np

    from vlmrm_fast.envs import get_task
    from vlmrm_fast.evaluation.landscape import reward_landscape
    from vlmrm_fast.evaluation.scoring import asks_questions
    from vlmrm_fast.reward.families import family_of, load_reward_model
    from vlmrm_fast.runtime.device import check_device_option

    check_device_option(args.device)
    values = None
    if args.range is not None:
        low, high = args.range
        if not high > low:
            raise ValueError(f"--range needs LOW < HIGH, got {low} {high}")
        values = np.linspace(low, high, args.points)
    targets = args.target or get_task(args.task).target_prompts
    if not targets:
        raise ValueError(f"task {args.task!r} has no prompts: give --target (and --baseline for alpha > 0)")
    goal = {"goal": None} if args.no_goal else {"goal": args.goal} if args.goal is not None else {}
    family = family_of(args.model)
    model = load_reward_model(
        args.model,
        # A model that asks questions is asked about the first target prompt; its curves come below.
        target_prompts=list(targets)[:1] if asks_questions(family.criterion_kinds) else targets,
        device=args.device,
        batch_size=args.batch_size,
        resize_mode=get_task(args.task).resize_mode if family.takes_task_resize_mode else None,
    )
    try:
        land = reward_landscape(
            model,
            args.task,
            args.variable,
            values,
            alphas=args.alphas,
            target_prompts=targets,
            baseline_prompts=args.baseline,
            n_points=args.points,
            size=_size(args.size),
            seed=args.seed,
            progress=True,
            **goal,
        )
    finally:
        model.close()
    stem = pathlib.Path(args.output) / f"landscape_{land.task}_{_file_safe(args.variable)}"
    csv_path = land.save_csv(stem.with_suffix(".csv"))
    png_path = land.plot(stem.with_suffix(".png"), normalize=args.normalize)
    print(f"wrote {png_path}, {csv_path}")
    if land.random_weights:
        print(
            f"{land.model} has random weights: the landscape is noise (spread per curve: "
            + ", ".join(f"{c}: {s:.2g}" for c, s in zip(land.curves, land.spreads()))
            + ")"
        )
    if land.goal is None and not args.no_goal:
        print(
            f"no goal marked: {land.task} defines no goal value for {args.variable} (its goal is what the prompt "
            f"describes, not one value of this variable); mark one with --goal VALUE"
        )
    return 0


def _file_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def add_landscape(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("landscape", help="plot the reward along one state variable for several alphas (PNG + CSV)")
    p.add_argument("task", help="task name or gymnasium id")
    p.add_argument(
        "--variable", required=True, help="state variable: pole_angle, position, qpos:<joint>, qpos[i], state[i]"
    )
    p.add_argument(
        "--model",
        required=True,
        help="CLIP model, e.g. ViT-L-14/laion2b_s32b_b82k, or a generative VLM judge (one curve per target prompt)",
    )
    p.add_argument(
        "--range", type=float, nargs=2, metavar=("LOW", "HIGH"), help="sweep range (default: the variable's)"
    )
    p.add_argument("--points", type=int, default=41, help="number of values (default 41)")
    marks = p.add_mutually_exclusive_group()
    marks.add_argument("--goal", type=float, help="mark the goal here (default: the task's goal for the variable)")
    marks.add_argument("--no-goal", action="store_true", help="mark no goal")
    p.add_argument(
        "--normalize",
        action="store_true",
        help="scale each alpha's curve to [0, 1] (the legend gives each curve's true spread); default: the rewards as they are",
    )
    p.add_argument("--size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"), help="frame size (default: the task's)")
    p.add_argument("--seed", type=int, default=0, help="reset seed of the state the other variables keep")
    _add_prompt_options(p)
    p.add_argument("-o", "--output", default="eval", help="folder for the PNG and CSV (default eval/)")
    p.set_defaults(func=_landscape)
