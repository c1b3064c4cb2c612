"""gymnasium's MuJoCo tasks on the three paths of a stack, side by side in one run.

For each task, the same VLM-reward work three ways, with the same reward model, envs, frame size and actions:

* batch: ``FastVLMRewardVecEnv(task, n)`` as a user gets it (``physics="auto"``: the simulator env, the renderer
  ``"auto"`` picks: MuJoCo Warp on a CPU where it is installed);
* drawn: ``physics="gym"`` with ``renderer="auto"``: gymnasium's envs stepping themselves, every env's frame
  drawn at once from their data (the batched drawing, ``stack.drawn_env``: EGL, each env's ``render()``
  pixel for pixel);
* generic: ``physics="gym"``, ``renderer=None``: gymnasium's envs in SB3's ``DummyVecEnv``, each drawing its
  frame with ``render()`` (``RecordFrame``);
* generic-480 (``--generic-480``): the same at gymnasium's default 480 x 480 frames, which is what the
  generic path drew for a gymnasium id before these tasks existed (it left ``render_size`` to the env).

Rounds alternate the paths (``--rounds``), so a change in the machine's load touches both; the report
gives the median round's env steps/s, its range, the ratio to the generic path of the same task and to a
reference task's batch path (``--reference``, the humanoid), and where a step's time goes (physics /
draw / preprocess / encode / the rest, milliseconds per vec-env step, from the stack's stage timer; on the
generic path physics and draw are split by timing each env's ``render()``).

    python bench/bench_suite.py --tasks Ant-v5 HalfCheetah-v5 --envs 8 --size 96 --out bench/out/suite.json
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
import warnings
from typing import Any

import gymnasium
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.envs import get_task  # noqa: E402
from vlmrm_fast.models import RandomWeightsWarning  # noqa: E402
from vlmrm_fast.runtime.profiling import StageTimer  # noqa: E402
from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv  # noqa: E402

warnings.filterwarnings("ignore", category=RandomWeightsWarning)
STAGES = ("physics", "draw", "preprocess", "encode")


class TimedRenders:
    """Wraps every gymnasium env's ``render()`` of a generic stack to time it (its draw stage)."""

    def __init__(self, stack: FastVLMRewardVecEnv) -> None:
        self.seconds = 0.0
        for recorder in stack.venv.envs:  # RecordFrame(env): its frame is env.render()
            inner = recorder.env
            render = inner.render

            def timed(render=render):
                began = time.perf_counter()
                frame = render()
                self.seconds += time.perf_counter() - began
                return frame

            inner.render = timed


def make(task: str, path: str, args: argparse.Namespace) -> FastVLMRewardVecEnv:
    generic = path.startswith("generic")
    stack = FastVLMRewardVecEnv(
        task,
        args.envs,
        model=args.model,
        device="cpu",
        render_size=480 if path == "generic-480" else args.size,
        episode_length=args.episode_length,
        physics="auto" if path == "batch" else "gym",
        renderer=None if generic else "auto",
        seed=0,
    )
    if generic:
        stack.renders = TimedRenders(stack)
    return stack


def rate(stack: FastVLMRewardVecEnv, actions: list[np.ndarray], warmup: int) -> float:
    """Env steps per second over ``actions`` after ``warmup`` steps."""
    for step in actions[:warmup]:
        stack.step(step)
    began = time.perf_counter()
    for step in actions[warmup:]:
        stack.step(step)
    return stack.num_envs * (len(actions) - warmup) / (time.perf_counter() - began)


def stages(stack: FastVLMRewardVecEnv, path: str, actions: list[np.ndarray]) -> dict[str, float]:
    """Milliseconds per vec-env step by stage: physics, draw, preprocess, encode, and the rest of the step."""
    renders = getattr(stack, "renders", None)
    if renders is not None:
        renders.seconds = 0.0
    timer = stack.profile()
    assert isinstance(timer, StageTimer)
    began = time.perf_counter()
    for step in actions:
        stack.step(step)
    total = 1e3 * (time.perf_counter() - began) / len(actions)
    means = timer.mean_ms()
    out = {"encode": means.get("encode", 0.0) + means.get("reward", 0.0), "preprocess": means.get("preprocess", 0.0)}
    if renders is None:
        out["physics"] = means.get("physics", 0.0) + means.get("observe", 0.0)
        out["draw"] = means.get("render", 0.0)
    else:
        out["draw"] = 1e3 * renders.seconds / len(actions)
        out["physics"] = means.get("physics_render", 0.0) - out["draw"]
    out["other"] = max(0.0, total - sum(out[stage] for stage in STAGES))
    out["step"] = total
    return out


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    tasks = [*args.tasks, *([args.reference] if args.reference and args.reference not in args.tasks else [])]
    for task in tasks:
        paths = ["batch", "drawn", "generic", *(["generic-480"] * args.generic_480)]
        if task not in args.tasks:  # the reference, added for its simulator env's rate
            paths = ["batch"]
        if get_task(task).vector_task is None:  # a task of the gymnasium envs only (classic control: the generic path)
            paths = ["drawn", "generic"] if get_task(task).drawing else ["generic"]
        stacks = {path: make(task, path, args) for path in paths}
        space = next(iter(stacks.values())).action_space
        rng = np.random.default_rng(0)
        actions = [
            rng.integers(0, space.n, args.envs)
            if isinstance(space, gymnasium.spaces.Discrete)
            else rng.uniform(space.low, space.high, (args.envs, *space.shape)).astype(np.float32)
            for _ in range(args.warmup + args.steps)
        ]
        rates: dict[str, list[float]] = {path: [] for path in paths}
        for _ in range(args.rounds):
            for path, stack in stacks.items():
                stack.reset()
                rates[path].append(rate(stack, actions, args.warmup))
        for path, stack in stacks.items():
            stack.reset()
            breakdown = stages(stack, path, actions[: args.profile_steps])
            stack.close()
            median = statistics.median(rates[path])
            rows.append(
                {
                    "task": task,
                    "path": path,
                    "physics": stack.plan.physics,
                    "renderer": stack.plan.renderer or "each env's render()",
                    "env_steps_per_s": median,
                    "range": [min(rates[path]), max(rates[path])],
                    "stages_ms": breakdown,
                }
            )
    for row in rows:
        generic = next((r for r in rows if r["task"] == row["task"] and r["path"] == "generic"), None)
        reference = next((r for r in rows if r["task"] == args.reference and r["path"] == "batch"), None)
        row["x_generic"] = row["env_steps_per_s"] / generic["env_steps_per_s"] if generic else None
        row["x_reference"] = row["env_steps_per_s"] / reference["env_steps_per_s"] if reference else None
    return rows


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"| task | path | env steps/s (range over {args.rounds} rounds) | x generic | x {args.reference} batch "
        "| ms per step: physics / draw / preprocess / encode / rest |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["stages_ms"]
        ratio = lambda v: f"{v:.1f}" if v is not None else "-"  # noqa: E731
        lines.append(
            f"| {r['task']} | {r['path']} ({r['physics']}, {r['renderer']}) | {r['env_steps_per_s']:.0f} "
            f"({r['range'][0]:.0f}-{r['range'][1]:.0f}) | {ratio(r['x_generic'])} | {ratio(r['x_reference'])} | "
            f"{s['physics']:.1f} / {s['draw']:.1f} / {s['preprocess']:.1f} / {s['encode']:.1f} / {s['other']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["Ant-v5", "HalfCheetah-v5"])
    p.add_argument("--reference", default="humanoid-kneeling", help="a vector task whose rate the others are held to")
    p.add_argument("--model", default="vlmrm-tiny")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile-steps", type=int, default=20)
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--generic-480", action="store_true", help="also the generic path at gymnasium's 480 px frames")
    p.add_argument("--out", default="bench/out/suite.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = measure(args)
    report = {"machine": common.machine(), "args": vars(args), "results": rows}
    common.write_json(args.out, report)
    table = markdown(rows, args)
    pathlib.Path(args.out).with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
