"""What running the humanoid tasks on MuJoCo Warp changes: the simulator env (float32 MuJoCo Warp against
float64 CPU MuJoCo, both Newton) and the solver (Newton against the task's own PGS, both CPU MuJoCo).

Every simulator starts from the same states (the task's reset noise, drawn once, as float32 values) and
takes the same actions, for one episode of the task's length. Prints, and writes with ``--out``:

* the max abs qpos difference after 1, 10 and 100 steps (random actions);
* Humanoid-v5's ground-truth return per episode (``HumanoidStepReward`` from the simulator's
  outputs) and the mean abs per-step reward difference to the task's own dynamics (CPU, PGS), for a
  random policy and two fixed ones (zero controls; every control at +0.2);
* the healthy rates (the root height in Humanoid-v5's healthy range 1-2 m: its survive term):
  at the last step, and over all steps. The humanoid tasks have no success rule of their own
  (``TaskSpec.success_rule`` is None: only CartPole and MountainCar have one), so these stand in.

    python bench/compare_solvers.py                          # MuJoCo Warp on Warp's CPU backend
    python bench/compare_solvers.py --device cuda --envs 256 --out bench/out/solvers_h100.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import machine

from vlmrm_fast.envs import humanoid
from vlmrm_fast.physics.batch import BatchSimulator
from vlmrm_fast.physics.solver import with_solver

REPORT_STEPS = (1, 10, 100)
SIMULATORS = ("cpu-pgs", "cpu-newton", "warp-newton")  # cpu-pgs: the task's own dynamics (the paper's)
REFERENCE = "cpu-pgs"


def policies(model, steps: int, envs: int, seed: int) -> dict[str, np.ndarray]:
    low, high = model.actuator_ctrlrange.T
    return {
        "random": np.random.default_rng(seed).uniform(low, high, (steps, envs, model.nu)),
        "zero": np.zeros((steps, envs, model.nu)),
        "constant +0.2": np.full((steps, envs, model.nu), 0.2),
    }


def make_simulator(name: str, model, envs: int, device: str):
    task = humanoid.HumanoidVectorTask
    solver = "pgs" if name.endswith("pgs") else "newton"
    solver_model = with_solver(model, solver)
    if name.startswith("warp"):
        from vlmrm_fast.physics.warp import WarpSimulator

        return WarpSimulator(solver_model, envs, task.frame_skip, task.outputs, rne_post_constraint=True, device=device)
    return BatchSimulator(solver_model, envs, task.frame_skip, task.outputs, rne_post_constraint=True)


def rollout(sim, model, start_qpos, start_qvel, ctrl: np.ndarray) -> dict[str, np.ndarray]:
    """qpos after each step (steps, envs, nq), rewards (steps, envs), healthy (steps, envs)."""
    sim.reset(qpos=start_qpos, qvel=start_qvel)
    reward = humanoid.HumanoidStepReward(model, sim.num_envs)
    qpos, rewards, healthy = [], [], []
    for actions in ctrl:
        reward.before_step(sim.outputs, slice(None))
        sim.step(actions)
        step_reward, info = reward(sim.outputs, actions, sim.dt)
        qpos.append(sim.qpos.copy())
        rewards.append(step_reward)
        healthy.append(info["reward_survive"] > 0)
    return {"qpos": np.stack(qpos), "reward": np.stack(rewards), "healthy": np.stack(healthy)}


def compare(args) -> dict:
    model = humanoid.humanoid_model(humanoid.DEFAULT_SCENE, 64)
    steps = max(REPORT_STEPS)
    simulators = {name: make_simulator(name, model, args.envs, args.device) for name in SIMULATORS}
    # The task's reset (qpos0 and noise, seeded per env), as float32 values: every simulator starts there.
    warp = simulators["warp-newton"]
    warp.reset(seed=args.seed, noise_scale=humanoid.RESET_NOISE_SCALE)
    start_qpos, start_qvel = warp.qpos.copy(), warp.qvel.copy()
    runs: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    seconds: dict[str, float] = {}
    for policy, ctrl in policies(model, steps, args.envs, args.seed).items():
        runs[policy] = {}
        for name, sim in simulators.items():
            began = time.perf_counter()
            runs[policy][name] = rollout(sim, model, start_qpos, start_qvel, ctrl)
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - began
    for sim in simulators.values():
        sim.close()

    def qpos_difference(policy: str, a: str, b: str) -> dict[str, float]:
        diff = np.abs(runs[policy][a]["qpos"] - runs[policy][b]["qpos"]).max(axis=(1, 2))
        return {str(k): float(diff[k - 1]) for k in REPORT_STEPS}

    result = {
        "machine": machine(),
        "envs": args.envs,
        "episode_steps": steps,
        "frame_skip": humanoid.FRAME_SKIP,
        "warp_device": args.device,
        "seed": args.seed,
        "qpos_max_abs_difference": {
            policy: {
                "warp vs cpu (Newton)": qpos_difference(policy, "warp-newton", "cpu-newton"),
                "Newton vs PGS (cpu)": qpos_difference(policy, "cpu-newton", "cpu-pgs"),
            }
            for policy in runs
        },
        "policies": {
            policy: {
                name: {
                    "return_mean": float(run["reward"].sum(axis=0).mean()),
                    "return_std": float(run["reward"].sum(axis=0).std()),
                    "reward_abs_difference_to_cpu_pgs": float(
                        np.abs(run["reward"] - runs[policy][REFERENCE]["reward"]).mean()
                    ),
                    "healthy_at_last_step": float(run["healthy"][-1].mean()),
                    "healthy_steps": float(run["healthy"].mean()),
                }
                for name, run in simulator_runs.items()
            }
            for policy, simulator_runs in runs.items()
        },
        "seconds": seconds,
    }
    return result


def print_tables(result: dict) -> None:
    print(
        f"{result['envs']} envs, {result['episode_steps']} steps of {result['frame_skip']} substeps, seed {result['seed']}"
    )
    print("\nmax |qpos difference| after k steps (same start, same actions)")
    print(f"{'policy':<14} {'pair':<22} " + " ".join(f"{'k=' + str(k):>10}" for k in REPORT_STEPS))
    for policy, pairs in result["qpos_max_abs_difference"].items():
        for pair, by_step in pairs.items():
            print(f"{policy:<14} {pair:<22} " + " ".join(f"{by_step[str(k)]:>10.2e}" for k in REPORT_STEPS))
    print("\nHumanoid-v5 ground truth per episode (healthy: root height in 1-2 m)")
    print(
        f"{'policy':<14} {'simulator':<12} {'return':>16} {'|dr| vs pgs':>12} {'healthy@end':>12} {'healthy steps':>14}"
    )
    for policy, simulators in result["policies"].items():
        for name, row in simulators.items():
            ret = f"{row['return_mean']:.1f} ± {row['return_std']:.1f}"
            print(
                f"{policy:<14} {name:<12} {ret:>16} {row['reward_abs_difference_to_cpu_pgs']:>12.4f} "
                f"{row['healthy_at_last_step']:>12.0%} {row['healthy_steps']:>14.1%}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=8, help="episodes per policy and simulator (default 8)")
    parser.add_argument("--device", default="cpu", help="MuJoCo Warp's device (default cpu: Warp's CPU backend)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    result = compare(args)
    print_tables(result)
    if args.out:
        path = pathlib.Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
