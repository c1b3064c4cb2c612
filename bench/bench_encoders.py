"""Image-encoder throughput (images/s) and FLOP utilisation per backend and batch size.

Random weights (the compute is the same as with trained ones). FLOPs per image are
counted by torch (``FlopCounterMode`` on a meta-device copy of the tower; a
multiply-add counts 2) and printed beside open_clip's published profile. Timing:
CUDA events around back-to-back calls after warm-up (wall clock on the CPU), on
one fixed input, in the backend's own precision; the compiled backend is fed its
static input buffer, as the reward model does. Utilisation is against the
measured dense matrix-product rate in the same precision (``--ceiling-tflops``
overrides it; the design anchor is ~800 TFLOP/s bf16 on an H100).

    python bench/bench_encoders.py --out bench/out/encoders_h100.json      # GPU: B-32, L-14, bigG-14
    python bench/bench_encoders.py --models ViT-L-14 --backends compile tensorrt --batch-sizes 128 256
    python bench/bench_encoders.py --quick                                 # CPU, tiny model, ~1 minute
"""

from __future__ import annotations

import argparse
import gc
import logging
import pathlib
import sys
import time
import warnings
from typing import Any

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.encoders import BACKENDS, make_image_encoder  # noqa: E402
from vlmrm_fast.encoders.base import resolve_precision  # noqa: E402
from vlmrm_fast.encoders.tensorrt_engine import tensorrt_available  # noqa: E402
from vlmrm_fast.reward.clip_loading import RandomWeightsWarning, load_clip, register_builtin_configs  # noqa: E402

warnings.filterwarnings("ignore", category=RandomWeightsWarning)

DEFAULT_MODELS = ("ViT-B-32", "ViT-L-14", "ViT-bigG-14")
DEFAULT_BATCHES = {"ViT-B-32": (64, 256, 1024), "ViT-L-14": (64, 256, 512), "ViT-bigG-14": (32, 128, 256)}
FALLBACK_BATCHES = (64, 256)
#: open_clip docs/model_profile.csv image GMACs x 2, for comparison with our own count.
PUBLISHED_GFLOPS = {
    "ViT-B-32": 8.8, "ViT-B-16": 35.0, "ViT-L-14": 162.0, "ViT-H-14": 335.0, "ViT-g-14": 534.0, "ViT-bigG-14": 968.0,
}
ANCHOR_TFLOPS = 800.0
RUN_ORDER = ("tensorrt", "torch", "compile")  # TensorRT exports from the fp32 tower before the others cast it


def count_gflops(model: str) -> tuple[float, int]:
    """GFLOPs of one image through ``model``'s image tower, and its input size (meta device: no memory, no compute)."""
    import open_clip

    register_builtin_configs()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # open_clip logs that no pretrained weights were loaded: none are wanted
    try:
        with torch.device("meta"):
            clip = open_clip.create_model(model, pretrained=None, device="meta")
    finally:
        root.setLevel(level)
    visual = clip.visual.eval()
    size = visual.image_size[0] if isinstance(visual.image_size, (tuple, list)) else int(visual.image_size)
    return common.image_tower_flops(visual, size, torch.device("meta"), torch.float32) / 1e9, size


def time_encoder(encoder, pixels: torch.Tensor, *, min_seconds: float, warmup: int) -> tuple[float, int]:
    """Seconds per call, and the number of timed calls (enough for ``min_seconds``)."""
    cuda = pixels.device.type == "cuda"

    def run(n: int) -> float:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                encoder(pixels)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        begin = time.perf_counter()
        for _ in range(n):
            encoder(pixels)
        return time.perf_counter() - begin

    run(warmup)
    probe = run(2) / 2
    calls = max(5, int(min_seconds / max(probe, 1e-6)))
    return run(calls) / calls, calls


def bench_one(clip, backend: str, batch: int, args, device: torch.device, gflops: float, ceiling: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {"model": clip.architecture, "backend": backend, "batch_size": batch}
    options: dict[str, Any] = {}
    if backend == "compile":
        options = {"compile_mode": args.compile_mode} if args.compile_mode else {}
    elif backend == "tensorrt" and args.engine_cache_dir:
        options = {"engine_cache_dir": args.engine_cache_dir}
    fixed = backend != "torch"
    start = time.perf_counter()
    try:
        encoder = make_image_encoder(
            clip, backend, device=device, precision=args.precision, batch_size=batch if fixed else None, **options
        )
        row["setup_s"] = round(time.perf_counter() - start, 1)
        row["precision"] = str(encoder.input_dtype).replace("torch.", "")
        buffer = encoder.input_buffer()
        shape = (batch, 3, encoder.image_size, encoder.image_size)
        pixels = buffer if buffer is not None else torch.empty(shape, dtype=encoder.input_dtype, device=device)
        pixels.copy_(torch.randn(pixels.shape, device=device).clamp_(-2, 2))
        seconds, calls = time_encoder(encoder, pixels, min_seconds=args.seconds, warmup=args.warmup)
    except Exception as exc:  # one configuration failing (memory, a missing package) should not end the run
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        return row
    finally:
        encoder = pixels = buffer = None  # noqa: F841
        gc.collect()
        if backend == "compile":
            torch._dynamo.reset()  # each compiled encoder adds a recompile of the same forward code
        if device.type == "cuda":
            torch.cuda.empty_cache()
    images_per_s = batch / seconds
    tflops = gflops * images_per_s / 1e3
    row.update(
        ms_per_batch=round(seconds * 1e3, 3),
        images_per_s=round(images_per_s, 1),
        tflops=round(tflops, 4),
        utilisation=round(tflops / ceiling, 4) if ceiling else None,
        timed_calls=calls,
    )
    return row


def print_table(machine: dict[str, Any], header: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    print(f"\n{machine['gpu'] or machine['cpu']} | driver {machine['driver']} | torch {machine['versions']['torch']}"
          f" | TensorRT {machine['versions'].get('tensorrt', 'not installed')}")
    ceiling, source = header["ceiling_tflops"], header["ceiling_source"]
    described = f"{ceiling:.0f} TFLOP/s ({source})" if ceiling else "none (CPU)"
    print(f"ceiling: {described}; anchor {ANCHOR_TFLOPS:.0f} TFLOP/s")
    for model, info in header["models"].items():
        published = info["published_gflops"]
        print(f"  {model}: {info['gflops_per_image']:.4g} GFLOP/image counted"
              + (f" (open_clip profile {published} G)" if published else "") + f", {info['image_size']} px")
    cols = f"{'model':<14}{'backend':<10}{'batch':>6}{'img/s':>11}{'ms/batch':>10}{'TFLOP/s':>9}{'util':>7}{'setup s':>9}"
    print(cols + "\n" + "-" * len(cols))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<14}{r['backend']:<10}{r['batch_size']:>6}  failed: {r['error'][:90]}")
            continue
        util = f"{r['utilisation']:.0%}" if r["utilisation"] is not None else "-"
        print(f"{r['model']:<14}{r['backend']:<10}{r['batch_size']:>6}{r['images_per_s']:>11,.1f}{r['ms_per_batch']:>10.2f}"
              f"{r['tflops']:>9.3g}{util:>7}{r['setup_s']:>9.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument(
        "--backends", nargs="+", default=["torch", "compile", "tensorrt"], choices=[b for b in BACKENDS if b != "auto"]
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, help="for every model (default: per model)")
    parser.add_argument("--precision", default="auto", help="auto (bf16 on GPUs that have it), bf16, fp16, fp32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per configuration")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compile-mode", help="torch.compile mode for the compile backend (default: the backend's)")
    parser.add_argument("--engine-cache-dir", help="TensorRT engine cache (default: the library's)")
    parser.add_argument("--ceiling-tflops", type=float, help="utilisation reference (default: measured matrix-product rate)")
    parser.add_argument("--quick", action="store_true", help="CPU, the tiny model, torch and compile, small batches (~1 minute)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    from vlmrm_fast.device import resolve_device

    if args.quick:
        args.models, args.backends, args.device, args.precision = ["vlmrm-tiny"], ["torch", "compile"], "cpu", "fp32"
        args.batch_sizes = args.batch_sizes or [8, 32]
        args.seconds, args.warmup = min(args.seconds, 1.0), 3
    device = resolve_device(args.device)
    backends = list(args.backends)
    if "tensorrt" in backends and (device.type != "cuda" or not tensorrt_available()):
        print(f"skipping tensorrt: {'needs a CUDA device' if device.type != 'cuda' else 'not installed (pip install .[tensorrt])'}")
        backends.remove("tensorrt")

    dtype = resolve_precision(args.precision, device)
    if args.ceiling_tflops:
        ceiling, source = args.ceiling_tflops, "given"
    else:
        ceiling = common.matmul_ceiling_tflops(device, dtype)
        source = f"measured, 8192^3 {str(dtype).replace('torch.', '')} matrix product" if ceiling else None
    machine = common.machine()
    header: dict[str, Any] = {"ceiling_tflops": ceiling, "ceiling_source": source, "anchor_tflops": ANCHOR_TFLOPS, "models": {}}
    rows = []
    for model in args.models:
        gflops, size = count_gflops(model)
        header["models"][model] = {
            "gflops_per_image": round(gflops, 3), "published_gflops": PUBLISHED_GFLOPS.get(model), "image_size": size
        }
        clip = load_clip(model, device=torch.device("cpu"))  # each encoder moves the tower to the device
        batches = args.batch_sizes or DEFAULT_BATCHES.get(model, FALLBACK_BATCHES)
        results = {}
        for backend in sorted(backends, key=RUN_ORDER.index):
            for batch in batches:
                row = bench_one(clip, backend, batch, args, device, gflops, ceiling)
                results[backend, batch] = row
                print(f"  {model} {backend} b{batch}: " + (row.get("error") or f"{row['images_per_s']:,.1f} img/s"), flush=True)
        rows += [results[b, n] for b in backends for n in batches]
        del clip
        gc.collect()
    print_table(machine, header, rows)
    if args.out:
        common.write_json(args.out, {"machine": machine, **header, "results": rows})
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
