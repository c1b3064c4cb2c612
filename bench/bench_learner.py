"""The learner's time per env step, and what distributed.learner_envs changes, with SAC on the CPU.

    python bench/bench_learner.py learner --threads 1 2 --out bench/out/learner_cpu.json
    python -m torch.distributed.run --standalone --nproc-per-node 3 bench/bench_learner.py sharded \\
        --num-envs 8 --learner-envs auto 0 --out bench/out/learner_envs_cpu.json

learner  SB3's SAC on the humanoid's shapes (348 float64 observations, 17 actions, SB3's default
         [256, 256] networks) with a full replay buffer of random transitions: seconds per gradient
         step at batch 256 and 512 (model.train), and per policy call for N envs (model.predict).
         With the paper's update-to-data ratio (one gradient step per vec-env step: train_freq =
         gradient_steps), the learner costs one gradient step plus one policy call per env step,
         whatever the number of envs and GPUs.
sharded  (under torchrun) SAC learning on a ShardedVecEnv of humanoid-kneeling (tiny CLIP, 64 px),
         one gradient step per env step, with each --learner-envs in turn (auto: the default split;
         0: rank 0 only learns): env steps per second, and the per-rank table of the last run.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

OBS, ACTIONS = 348, 17


def learner(args) -> dict:
    import gymnasium
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import DummyVecEnv

    class Shapes(gymnasium.Env):
        observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (OBS,), np.float64)
        action_space = gymnasium.spaces.Box(-1, 1, (ACTIONS,), np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros(OBS), {}

        def step(self, action):
            return np.zeros(OBS), 0.0, False, False, {}

    rng = np.random.default_rng(0)
    report: dict = {"gradient_step_ms": {}, "policy_ms": {}}
    for threads in args.threads:
        torch.set_num_threads(threads)
        model = SAC("MlpPolicy", DummyVecEnv([Shapes]), buffer_size=args.buffer, device="cpu", seed=0)
        buffer = model.replay_buffer
        buffer.observations[:] = rng.standard_normal(buffer.observations.shape)
        buffer.next_observations[:] = rng.standard_normal(buffer.next_observations.shape)
        buffer.actions[:] = rng.uniform(-1, 1, buffer.actions.shape)
        buffer.rewards[:] = rng.standard_normal(buffer.rewards.shape)
        buffer.full = True
        model._setup_learn(1)  # the logger that train() records to
        for batch in args.batches:
            model.train(gradient_steps=5, batch_size=batch)  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                model.train(gradient_steps=args.gradient_steps, batch_size=batch)
                times.append((time.perf_counter() - start) / args.gradient_steps)
            report["gradient_step_ms"][f"{threads} threads, batch {batch}"] = 1e3 * statistics.median(times)
        for envs in args.envs:
            obs = rng.standard_normal((envs, OBS))
            model.predict(obs)
            times = []
            for _ in range(50):
                start = time.perf_counter()
                model.predict(obs)
                times.append(time.perf_counter() - start)
            report["policy_ms"][f"{threads} threads, {envs} envs"] = 1e3 * statistics.median(times)
    for part in ("gradient_step_ms", "policy_ms"):
        for key, value in report[part].items():
            print(f"{part} {key}: {value:.2f}")
    return report


def sharded(args) -> dict | None:
    from stable_baselines3 import SAC

    from vlmrm_fast.distributed import ShardedVecEnv, launched_rank, serve_shard

    report: dict = {"steps_per_s": {}, "tables": {}}
    for learner_envs in args.learner_envs:
        if launched_rank() != 0:
            serve_shard()
            continue
        env = ShardedVecEnv(
            "humanoid-kneeling",
            args.num_envs,
            learner_envs=None if learner_envs == "auto" else int(learner_envs),
            model="vlmrm-tiny",
            device="cpu",
            render_size=64,
            episode_length=100,
            report_every=0,
            seed=0,
            verbose=1,
        )
        try:
            model = SAC(
                "MlpPolicy",
                env,
                learning_starts=args.warmup * args.num_envs,
                train_freq=1,
                gradient_steps=1,
                batch_size=256,
                buffer_size=100_000,
                device="cpu",
                seed=0,
            )
            model.learn(args.warmup + 5)  # the buffer past learning_starts, gradient steps running
            env.rank_table(reset=True)
            start = time.perf_counter()
            model.learn(args.steps * args.num_envs, reset_num_timesteps=False)
            seconds = time.perf_counter() - start
            table = env.rank_table()
        finally:
            env.close()
        report["steps_per_s"][learner_envs] = args.steps * args.num_envs / seconds
        report["tables"][learner_envs] = table
        print(f"learner_envs={learner_envs}: {args.steps} vec-env steps of {args.num_envs} envs in {seconds:.1f} s")
        print(table, flush=True)
    return report if launched_rank() == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["learner", "sharded"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--buffer", type=int, default=100_000)
    parser.add_argument("--gradient-steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--learner-envs", nargs="+", default=["auto", "0"])
    parser.add_argument("--steps", type=int, default=60, help="timed vec-env steps per sharded run")
    parser.add_argument("--warmup", type=int, default=40, help="vec-env steps before the gradient steps start")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    report = learner(args) if args.mode == "learner" else sharded(args)
    if report is None:
        return
    report |= {"mode": args.mode, "config": vars(args) | {"out": str(args.out)}, "machine": common.machine()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
