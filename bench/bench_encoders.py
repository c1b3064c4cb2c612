"""Image-encoder throughput (images/s) and FLOP utilisation per backend, precision and batch size;
compile time cold and warm.

Random weights (the compute is the same as with trained ones). FLOPs per image are
counted by torch (``FlopCounterMode`` on a meta-device copy of the tower; a
multiply-add counts 2) and printed beside open_clip's published profile. Timing:
CUDA events around back-to-back calls after warm-up (wall clock on the CPU), on
one fixed input, in the backend's own precision; the compiled backend is fed its
static input buffer, as the reward model does. Utilisation is against the
measured dense matrix-product rate in the row's precision (bf16's for bf16/fp16, the FP8
product's for fp8; ``--ceiling-tflops`` overrides the bf16 one; the design anchor is ~800 TFLOP/s
bf16 on an H100). ``setup s`` is the encoder's construction: for "compile" the compilation and
CUDA-graph capture, from the on-disk compile cache when it was there (``cache`` column).

FP8 (and "auto", which may pick it) runs once per ``--fp8-scaling`` (default: dynamic-rowwise, the
library's default); static scales are calibrated on random frames (the speed does not depend on
the scale's value). An "auto" row reports what auto picked in its precision column.

``--compile-timing`` measures what a user waits for: each configuration is compiled in a fresh
process with an empty compile cache (cold), then again in another fresh process (warm: the cache
from the first). ``bench/profile_encoders.py`` shows where the GPU time of a tower goes.

    python bench/bench_encoders.py --out bench/out/encoders_h100.json      # GPU: B-32, L-14, bigG-14
    python bench/bench_encoders.py --models ViT-L-14 --backends torch compile --precision bf16 fp8 --batch-sizes 256
    python bench/bench_encoders.py --models ViT-L-14 --backends compile --precision bf16 fp8 auto \
        --fp8-scaling dynamic-rowwise dynamic-tensorwise static-tensorwise --batch-sizes 256
    python bench/bench_encoders.py --models ViT-L-14 --compile-timing --batch-sizes 64 --compile-mode default max-autotune-no-cudagraphs
    python bench/bench_encoders.py --quick                                 # CPU, tiny model, ~1 minute
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.encoders import BACKENDS, make_image_encoder  # noqa: E402
from vlmrm_fast.encoders.compiled import COMPILE_MODES, COMPILE_SCOPES  # noqa: E402
from vlmrm_fast.encoders.fp8 import DEFAULT_FP8_SCALING, FP8_SCALINGS, STATIC_SCALING  # noqa: E402
from vlmrm_fast.encoders.precision import PRECISION_NAMES, resolve  # noqa: E402
from vlmrm_fast.encoders.tensorrt_engine import tensorrt_available  # noqa: E402
from vlmrm_fast.models import RandomWeightsWarning
from vlmrm_fast.models.clip import load_clip  # noqa: E402

warnings.filterwarnings("ignore", category=RandomWeightsWarning)

DEFAULT_MODELS = ("ViT-B-32", "ViT-L-14", "ViT-bigG-14")
DEFAULT_BATCHES = {"ViT-B-32": (64, 256, 1024), "ViT-L-14": (64, 256, 512), "ViT-bigG-14": (32, 128, 256)}
FALLBACK_BATCHES = (64, 256)
#: open_clip docs/model_profile.csv image GMACs x 2, for comparison with our own count.
PUBLISHED_GFLOPS = {
    "ViT-B-32": 8.8,
    "ViT-B-16": 35.0,
    "ViT-L-14": 162.0,
    "ViT-H-14": 335.0,
    "ViT-g-14": 534.0,
    "ViT-bigG-14": 968.0,
}
ANCHOR_TFLOPS = 800.0
RUN_ORDER = ("tensorrt", "torch", "compile")  # TensorRT exports from the fp32 tower before the others cast it


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


def bench_one(
    clip,
    backend: str,
    batch: int,
    precision: str,
    args,
    device: torch.device,
    gflops: float,
    ceilings: dict[str, float | None],
    compile_mode: str | None = None,
    fp8_scaling: str | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {"model": clip.architecture, "backend": backend, "batch_size": batch, "asked": precision}
    options: dict[str, Any] = {}
    if backend == "compile":
        options = {"compile_mode": compile_mode, "compile_scope": args.compile_scope, "progress": not args.quiet}
        if args.compile_cache:
            options["compile_cache"] = False if args.compile_cache == "off" else args.compile_cache
        if args.attention:
            options["attention"] = args.attention
    elif backend == "torch" and args.attention:
        options = {"attention": args.attention}
    elif backend == "tensorrt" and args.engine_cache_dir:
        options = {"engine_cache_dir": args.engine_cache_dir}
    if fp8_scaling is not None:
        options["fp8_scaling"] = fp8_scaling
        if fp8_scaling == STATIC_SCALING:
            size = clip.preprocess.size
            rng = np.random.default_rng(0)
            options["fp8_calibration"] = rng.integers(0, 256, size=(32, size, size, 3), dtype=np.uint8)
    fixed = backend != "torch"
    start = time.perf_counter()
    encoder = pixels = buffer = None
    try:
        # Every encoder casts (and for FP8 converts) its tower in place: each gets a private copy.
        encoder = make_image_encoder(
            _private_tower(clip),
            backend,
            device=device,
            precision=precision,
            batch_size=batch if fixed else None,
            **options,
        )
        row["setup_s"] = round(time.perf_counter() - start, 2)
        row["precision"] = getattr(encoder, "precision", str(encoder.input_dtype).replace("torch.", ""))
        row["fp8_scaling"] = encoder.fp8_scaling
        if backend == "compile":
            row.update(
                compile_mode=encoder.compile_mode,
                compile_scope=encoder.compile_scope,
                cache_found=encoder.cache_report.found,
            )
        buffer = encoder.input_buffer()
        shape = (batch, 3, encoder.image_size, encoder.image_size)
        pixels = buffer if buffer is not None else torch.empty(shape, dtype=encoder.input_dtype, device=device)
        pixels.copy_(torch.randn(pixels.shape, device=device).clamp_(-2, 2))
        seconds, calls = time_encoder(encoder, pixels, min_seconds=args.seconds, warmup=args.warmup)
    except Exception as exc:  # one configuration failing (memory, a missing package) should not end the run
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        return row
    finally:
        if encoder is not None:
            encoder.close()
        encoder = pixels = buffer = None  # noqa: F841
        gc.collect()
        if backend == "compile":
            torch._dynamo.reset()  # each compiled encoder adds a recompile of the same forward code
        if device.type == "cuda":
            torch.cuda.empty_cache()
    images_per_s = batch / seconds
    tflops = gflops * images_per_s / 1e3
    ceiling = ceilings.get("fp8" if row["precision"] == "fp8" else "bf16")
    row.update(
        ms_per_batch=round(seconds * 1e3, 3),
        images_per_s=round(images_per_s, 1),
        tflops=round(tflops, 4),
        utilisation=round(tflops / ceiling, 4) if ceiling else None,
        timed_calls=calls,
    )
    return row


def _private_tower(clip):
    import copy
    import types

    twin = copy.copy(clip)
    twin.model = types.SimpleNamespace(visual=copy.deepcopy(clip.model.visual))
    return twin


def compile_timing(model: str, batch: int, precision: str, compile_mode: str, args) -> dict[str, Any]:
    """Compile ``model`` twice, each in a fresh process, the second finding the first's cache."""
    row: dict[str, Any] = {
        "model": model,
        "batch_size": batch,
        "precision": precision,
        "compile_mode": compile_mode,
        "compile_scope": args.compile_scope,
    }
    with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
        for run in ("cold", "warm"):
            with tempfile.TemporaryDirectory() as tmp:
                out = pathlib.Path(tmp) / "row.json"
                command = [
                    sys.executable,
                    __file__,
                    "--models",
                    model,
                    "--backends",
                    "compile",
                    "--batch-sizes",
                    str(batch),
                    "--precision",
                    precision,
                    "--compile-mode",
                    compile_mode,
                    "--compile-scope",
                    args.compile_scope,
                    "--compile-cache",
                    cache,
                    "--seconds",
                    "0.5",
                    "--warmup",
                    "2",
                    "--device",
                    args.device,
                    "--ceiling-tflops",
                    "1",
                    "--out",
                    str(out),
                ]
                start = time.perf_counter()
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.compile_timeout)
                row[f"{run}_process_s"] = round(time.perf_counter() - start, 1)
                if done.returncode != 0 or not out.exists():
                    row[f"{run}_error"] = (done.stderr or done.stdout)[-500:]
                    break
                child = json.loads(out.read_text())["results"][0]
                if "error" in child:
                    row[f"{run}_error"] = child["error"]
                    break
                row[f"{run}_compile_s"] = child["setup_s"]
                row[f"{run}_cache_found"] = child.get("cache_found")
                row["images_per_s"] = child["images_per_s"]
    return row


def print_table(machine: dict[str, Any], header: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{machine['gpu'] or machine['cpu']} | driver {machine['driver']} | torch {machine['versions']['torch']}"
        f" | TensorRT {machine['versions'].get('tensorrt', 'not installed')}"
    )
    ceilings = header["ceilings_tflops"]
    described = ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in ceilings.items() if v) or "none (CPU)"
    print(f"ceilings (measured 8192^3 products unless given): {described}; anchor {ANCHOR_TFLOPS:.0f} TFLOP/s bf16")
    for model, info in header["models"].items():
        published = info["published_gflops"]
        print(
            f"  {model}: {info['gflops_per_image']:.4g} GFLOP/image counted"
            + (f" (open_clip profile {published} G)" if published else "")
            + f", {info['image_size']} px"
        )
    cols = (
        f"{'model':<14}{'backend':<10}{'prec':<17}{'batch':>6}{'img/s':>11}{'ms/batch':>10}{'TFLOP/s':>9}{'util':>7}"
        f"{'setup s':>9}  cache"
    )
    print(cols + "\n" + "-" * len(cols))
    for r in rows:
        prec = r.get("precision", r.get("asked", "?"))
        if r.get("fp8_scaling"):
            prec = (
                "fp8-"
                + {"dynamic-rowwise": "row", "dynamic-tensorwise": "tensor", "static-tensorwise": "static"}[
                    r["fp8_scaling"]
                ]
            )
        if r.get("asked") == "auto":
            prec = f"auto:{prec}"
        if "error" in r:
            print(f"{r['model']:<14}{r['backend']:<10}{prec:<17}{r['batch_size']:>6}  failed: {r['error'][:90]}")
            continue
        util = f"{r['utilisation']:.0%}" if r["utilisation"] is not None else "-"
        cache = {True: "hit", False: "miss"}.get(r.get("cache_found"), "")
        print(
            f"{r['model']:<14}{r['backend']:<10}{prec:<17}{r['batch_size']:>6}{r['images_per_s']:>11,.1f}{r['ms_per_batch']:>10.2f}"
            f"{r['tflops']:>9.3g}{util:>7}{r['setup_s']:>9.1f}  {cache}"
        )


def print_compile_timing(rows: list[dict[str, Any]]) -> None:
    cols = f"{'model':<14}{'prec':<6}{'batch':>6}  {'mode':<27}{'scope':<7}{'cold s':>8}{'warm s':>8}  warm found cache  img/s"
    print("\ncompile time (fresh processes; compile + CUDA graph capture, without Python start-up and model creation)")
    print(cols + "\n" + "-" * len(cols))
    for r in rows:
        if "cold_error" in r or "warm_error" in r:
            print(
                f"{r['model']:<14}{r['precision']:<6}{r['batch_size']:>6}  {r['compile_mode']:<27}{r['compile_scope']:<7}"
                f"  failed: {(r.get('cold_error') or r.get('warm_error'))[-120:]}"
            )
            continue
        print(
            f"{r['model']:<14}{r['precision']:<6}{r['batch_size']:>6}  {r['compile_mode']:<27}{r['compile_scope']:<7}"
            f"{r['cold_compile_s']:>8.1f}{r['warm_compile_s']:>8.1f}  {str(r['warm_cache_found']):<17}{r['images_per_s']:>7,.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument(
        "--backends", nargs="+", default=["torch", "compile", "tensorrt"], choices=[b for b in BACKENDS if b != "auto"]
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, help="for every model (default: per model)")
    parser.add_argument(
        "--precision",
        nargs="+",
        default=["auto"],
        choices=list(PRECISION_NAMES),
        help="one or more: auto (bf16 on GPUs that have it, or FP8 where faster), bf16, fp16, fp32, fp8",
    )
    parser.add_argument(
        "--fp8-scaling",
        nargs="+",
        default=[DEFAULT_FP8_SCALING],
        choices=list(FP8_SCALINGS),
        help=f"FP8's input scaling(s) for fp8 and auto rows (default: {DEFAULT_FP8_SCALING})",
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per configuration")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--compile-mode",
        nargs="+",
        choices=list(COMPILE_MODES),
        help="torch.compile mode(s) for the compile backend (default: the backend's)",
    )
    parser.add_argument("--compile-scope", choices=list(COMPILE_SCOPES), help="default: the backend's (blocks)")
    parser.add_argument(
        "--compile-cache", metavar="DIR", help="compile cache folder, or 'off' (default: the library's)"
    )
    parser.add_argument("--attention", choices=["fused", "open_clip"], help="attention path (default: the backend's)")
    parser.add_argument(
        "--compile-timing",
        action="store_true",
        help="compile each configuration cold and warm in fresh processes (compile backend only)",
    )
    parser.add_argument("--compile-timeout", type=float, default=580, help="seconds per compile-timing process")
    parser.add_argument("--engine-cache-dir", help="TensorRT engine cache (default: the library's)")
    parser.add_argument(
        "--ceiling-tflops", type=float, help="bf16 utilisation reference (default: measured matrix-product rate)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="CPU, the tiny model, torch and compile, small batches (~1 minute)"
    )
    parser.add_argument("--quiet", action="store_true", help="no compile progress")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    from vlmrm_fast.runtime.device import resolve_device

    if args.quick:
        args.models, args.backends, args.device, args.precision = ["vlmrm-tiny"], ["torch", "compile"], "cpu", ["fp32"]
        args.batch_sizes = args.batch_sizes or [8, 32]
        args.seconds, args.warmup = min(args.seconds, 1.0), 3
    device = resolve_device(args.device)
    machine = common.machine()
    modes = args.compile_mode or [None]
    if args.compile_timing:
        args.compile_scope = args.compile_scope or COMPILE_SCOPES[0]
        rows = [
            compile_timing(model, batch, precision, mode or COMPILE_MODES[0], args)
            for model in args.models
            for batch in (args.batch_sizes or DEFAULT_BATCHES.get(model, FALLBACK_BATCHES))
            for precision in args.precision
            for mode in modes
        ]
        print(f"\n{machine['gpu'] or machine['cpu']} | torch {machine['versions']['torch']}")
        print_compile_timing(rows)
        if args.out:
            common.write_json(args.out, {"machine": machine, "compile_timing": rows})
            print(f"\nwrote {args.out}")
        return 0

    backends = list(args.backends)
    if "tensorrt" in backends and (device.type != "cuda" or not tensorrt_available()):
        print(
            f"skipping tensorrt: {'needs a CUDA device' if device.type != 'cuda' else 'not installed (pip install .[tensorrt])'}"
        )
        backends.remove("tensorrt")

    plain = next((p for p in args.precision if p in ("bf16", "fp16", "fp32")), "auto")
    dtype = resolve(plain, device).dtype
    if args.ceiling_tflops:
        ceilings, source = {"bf16": args.ceiling_tflops}, "given"
    else:
        ceilings = {"bf16": common.matmul_ceiling_tflops(device, dtype)}
        source = f"measured, 8192^3 {str(dtype).replace('torch.', '')} matrix product" if ceilings["bf16"] else None
    if "fp8" in args.precision or "auto" in args.precision:
        ceilings["fp8"] = common.fp8_matmul_ceiling_tflops(device)
    header: dict[str, Any] = {
        "ceiling_tflops": ceilings["bf16"],
        "ceiling_source": source,
        "ceilings_tflops": ceilings,
        "anchor_tflops": ANCHOR_TFLOPS,
        "models": {},
    }
    rows = []
    for model in args.models:
        gflops, size = common.model_gflops(model)
        header["models"][model] = {
            "gflops_per_image": round(gflops, 3),
            "published_gflops": PUBLISHED_GFLOPS.get(model),
            "image_size": size,
        }
        clip = load_clip(model, device=torch.device("cpu"))  # each encoder moves a copy of the tower to the device
        batches = args.batch_sizes or DEFAULT_BATCHES.get(model, FALLBACK_BATCHES)
        for backend in sorted(backends, key=RUN_ORDER.index):
            for precision in args.precision:
                if backend == "tensorrt" and precision == "fp8":
                    continue
                scalings = args.fp8_scaling if precision in ("fp8", "auto") and backend != "tensorrt" else [None]
                for mode in modes if backend == "compile" else [None]:
                    for scaling in scalings:
                        for batch in batches:
                            row = bench_one(
                                clip, backend, batch, precision, args, device, gflops, ceilings, mode, scaling
                            )
                            rows.append(row)
                            label = f"{model} {backend} {precision}" + (f" {scaling}" if scaling else "")
                            label += f" b{batch}" + (f" {mode}" if mode else "")
                            print(
                                f"  {label}: " + (row.get("error") or f"{row['images_per_s']:,.1f} img/s"), flush=True
                            )
        del clip
        gc.collect()
    print_table(machine, header, rows)
    if args.out:
        common.write_json(args.out, {"machine": machine, **header, "results": rows})
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
