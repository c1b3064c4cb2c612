"""Frames/s of the batch renderers (EGL and MuJoCo Warp) against a loop of mujoco.Renderer.

    python bench/bench_render.py --quick                 # short CPU run (llvmpipe, Warp's CPU backend)
    python bench/bench_render.py --device cuda --out bench/out/render_h100.json

Every method renders the same humanoid states of the humanoid tasks' scene (textures,
skybox, shadows, the tracking camera) and computes the kinematics of each state first,
as a renderer fed from stepped simulations must:
  loop        per env: qpos -> MjData, mj_fwdPosition, Renderer.update_scene, render()
              (host frames; one mujoco.Renderer per env, round-robin over at most
              --baseline-renderers of them to bound memory)
  batch       EGLRenderer.render(qpos): host uint8 (N, H, W, 3)
  batch_sim   EGLRenderer.render_sim(BatchSimulator): no Python per env
  batch_cuda  EGLRenderer.render(qpos, device="cuda") through CUDA-GL interop
  batch_tK    K BatchRenderers (K EGL contexts) of N/K envs each, drawing from K threads at once
              (--threads K ...): does the GPU take GL work from several contexts faster than from one?
  warp        WarpRenderer.draw(sim): qpos to the device, kinematics, BVH refit, render,
              RGB bytes, all on the device (--device cuda: the GPU, else Warp's CPU backend)
  warp_noshadow  the same without shadows
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import vlmrm_fast  # noqa: E402
from vlmrm_fast import BatchSimulator, EGLRenderer  # noqa: E402
from vlmrm_fast.envs import humanoid  # noqa: E402

CAMERA = humanoid.SCENES[humanoid.DEFAULT_SCENE].camera


def states(model: mujoco.MjModel, n: int) -> np.ndarray:
    """Humanoid poses: the free joint kept upright, the other joints perturbed."""
    rng = np.random.default_rng(0)
    qpos = np.tile(model.qpos0, (n, 1))
    qpos[:, 7:] += rng.uniform(-0.4, 0.4, (n, model.nq - 7))
    return qpos


def timed(fn, frames_per_call: int, min_time: float) -> dict:
    fn()  # warm-up: shader compiles, first allocations
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            break
    return {"fps": frames_per_call * calls / elapsed, "calls": calls, "seconds": elapsed}


def bench_loop(model, qpos, size, min_time, max_renderers) -> dict:
    n = len(qpos)
    renderers = [mujoco.Renderer(model, height=size, width=size) for _ in range(min(n, max_renderers))]
    data = mujoco.MjData(model)

    def run():
        for i in range(n):
            data.qpos[:] = qpos[i]
            mujoco.mj_fwdPosition(model, data)
            mujoco.mj_comPos(model, data)  # the tracking camera follows the centre of mass
            mujoco.mj_camlight(model, data)
            renderer = renderers[i % len(renderers)]
            renderer.update_scene(data, CAMERA)
            renderer.render()

    try:
        result = timed(run, n, min_time)
    finally:
        for r in renderers:
            r.close()
    result["renderers"] = len(renderers)
    return result


def bench_batch(model, qpos, size, min_time, methods) -> dict:
    n = len(qpos)
    out = {}
    with EGLRenderer(model, n, size, size, camera=CAMERA) as renderer:
        out["egl"] = "software (llvmpipe)" if renderer.software else f"cuda:{renderer.cuda_device}"
        if "batch" in methods:
            out["batch"] = timed(lambda: renderer.render(qpos), n, min_time)
        if "batch_sim" in methods:
            sim = BatchSimulator(model, n)
            sim.reset(qpos=qpos)
            out["batch_sim"] = timed(lambda: renderer.render_sim(sim), n, min_time)
            sim.close()
        if "batch_cuda" in methods:
            import torch

            def run():
                renderer.render(qpos, device="cuda")
                torch.cuda.synchronize()

            out["batch_cuda"] = timed(run, n, min_time)
    return out


def bench_threads(model, qpos, size, min_time, threads: int) -> dict:
    """K renderers, each drawing its share of the envs' states from its own thread (GIL released)."""
    from concurrent.futures import ThreadPoolExecutor

    n = len(qpos)
    shares = [part for part in np.array_split(np.arange(n), threads) if len(part)]
    sims, renderers = [], []
    for part in shares:
        sim = BatchSimulator(model, len(part), nthread=max(1, len(os.sched_getaffinity(0)) // len(shares)))
        sim.reset(qpos=qpos[part])
        sims.append(sim)
        renderers.append(EGLRenderer(model, len(part), size, size, camera=CAMERA, nthread=1))
    pool = ThreadPoolExecutor(len(shares))

    def run():
        list(pool.map(lambda k: renderers[k].draw(sims[k]), range(len(shares))))

    try:
        result = timed(run, n, min_time)
    finally:
        pool.shutdown()
        for r in renderers:
            r.close()
        for sim in sims:
            sim.close()
    result["contexts"] = len(shares)
    return result


def bench_warp(model, qpos, size, min_time, methods, device: str) -> dict:
    """MuJoCo Warp drawing the simulator's states into device frames (what the VecEnv does each step)."""
    import torch

    from vlmrm_fast.rendering.warp import WarpRenderer

    n = len(qpos)
    out = {}
    sim = BatchSimulator(model, n)
    sim.reset(qpos=qpos)
    for method, shadows in (("warp", None), ("warp_noshadow", False)):
        if method not in methods:
            continue
        with WarpRenderer(model, n, size, size, camera=CAMERA, device=device, shadows=shadows) as renderer:

            def run():
                renderer.draw(sim)
                if renderer.device.type == "cuda":
                    torch.cuda.synchronize(renderer.device)

            out[method] = timed(run, n, min_time)
    sim.close()
    return out


def machine_info() -> dict:
    info = vlmrm_fast.build_info()
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "usable_cpus": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(),
        "mujoco": mujoco.__version__,
        "cuda_device": info["cuda_device_name"],
        "egl_vendor": info["egl_vendor"],
        "egl_devices": info["egl_devices"],
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N in 1, 16, 64 and 1 s per measurement")
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="cuda: also time frames delivered as CUDA tensors"
    )
    parser.add_argument("--envs", type=int, nargs="+", help="N values (default 1 16 64 256)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[224, 480])
    parser.add_argument("--min-time", type=float, help="seconds per measurement (default 1, quick; 5)")
    parser.add_argument(
        "--baseline-renderers",
        type=int,
        default=16,
        help="at most this many mujoco.Renderer in the loop (each holds its own GL context)",
    )
    parser.add_argument("--no-warp", action="store_true", help="skip the MuJoCo Warp renderer")
    parser.add_argument(
        "--threads", type=int, nargs="*", default=[], help="also time K EGL contexts on K threads (batch_tK)"
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()

    envs = args.envs or ([1, 16, 64] if args.quick else [1, 16, 64, 256])
    min_time = args.min_time or (1.0 if args.quick else 5.0)
    methods = ["batch", "batch_sim"] + (["batch_cuda"] if args.device == "cuda" else [])
    methods += [f"batch_t{k}" for k in args.threads]
    if not args.no_warp:
        methods += ["warp", "warp_noshadow"]
    machine = machine_info()
    print(
        f"# {machine['cpu']} ({machine['usable_cpus']} CPUs, load {machine['load_average'][0]:.1f}); "
        f"EGL {machine['egl_vendor']}; GPU {machine['cuda_device']}; MuJoCo {machine['mujoco']}; scene: humanoid tasks, camera {CAMERA}"
    )
    header = f"{'N':>5} {'px':>5} {'loop':>9} " + " ".join(f"{m:>13}" for m in methods) + "  speedup(batch/loop)"
    print(header + "\n" + "-" * len(header))
    rows = []
    for size in args.sizes:
        model = humanoid.humanoid_model(humanoid.DEFAULT_SCENE, size)
        for n in envs:
            qpos = states(model, n)
            row = {"num_envs": n, "size": size}
            row["loop"] = bench_loop(model, qpos, size, min_time, args.baseline_renderers)
            row.update(bench_batch(model, qpos, size, min_time, methods))
            for k in args.threads:
                row[f"batch_t{k}"] = bench_threads(model, qpos, size, min_time, k)
            if not args.no_warp:
                row.update(bench_warp(model, qpos, size, min_time, methods, args.device))
            rows.append(row)
            cells = " ".join(f"{row[m]['fps']:>13.1f}" for m in methods)
            print(
                f"{n:>5} {size:>5} {row['loop']['fps']:>9.1f} {cells}  {row['batch']['fps'] / row['loop']['fps']:>6.2f}x",
                flush=True,
            )
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"machine": machine, "min_time": min_time, "unit": "frames/s", "results": rows}, f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
