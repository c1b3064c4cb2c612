"""A stack's construction and step, each measurement in a fresh process, two checkouts alternated.

    python bench/bench_stack_step.py --variant clip                  # one measurement of this checkout
    python bench/bench_stack_step.py --alternate /tmp/before /tmp/after --rounds 5 --out bench/out/stack_step.json
    python bench/bench_stack_step.py --alternate /tmp/before /tmp/after --variants clip --physics warp  # the stack alone

One measurement: ``FastVLMRewardVecEnv("humanoid-kneeling", 4, render_size=64, seed=0, device="cpu")`` scored by
a reward family (``clip``: ``vlmrm-tiny``; ``window``: ``viclip-tiny`` with a window of 8 frames; ``judge``:
``vlmrm-tiny-qwen2-vl``; ``preference``: the tiny judge's learned preference reward, a round every 10 steps), its
construction timed after ``from vlmrm_fast import FastVLMRewardVecEnv``, then 50 steps
of zero actions after 5. ``--scorer ENVS RANGES`` times the scoring half of a step alone instead
(``stack.scorer.ChunkedScorer``'s begin, submit per range and finish, over host frames) with a model whose own
work is nearly nothing, so that what the stack adds around a reward model shows (microseconds, the best of 7
repeats of 2,000 steps). ``--physics`` names the physics row (default ``auto``: ``batch`` for the humanoid), so that
a backend whose state lives on a device (``warp``: MuJoCo Warp, on a CPU its CPU backend) is timed too;
``--variants`` times those reward families' stacks alone (no scorer runs). ``--calls`` counts the Python calls of
a stack's construction and of a step under cProfile instead (the same on a loaded machine).

``--alternate`` runs every variant in fresh processes, the two checkouts (each a folder holding a built
``vlmrm_fast``) one after the other for each round, under ``flock -x /work/.calm.lock`` where that file exists,
with ``OMP_NUM_THREADS=1``; it prints and writes each side's medians and the load beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "clip": {"model": "vlmrm-tiny"},
    "window": {"model": "viclip-tiny", "window": {"frames": 8}},
    "judge": {"model": "vlmrm-tiny-qwen2-vl"},
    # The learned preference reward: its network per env step, a round of 16 pairs and 16 updates every 10 steps.
    "preference": {
        "model": "vlmrm-tiny-qwen2-vl",
        "target_prompts": ["a humanoid robot kneeling"],
        "preference": {"label_every": 10, "pairs": 16, "updates": 16, "batch_size": 16, "replay": 256, "labels": 256},
    },
}
LOCK = pathlib.Path("/work/.calm.lock")


def measure_stack(variant: str, physics: str = "auto") -> dict:
    import numpy as np

    from vlmrm_fast import FastVLMRewardVecEnv

    start = time.perf_counter()
    env = FastVLMRewardVecEnv(
        "humanoid-kneeling", 4, render_size=64, seed=0, device="cpu", physics=physics, **VARIANTS[variant]
    )
    built = time.perf_counter() - start
    actions = np.zeros((4, env.action_space.shape[0]), dtype=np.float32)
    for _ in range(5):
        env.step(actions)
    start = time.perf_counter()
    for _ in range(50):
        env.step(actions)
    step = (time.perf_counter() - start) / 50
    renderer, physics = env.renderer, env.plan.physics
    env.close()
    return {
        "variant": variant,
        "physics": physics,
        "construction_s": built,
        "step_ms": step * 1e3,
        "renderer": renderer,
    }


def count_calls(variant: str, physics: str = "auto") -> dict:
    """The Python calls of the same stack's construction and of 100 steps after 5, under cProfile: what a
    construction and a step run, whatever the machine's load."""
    import cProfile
    import pstats

    import numpy as np

    from vlmrm_fast import FastVLMRewardVecEnv

    def calls(profile: cProfile.Profile) -> int:
        return sum(row[1] for row in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]

    profile = cProfile.Profile()
    profile.enable()
    env = FastVLMRewardVecEnv(
        "humanoid-kneeling", 4, render_size=64, seed=0, device="cpu", physics=physics, **VARIANTS[variant]
    )
    profile.disable()
    built = calls(profile)
    actions = np.zeros((4, env.action_space.shape[0]), dtype=np.float32)
    for _ in range(5):
        env.step(actions)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(100):
        env.step(actions)
    profile.disable()
    env.close()
    return {"variant": variant, "physics": physics, "construction_calls": built, "step_calls": calls(profile) / 100}


def measure_scorer(num_envs: int, ranges: int) -> dict:
    import numpy as np
    import torch

    from vlmrm_fast.frames.views import HostFrames
    from vlmrm_fast.stack.scorer import ChunkedScorer

    class Criterion:
        name = "first pixel"
        prompts = ()

    class Cheap:
        """The members a stack reads of a frame model (before and after the reward-model protocol's per-step
        scorer), its own work one copy."""

        device = torch.device("cpu")
        tasks = criteria = (Criterion(),)
        multi_task = multi_criteria = False
        chunk_size = num_envs

        def pixel_buffer(self, n: int) -> torch.Tensor:
            return torch.empty((n, 3))

        def preprocess(self, view, out=None, timer=None):
            return out

        def score_pixels(self, pixels, out=None, timer=None):
            return pixels[:, 0] if out is None else out.copy_(pixels[:, 0])

        def step_scorer(self, num_envs: int, episode_length: int | None = None):
            from vlmrm_fast.reward.frame_model import FrameStepScorer

            return FrameStepScorer(self)

    frames = HostFrames()
    frames.stack([np.zeros((8, 8, 3), np.uint8)] * num_envs)
    bounds = np.linspace(0, num_envs, ranges + 1).astype(int)
    rows = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    scorer = ChunkedScorer(Cheap(), rows, episode_length=100)
    dones = np.zeros(num_envs, dtype=bool)
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(2000):
            scorer.begin()
            for part in rows:
                with frames.lend(part) as view:
                    scorer.submit(view, part)
            scorer.finish(dones)
        best = min(best, (time.perf_counter() - start) / 2000)
    return {"variant": f"scorer {num_envs} envs / {ranges} ranges", "us_per_step": best * 1e6}


def one(root: str, arguments: list[str]) -> dict:
    """One measurement of the checkout at ``root`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-P", str(pathlib.Path(__file__).resolve()), *arguments]
    if LOCK.exists():
        command = ["flock", "-x", str(LOCK), *command]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd="/tmp")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = float(pathlib.Path("/proc/loadavg").read_text().split()[0])
    return result


def alternate(before: str, after: str, rounds: int, variants: list[str] | None = None, physics: str = "auto") -> dict:
    plan = [["--variant", v, "--physics", physics] for v in variants or VARIANTS]
    if variants is None:
        plan += [["--scorer", "4", "1"], ["--scorer", "64", "4"]]
    rows: list[dict] = []
    for round_ in range(rounds):
        for arguments in plan:
            for side, root in (("before", before), ("after", after)):
                rows.append({"side": side, "round": round_, **one(root, arguments)})
                print(json.dumps(rows[-1]), flush=True)
    summary: dict = {}
    for name in dict.fromkeys(row["variant"] for row in rows):
        for side in ("before", "after"):
            mine = [row for row in rows if row["variant"] == name and row["side"] == side]
            summary.setdefault(name, {})[side] = {
                key: statistics.median(row[key] for row in mine)
                for key in ("construction_s", "step_ms", "us_per_step")
                if key in mine[0]
            }
    loads = [row["load"] for row in rows]
    return {"rows": rows, "medians": summary, "load": [min(loads), max(loads)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=sorted(VARIANTS))
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), help="with --alternate: these stacks alone")
    parser.add_argument("--physics", default="auto", help="the physics row the stack runs (default auto)")
    parser.add_argument("--calls", action="store_true", help="count the Python calls of --variant's stack instead")
    parser.add_argument("--scorer", nargs=2, type=int, metavar=("ENVS", "RANGES"))
    parser.add_argument("--alternate", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    if args.alternate:
        result = alternate(*args.alternate, args.rounds, args.variants, args.physics)
        print(json.dumps({"medians": result["medians"], "load": result["load"]}, indent=1))
    elif args.calls:
        result = count_calls(args.variant or "clip", args.physics)
    elif args.scorer:
        result = measure_scorer(*args.scorer)
    else:
        result = measure_stack(args.variant or "clip", args.physics)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    if not args.alternate:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
