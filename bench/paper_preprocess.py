"""How much the paper's preprocessing changes the reward: resize_mode "paper" against open_clip's
transform, on rendered frames of the paper's tasks.

The paper's code resized frames with torchvision's Resize((S, S)) on float tensors (PyTorch's
bicubic without antialiasing); open_clip's transform resizes a PIL image with Pillow's antialiased
bicubic (``shortest`` for the square humanoid frames, ``squash`` for the 600 x 400 classic-control
frames: the tasks' defaults). The same model scores the same frames both ways; reported per task:
the mean signed and absolute reward difference, the largest, the spread (standard deviation) of
the rewards over the frames and the mean absolute difference in units of it (for scale), and the
Spearman rank correlation of the two. Preprocessing and encoder run in fp32 on the CPU: the
difference is the resize's alone.

    python bench/paper_preprocess.py                                  # the tiny random CLIP
    python bench/paper_preprocess.py --models vlmrm-tiny ViT-B-32     # ViT-B-32: random weights
    python bench/paper_preprocess.py --scene-assets ~/vlmrm           # the paper's own image files
"""

from __future__ import annotations

import argparse
import json
import platform
import warnings

import numpy as np
import torch

from vlmrm_fast import load_reward_model
from vlmrm_fast.envs import get_task

TASKS = ("humanoid-kneeling", "cartpole", "mountain-car-textured")


def rendered(task: str, frames: int, seed: int, scene_assets: str | None = None) -> np.ndarray:
    """``frames`` frames of ``task`` under random actions, as the run renders them (the task's size),
    drawn with the paper's image files from ``scene_assets`` where the task draws any."""
    spec = get_task(task)
    if scene_assets is not None and spec.asset_files:
        spec = spec.with_scene_assets(scene_assets)
    env = spec.make(render_size=spec.render_size)
    env.action_space.seed(seed)
    env.reset(seed=seed)
    shots = []
    for _ in range(frames):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        shots.append(env.render().copy())
        if terminated or truncated:
            env.reset()
    env.close()
    return np.stack(shots)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks = [np.argsort(np.argsort(x)).astype(float) for x in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


def compare(model: str, task: str, frames: np.ndarray, scene: str) -> dict:
    spec = get_task(task)
    scores = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights of a real architecture: said once below
        for mode in (spec.resize_mode or "shortest", "paper"):
            rm = load_reward_model(model, target_prompts=spec.target_prompts, device="cpu", resize_mode=mode)
            scores[mode] = np.concatenate([rm(frames[i : i + 16]).numpy() for i in range(0, len(frames), 16)])
    reference, paper = scores.values()
    difference = paper.astype(np.float64) - reference
    return {
        "model": model,
        "task": task,
        "scene": scene,
        "open_clip_mode": spec.resize_mode or "shortest",
        "frames": len(frames),
        "mean_difference": float(difference.mean()),
        "mean_abs_difference": float(np.abs(difference).mean()),
        "max_abs_difference": float(np.abs(difference).max()),
        "reward_std": float(reference.std()),
        "abs_difference_over_std": float(np.abs(difference).mean() / reference.std()),
        "spearman": spearman(reference, paper),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["vlmrm-tiny"])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scene-assets", metavar="DIR", help="a clone of the paper's repository: draw its image files")
    parser.add_argument("--out", help="write the rows as JSON")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    rows = []
    for task in args.tasks:
        frames = rendered(task, args.frames, args.seed, args.scene_assets)
        scene = "paper files" if args.scene_assets and get_task(task).asset_files else "drawn"
        for model in args.models:
            row = compare(model, task, frames, scene)
            rows.append(row)
            print(
                f"{model:12s} {task:22s} {scene:11s} paper - {row['open_clip_mode']:8s}: mean {row['mean_difference']:+.2e}, "
                f"mean |d| {row['mean_abs_difference']:.2e}, max |d| {row['max_abs_difference']:.2e}, "
                f"reward std {row['reward_std']:.2e} (|d|/std {row['abs_difference_over_std']:.2f}), Spearman {row['spearman']:.4f}"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
