"""Times the fused kernels.

preprocess: N frames of 224 or 480 px (stacked, uint8 RGB) -> (N, 3, 224, 224)
fp16/bf16; reward: N embeddings of width D through K goal-baseline tasks.

On a GPU (CUDA compiled in and a device usable) the CUDA kernels are timed with
CUDA events around back-to-back launches; otherwise the C++ twins with the wall
clock. Reports ms per call, frames/s and effective GB/s (bytes read once plus
bytes written, over the time per call).

    python bench/bench_kernels.py                 # full grid
    python bench/bench_kernels.py --quick         # a few points (CPU-friendly)
    python bench/bench_kernels.py --out kernels.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable

import torch

from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec
from vlmrm_fast.frames.views import FrameLayout
from vlmrm_fast.runtime import kernels
from vlmrm_fast.runtime.device import build_info, native_cuda_usable

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
OUT_SIZE = 224


def time_call(call: Callable[[], None], on_gpu: bool, reps: int, warmup: int) -> float:
    """Milliseconds per call."""
    for _ in range(warmup):
        call()
    if on_gpu:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - t0) * 1e3 / reps


def bench_preprocess(n: int, in_px: int, dtype: torch.dtype, on_gpu: bool, reps: int, warmup: int) -> dict:
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    spec = PreprocessSpec(size=OUT_SIZE, mean=MEAN, std=STD)
    pre = FramePreprocessor(spec, device, dtype)
    frames = torch.randint(0, 256, (n, in_px, in_px, 3), dtype=torch.uint8, device=device)
    out = torch.empty((n, 3, OUT_SIZE, OUT_SIZE), dtype=dtype, device=device)
    layout_args = FramePreprocessor._layout_args(frames.data_ptr(), FrameLayout.stacked(frames))
    plan = pre.plan(in_px, in_px)
    native_dtype = kernels.kernel_dtype(dtype)
    if on_gpu:
        device_plan = kernels.DevicePreprocessPlan(plan, device.index)
        stream = torch.cuda.current_stream(device).cuda_stream

        def call():
            kernels.preprocess_cuda(device_plan, *layout_args, out.data_ptr(), native_dtype, stream)

    else:

        def call():
            kernels.preprocess_cpu(plan, *layout_args, out.data_ptr(), native_dtype)

    ms = time_call(call, on_gpu, reps, warmup)
    moved = frames.numel() + out.numel() * out.element_size()
    return {
        "kernel": "preprocess",
        "n": n,
        "in_px": in_px,
        "out_px": OUT_SIZE,
        "dtype": str(dtype).removeprefix("torch."),
        "ms": ms,
        "frames_per_s": n / ms * 1e3,
        "gb_per_s": moved / ms / 1e6,
    }


def goal_baseline_table(k: int, d: int, generator: torch.Generator) -> tuple[torch.Tensor, list]:
    rows, tasks = [], []
    for t in range(k):
        g = torch.nn.functional.normalize(torch.randn(d, generator=generator), dim=0)
        u = torch.nn.functional.normalize(torch.randn(d, generator=generator), dim=0)
        task = kernels.RewardTask()
        task.kind, task.first_row, task.num_rows = kernels.RewardKind.goal_baseline, 2 * t, 2
        task.alpha, task.g_norm2, task.g_dot_u = 0.5, float(g @ g), float(g @ u)
        rows += [g, u]
        tasks.append(task)
    return torch.stack(rows), tasks


def bench_reward(n: int, d: int, k: int, dtype: torch.dtype, on_gpu: bool, reps: int, warmup: int) -> dict:
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    generator = torch.Generator().manual_seed(0)
    text, tasks = goal_baseline_table(k, d, generator)
    text = text.to(device)
    embeddings = torch.randn(n, d, generator=generator).to(device=device, dtype=dtype)
    out = torch.empty((n, k), device=device)
    args = (
        embeddings.data_ptr(),
        kernels.kernel_dtype(dtype),
        n,
        d,
        d,
        text.data_ptr(),
        text.shape[0],
        tasks,
        out.data_ptr(),
    )
    if on_gpu:
        stream = torch.cuda.current_stream(device).cuda_stream

        def call():
            kernels.reward_cuda(*args, device.index, stream)

    else:

        def call():
            kernels.reward_cpu(*args)

    ms = time_call(call, on_gpu, reps, warmup)
    moved = embeddings.numel() * embeddings.element_size() + text.numel() * 4 + out.numel() * 4
    return {
        "kernel": "reward",
        "n": n,
        "d": d,
        "k": k,
        "dtype": str(dtype).removeprefix("torch."),
        "ms": ms,
        "frames_per_s": n / ms * 1e3,
        "gb_per_s": moved / ms / 1e6,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few points, few repetitions")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--reps", type=int, default=None, help="timed calls per point")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)

    gpu_usable = native_cuda_usable() and torch.cuda.is_available()
    if args.device == "cuda" and not gpu_usable:
        parser.error(f"--device cuda, but the native core has no usable CUDA device ({build_info()['cuda_error']})")
    on_gpu = gpu_usable if args.device == "auto" else args.device == "cuda"
    reps = args.reps or ((20 if on_gpu else 2) if args.quick else (200 if on_gpu else 5))
    warmup = 3 if on_gpu else 1

    if args.quick:
        batches, pixels, dtypes = [1, 16], [224, 480], [torch.float16, torch.bfloat16]
        reward_grid = [(n, 768, k) for n in (1, 256) for k in (1, 4)]
    else:
        batches, pixels, dtypes = [1, 16, 64, 256], [224, 480], [torch.float16, torch.bfloat16]
        reward_grid = [(n, d, k) for n in (16, 256, 4096) for d in (512, 1024, 1280) for k in (1, 8, 32)]

    results = []
    print(f"{'kernel':<11}{'shape':<28}{'dtype':<10}{'ms/call':>10}{'frames/s':>14}{'GB/s':>9}")
    for in_px in pixels:
        for n in batches:
            for dtype in dtypes:
                r = bench_preprocess(n, in_px, dtype, on_gpu, reps, warmup)
                results.append(r)
                shape = f"{n}x{in_px}px -> {OUT_SIZE}"
                print(
                    f"{'preprocess':<11}{shape:<28}{r['dtype']:<10}{r['ms']:>10.4f}{r['frames_per_s']:>14,.0f}{r['gb_per_s']:>9.1f}"
                )
    for n, d, k in reward_grid:
        for dtype in (torch.float16, torch.float32):
            r = bench_reward(n, d, k, dtype, on_gpu, reps, warmup)
            results.append(r)
            shape = f"N={n} D={d} K={k}"
            print(
                f"{'reward':<11}{shape:<28}{r['dtype']:<10}{r['ms']:>10.4f}{r['frames_per_s']:>14,.0f}{r['gb_per_s']:>9.1f}"
            )

    report = {
        "backend": "cuda" if on_gpu else "cpu-twin",
        "device": torch.cuda.get_device_name() if on_gpu else platform.processor() or platform.machine(),
        "cpu_threads": os.cpu_count(),  # the twins use every hardware thread
        "quick": args.quick,
        "reps": reps,
        "build": {k: v for k, v in build_info().items() if k.startswith("cuda")},
        "results": results,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
