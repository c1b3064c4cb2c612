"""Windows per second and FLOPs per window of the video-language models (random weights).

Each model is loaded with random weights (the compute is that of trained weights) and its video
tower timed on one fixed batch of preprocessed windows (``encode_video``: the model's frames per
window, its input size): wall clock around back-to-back calls after warm-up calls (the GPU
synchronized before and after), with the process's CPU time and the load average around it.
FLOPs per window are torch's count on the meta device (``models.video.flops_per_window``: a
multiply-add is 2 FLOPs), so they do not depend on the device or the attention kernel a run uses.

    python bench/bench_video_models.py                    # the tiny models, CPU, fp32, batch 16
    python bench/bench_video_models.py --models viclip-b16 xclip-base-patch32 s3d-howto100m --batch-size 4 --warmup 0
    python bench/bench_video_models.py --models viclip-b16 viclip-l14 --device cuda --dtype bf16 --batch-size 64
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
import warnings

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.models.video import flops_per_window, load_video_model, video_model_info  # noqa: E402

TINY = ["viclip-tiny", "xclip-tiny", "s3d-tiny"]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def measure(
    name: str, device: torch.device, dtype: torch.dtype, batch_size: int, warmup: int, min_seconds: float
) -> dict:
    info = video_model_info(name)
    flops = flops_per_window(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: the point here
        model = load_video_model(name, device=device, dtype=dtype)
    size = info.preprocess.size
    windows = torch.randn(batch_size, info.num_frames, 3, size, size, generator=torch.Generator().manual_seed(0))
    windows = windows.to(device=device, dtype=dtype)
    for _ in range(warmup):  # lazy kernel and thread-pool set-up stay out of the timing
        model.encode_video(windows)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    load_before = os.getloadavg()[0]
    calls, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while calls < 1 or time.perf_counter() - start < min_seconds:
        model.encode_video(windows)
        calls += 1
    sync()
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    per_second = calls * batch_size / seconds
    return {
        "model": name,
        "frames": info.num_frames,
        "image_size": size,
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "gflops_per_window": round(flops / 1e9, 2),
        "dtype": str(dtype).removeprefix("torch."),
        "batch_size": batch_size,
        "calls": calls,
        "windows_per_s": round(per_second, 3),
        "achieved_gflops": round(per_second * flops / 1e9, 1),
        # the process's CPU time (all its threads) per window: what other processes change least
        "cpu_ms_per_window": round(1000 * cpu_seconds / (calls * batch_size), 2),
        "device": str(device),
        "threads": torch.get_num_threads(),
        # 1-minute load average before and after the timing: above the core count, other processes shared the CPU
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=TINY)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before the timing")
    p.add_argument("--min-seconds", type=float, default=2.0, help="time each model at least this long")
    p.add_argument("--out", type=pathlib.Path, help="write the rows as JSON")
    args = p.parse_args(argv)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    rows = []
    print("| model | frames x px | Mparams | GFLOP/window | batch | windows/s | GFLOP/s | CPU ms/window | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        row = measure(name, device, dtype, args.batch_size, args.warmup, args.min_seconds)
        rows.append(row)
        print(
            f"| {name} | {row['frames']} x {row['image_size']} | {row['params_m']} | {row['gflops_per_window']:.4g} | "
            f"{row['batch_size']} | {row['windows_per_s']:.3g} | {row['achieved_gflops']:.0f} | "
            f"{row['cpu_ms_per_window']:.3g} | {row['load_average'][0]:.1f}-{row['load_average'][1]:.1f} |",
            flush=True,
        )
    if args.out:
        common.write_json(args.out, {"machine": common.machine(), "command": sys.argv, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
