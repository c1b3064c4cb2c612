"""Physics alone: MuJoCo Warp (``WarpSimulator``) beside the CPU batch simulator (``BatchSimulator``, all
host threads), the humanoid tasks' model and step (5 substeps, rne_postconstraint, the task's outputs).

Each world count runs in a fresh process (so that its peak device memory is its own): env steps/s
(an env step is ``frame_skip`` physics substeps) with random actions, the outputs copied to the host
every step (what the VecEnv reads) and kept on the device (``host_outputs=False``: torch tensors for
a GPU-native learner); the time of the first step (Warp's modules loaded, the CUDA graph captured);
a reset of every world with the task's noise, and the share of it that draws the noise on the host;
peak device memory (MuJoCo Warp's memory pool and torch's allocator). The CPU simulator runs the
task's own model (PGS, float64: ``physics="batch"``), MuJoCo Warp the same model with Newton.

``--first-call``: Warp's first-call cost, as bench/warp_first_call.py measures it for the renderer:
two fresh processes share a new, empty kernel cache (``WARP_CACHE_PATH`` set to a temporary folder,
so the machine's own cache is neither used nor touched): the first compiles MuJoCo Warp's step
kernels, the second loads them.

    python bench/bench_physics.py --device cuda --first-call --out bench/out/physics_h100.json
    python bench/bench_physics.py --device cpu --worlds 4 --steps 3     # a dry run on Warp's CPU backend
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import machine, write_json

DEFAULT_WORLDS = (1024, 4096, 16384)
ACTION_SETS = 4  # distinct random action arrays, cycled through the timed steps


def measure(device: str, worlds: int, steps: int, warmup: int, batch_steps: int) -> dict:
    """One world count, in this process."""
    import numpy as np
    import torch

    from vlmrm_fast.envs import humanoid
    from vlmrm_fast.physics.batch import BatchSimulator
    from vlmrm_fast.physics.solver import with_solver
    from vlmrm_fast.physics.warp import WarpSimulator, wp

    task = humanoid.HumanoidVectorTask
    model = humanoid.humanoid_model(humanoid.DEFAULT_SCENE)
    low, high = model.actuator_ctrlrange.T
    actions = np.random.default_rng(0).uniform(low, high, (ACTION_SETS, worlds, model.nu))
    cuda = device.startswith("cuda")
    result: dict = {"worlds": worlds, "frame_skip": task.frame_skip, "steps": steps}

    def rate(sim, count: int) -> dict:
        began = time.perf_counter()
        for k in range(count):
            sim.step(actions[k % ACTION_SETS])
        seconds = time.perf_counter() - began
        return {"env_steps_per_s": worlds * count / seconds, "ms_per_step": 1e3 * seconds / count}

    free_before = torch.cuda.mem_get_info()[0] if cuda else None
    began = time.perf_counter()
    sim = WarpSimulator(
        with_solver(model, "newton"), worlds, task.frame_skip, task.outputs, rne_post_constraint=True, device=device
    )
    warp: dict = {"construct_s": time.perf_counter() - began}
    sim.reset(seed=0, noise=task.reset_noise)
    began = time.perf_counter()
    sim.step(actions[0])
    warp["first_step_s"] = time.perf_counter() - began
    rate(sim, warmup)
    warp["host_outputs"] = rate(sim, steps)
    sim.host_outputs = False
    rate(sim, min(warmup, 2))
    warp["device_outputs"] = rate(sim, steps)
    sim.host_outputs = True
    began = time.perf_counter()
    sim.reset(noise=task.reset_noise)
    warp["reset_all_ms"] = 1e3 * (time.perf_counter() - began)
    began = time.perf_counter()
    sim._reset_states.rows(None, seed=None, noise=task.reset_noise, qpos=None, qvel=None)
    warp["reset_noise_on_host_ms"] = 1e3 * (time.perf_counter() - began)
    if cuda:
        warp["device_memory_held_mib"] = (free_before - torch.cuda.mem_get_info()[0]) / 2**20
        warp["warp_mempool_high_mib"] = wp.get_mempool_used_mem_high(sim._wp_device) / 2**20
        warp["torch_max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    sim.close()
    result["warp"] = warp

    if batch_steps:
        cpu = BatchSimulator(model, worlds, task.frame_skip, task.outputs, rne_post_constraint=True)
        cpu.reset(seed=0, noise=task.reset_noise)
        rate(cpu, 1)
        batch = {"threads": cpu.nthread, "solver": "pgs", **rate(cpu, batch_steps)}
        began = time.perf_counter()
        cpu.reset(noise=task.reset_noise)
        batch["reset_all_ms"] = 1e3 * (time.perf_counter() - began)
        cpu.close()
        result["batch"] = batch
        result["warp_over_batch"] = warp["host_outputs"]["env_steps_per_s"] / batch["env_steps_per_s"]
    return result


def first_call(device: str, worlds: int) -> dict:
    """In this process: import, build, the first two steps (Warp's kernel cache as WARP_CACHE_PATH says)."""
    began = time.perf_counter()
    import numpy as np
    import torch

    from vlmrm_fast.envs import humanoid
    from vlmrm_fast.physics.solver import with_solver
    from vlmrm_fast.physics.warp import WarpSimulator, wp

    imported = time.perf_counter()
    task = humanoid.HumanoidVectorTask
    model = with_solver(humanoid.humanoid_model(humanoid.DEFAULT_SCENE), "newton")
    ctrl = np.zeros((worlds, model.nu))
    with WarpSimulator(model, worlds, task.frame_skip, task.outputs, rne_post_constraint=True, device=device) as sim:
        built = time.perf_counter()  # includes the first reset: forward's modules
        sim.step(ctrl)
        first = time.perf_counter()
        sim.step(ctrl)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        second = time.perf_counter()
    return {
        "import_s": imported - began,
        "construct_and_reset_s": built - imported,
        "first_step_s": first - built,
        "second_step_s": second - first,
        "cache_dir": wp.config.kernel_cache_dir,
    }


def child(args: argparse.Namespace, mode: str, worlds: int, env: dict | None = None) -> dict:
    command = [sys.executable, "-P", __file__, "--child", mode, "--device", args.device, "--worlds", str(worlds)]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-steps", str(args.batch_steps)]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    if done.returncode != 0:
        return {"worlds": worlds, "error": (done.stderr or done.stdout)[-1500:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = time.perf_counter() - began
    return result


def print_table(results: list[dict]) -> None:
    print(
        f"{'worlds':>7} {'warp env steps/s':>17} {'(device outputs)':>17} {'simulator env steps/s':>18} {'x':>6} "
        f"{'first step s':>12} {'reset ms':>9} {'(host noise)':>12} {'device MiB':>10}"
    )
    for r in results:
        if "error" in r:
            print(f"{r['worlds']:>7} error: {r['error'].splitlines()[-1] if r['error'] else '?'}")
            continue
        w, b = r["warp"], r.get("batch", {})
        memory = w.get("device_memory_held_mib")
        print(
            f"{r['worlds']:>7} {w['host_outputs']['env_steps_per_s']:>17,.0f} {w['device_outputs']['env_steps_per_s']:>17,.0f} "
            f"{b.get('env_steps_per_s', float('nan')):>18,.0f} {r.get('warp_over_batch', float('nan')):>6.2f} "
            f"{w['first_step_s']:>12.2f} {w['reset_all_ms']:>9.1f} {w['reset_noise_on_host_ms']:>12.1f} "
            f"{memory if memory is not None else float('nan'):>10.0f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="MuJoCo Warp's device: cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--worlds", type=int, nargs="+", default=list(DEFAULT_WORLDS))
    parser.add_argument("--steps", type=int, default=100, help="timed env steps of MuJoCo Warp (default 100)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--batch-steps", type=int, default=5, help="timed env steps of the CPU simulator (default 5; 0: skip it)"
    )
    parser.add_argument("--first-call", action="store_true", help="also Warp's first-call cost, cache cold and warm")
    parser.add_argument("--first-call-worlds", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=560, help="seconds per child process")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--child", choices=("measure", "first-call"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "measure":
        print(json.dumps(measure(args.device, args.worlds[0], args.steps, args.warmup, args.batch_steps)))
        return 0
    if args.child == "first-call":
        print(json.dumps(first_call(args.device, args.worlds[0])))
        return 0

    results = [child(args, "measure", worlds) for worlds in args.worlds]
    print_table(results)
    report: dict = {"machine": machine(), "device": args.device, "results": results}
    if args.first_call:
        with tempfile.TemporaryDirectory(prefix="warp-cache-") as cache:
            env = {**os.environ, "WARP_CACHE_PATH": cache}
            report["first_call"] = {
                run: child(args, "first-call", args.first_call_worlds, env) for run in ("cold_cache", "warm_cache")
            }
        print(json.dumps(report["first_call"], indent=1))
    if args.out:
        write_json(args.out, report)
    failed = any("error" in r for r in results) or any("error" in r for r in report.get("first_call", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
