"""FLOPs per image and image-encoder throughput of one model per open_clip family.

Each model's image tower is built with random weights (the compute is that of trained weights),
prepared as the reward model prepares it (eval, no gradients, MobileCLIP reparameterized,
``encoders.tower.prepare_image_tower``) and timed through the torch backend on one fixed batch:
wall clock around back-to-back calls after two warm-up calls (the GPU synchronized before and
after), with the process's CPU time and the load average around it. FLOPs per image are torch's
count on the meta device (``vlmrm_fast.models.clip.families.describe``: a multiply-add is 2 FLOPs), the
same numbers ``vlmrm-fast models`` prints. Towers only: no tokenizer or text tower
is built, so models whose tokenizer lives on the hub (SigLIP) run offline.

    python bench/bench_families.py                                  # CPU, fp32, batch 4
    python bench/bench_families.py --device cuda --precision bf16 --batch-size 256 --out bench/out/families_h100.json
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys
import time
import warnings

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.encoders.precision import resolve  # noqa: E402
from vlmrm_fast.encoders.torch_eager import TorchImageEncoder  # noqa: E402
from vlmrm_fast.encoders.tower import prepare_image_tower  # noqa: E402
from vlmrm_fast.models.clip.families import describe  # noqa: E402
from vlmrm_fast.models.random_init import create_model  # noqa: E402

#: One model per family (the smallest common member, so that a CPU run ends in minutes).
MODELS = [
    "ViT-B-32",
    "ViT-B-16-SigLIP2-256",
    "PE-Core-B-16",
    "EVA02-B-16",
    "MobileCLIP2-S0",
    "ViTamin-S",
    "convnext_base",
    "coca_ViT-B-32",
]


def measure(name: str, device: torch.device, precision: str, batch_size: int, min_seconds: float) -> dict:
    info = describe(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = create_model(name, device=device, seed=0)
    resolved = resolve(precision, device, visual=None, batch_size=batch_size)
    visual = prepare_image_tower(model.visual, device=device, precision=resolved)
    size = info["image_size"]
    encoder = TorchImageEncoder(
        visual, device=device, dtype=resolved.dtype, image_size=size, embed_dim=info["embed_dim"]
    )
    pixels = torch.randn(batch_size, 3, size, size, device=device).to(resolved.dtype)
    for _ in range(2):  # warm-up: lazy kernel and thread-pool set-up stay out of the timing
        encoder(pixels)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    load_before = os.getloadavg()[0]
    calls, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while calls < 2 or time.perf_counter() - start < min_seconds:
        encoder(pixels)
        calls += 1
    sync()
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    ips = calls * batch_size / seconds
    return {
        **info,
        "precision": resolved.name,
        "batch_size": batch_size,
        "img_per_s": round(ips, 2),
        "achieved_gflops": round(ips * info["image_gflops"], 1),
        # the process's CPU time (all its threads) per image: what other processes on the machine change least
        "cpu_ms_per_img": round(1000 * cpu_seconds / (calls * batch_size), 1),
        "device": str(device),
        "threads": torch.get_num_threads(),
        # 1-minute load average before and after the timing: above the core count, other processes shared the CPU
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=MODELS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="auto")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--min-seconds", type=float, default=3.0, help="time each model at least this long")
    p.add_argument("--out", type=pathlib.Path, help="write the rows as JSON")
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)
    device = torch.device(args.device)
    rows = []
    print("| model | family | px | img GFLOPs | img Mparams | batch | img/s | GFLOP/s | CPU ms/img | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        row = measure(name, device, args.precision, args.batch_size, args.min_seconds)
        rows.append(row)
        print(
            f"| {name} | {row['family']} | {row['image_size']} | {row['image_gflops']:.1f} | "
            f"{row['image_params_m']:.1f} | {row['batch_size']} | {row['img_per_s']:.2f} | {row['achieved_gflops']:.0f} | "
            f"{row['cpu_ms_per_img']:.0f} | {row['load_average'][0]:.1f}-{row['load_average'][1]:.1f} |",
            flush=True,
        )
    if args.out:
        common.write_json(args.out, {"machine": common.machine(), "command": sys.argv, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
