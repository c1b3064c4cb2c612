"""The batched drawing beside the generic path, in one run: a MuJoCo task's gymnasium envs stepped by their
own step(), their frames drawn (a) one render() per env (SB3's DummyVecEnv + RecordFrame: the generic path),
(b) all at once by the EGL renderer from the envs' data (the batched drawing, the same pixels), (c) all at
once by MuJoCo Warp (a ray tracer's picture), and (d) (b) with each env stepped in a worker process, each
scored by the same reward model (``FastVLMRewardVecEnv``).

Each path: env steps/s over ``--steps`` steps after ``--warmup`` (the same actions), and where a step's
time goes, from the stack's stage timer: physics (the envs' step()), draw (the frames: render() per env, or
the batched draw), preprocess, encode (the encoder and reward). On the generic path the envs' step and
render() run inside one call, so its physics is measured alone beforehand (the same envs stepped without
render()) and its draw is the rest.

    python bench/bench_drawing.py --task kitchen-microwave --envs 8 --size 96 --out bench/out/drawing_kitchen.json
    python bench/bench_drawing.py --task dm_control/walker-walk-v0 --envs 8 --size 96
    python bench/bench_drawing.py --task kitchen-microwave --device cuda --model ViT-B-32 --size 224 --envs 64   # GPU
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import machine, write_json

PATHS = {
    "generic (DummyVecEnv + render())": {"physics": "gym", "renderer": None},
    "batched drawing, EGL": {"physics": "gym", "renderer": "egl"},
    "batched drawing, MuJoCo Warp": {"physics": "gym", "renderer": "warp"},
    "batched drawing, EGL, envs in worker processes": {"physics": "gym", "renderer": "egl", "env_processes": True},
}


def physics_alone(task: str, envs: int, size: int, steps: int, actions) -> float:
    """ms per step of the envs' step() alone (no render()), as the generic path's DummyVecEnv steps them."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from vlmrm_fast.envs import get_task

    spec = get_task(task)
    venv = DummyVecEnv([lambda: spec.make(render_size=(size, size))] * envs)
    venv.seed(0)
    venv.reset()
    began = time.perf_counter()
    for k in range(steps):
        venv.step(actions[k % len(actions)])
    elapsed = time.perf_counter() - began
    venv.close()
    return 1e3 * elapsed / steps


def measure(args, name: str, options: dict, actions) -> dict:
    from vlmrm_fast import FastVLMRewardVecEnv

    venv = FastVLMRewardVecEnv(
        args.task, args.envs, model=args.model, device=args.device, render_size=args.size, **options
    )
    venv.seed(0)
    venv.reset()
    for k in range(args.warmup):
        venv.step(actions[k % len(actions)])
    timer = venv.profile()
    began = time.perf_counter()
    for k in range(args.steps):
        venv.step(actions[k % len(actions)])
    elapsed = time.perf_counter() - began
    stages = timer.mean_ms(per=args.steps)
    venv.close()
    physics = stages.pop("physics", None)
    draw = stages.pop("render", None)
    if "physics_render" in stages:  # the generic path: the envs' step and render() in one call
        both = stages.pop("physics_render")
        physics = physics_alone(args.task, args.envs, args.size, args.steps, actions)
        draw = max(both - physics, 0.0)
    encode = sum(stages.pop(key, 0.0) for key in ("encode", "reward", "transfer"))
    return {
        "path": name,
        "env_steps_per_s": args.envs * args.steps / elapsed,
        "ms_per_step": {
            "physics": physics,
            "draw": draw,
            "preprocess": stages.pop("preprocess", 0.0),
            "encode": encode,
            "other": 1e3 * elapsed / args.steps
            - sum(v or 0.0 for v in (physics, draw))
            - sum(stages.values())
            - encode,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="kitchen-microwave")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--model", default="vlmrm-tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--paths", nargs="*", default=list(PATHS), help="a subset of the paths, by name")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    import numpy as np

    from vlmrm_fast.envs import get_task

    probe = get_task(args.task).make(render_size=(args.size, args.size))
    space = probe.action_space
    probe.close()
    rng = np.random.default_rng(0)
    actions = [rng.uniform(space.low, space.high, (args.envs, *space.shape)).astype(space.dtype) for _ in range(4)]
    results = [measure(args, name, PATHS[name], actions) for name in args.paths]
    base = results[0]["env_steps_per_s"]
    for row in results:
        row["x_first_path"] = row["env_steps_per_s"] / base
        stages = " / ".join(f"{value:.1f}" if value is not None else "-" for value in row["ms_per_step"].values())
        print(
            f"{row['path']:<48} {row['env_steps_per_s']:8.2f} env steps/s  x{row['x_first_path']:.2f}  "
            f"ms physics / draw / preprocess / encode / other: {stages}"
        )
    report = {
        "machine": machine(),
        "task": args.task,
        "num_envs": args.envs,
        "resolution": args.size,
        "model": args.model,
        "device": args.device,
        "steps": args.steps,
        "results": results,
    }
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    main()
