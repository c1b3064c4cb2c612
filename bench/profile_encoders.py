"""Where an image tower's GPU time goes: a torch.profiler trace per tower and variant, summarized.

For each model and variant the tower runs ``--calls`` batches under torch.profiler after warm-up.
The summary gives the wall time per batch, how much of it the GPU was busy (the union of kernel
intervals; the rest is launch gaps and host work) and how the kernel time splits into matrix
products, attention, layer norms, GELU, FP8 quantization, copies and other elementwise kernels,
with the top kernels by time. Comparing ViT-L-14 with ViT-bigG-14 shows where L-14 loses
utilisation: its width (1024 against 1664) makes every memory-bound kernel relatively more
expensive against the matrix products (per token a block does 24 w^2 FLOPs but moves O(w) bytes).

Variants: ``eager`` (open_clip's nn.MultiheadAttention, torch's fused fast path), ``eager-fused``
(our QKV linear + scaled_dot_product_attention), ``compiled`` (the compile backend's tower, run
without its CUDA graph so that kernels show one by one; ``graph ms`` gives the replay time).
Precision per ``--precision`` (bf16, fp8); FP8 runs once per ``--fp8-scaling`` (default: all:
dynamic-rowwise, dynamic-tensorwise, static-tensorwise, the last calibrated on random frames:
timing needs a scale, not the right one).

Where FP8's time goes. Kernels are attributed by the op that launched them where the trace says
(a kernel's "External id" is its op's): everything ``aten::_scaled_mm`` launches is "fp8 matmul",
whichever library's kernel it is (CUTLASS's row-wise kernel, cuBLAS(Lt)'s; the top kernels name
it). The input quantization is "fp8 quantize" when it runs in kernels of its own (eager: abs,
amax, divide, clamp, the cast to e4m3; compiled: a Triton kernel of only those ops) and "fused
quantize" when inductor fused it into a layer norm, GELU or residual kernel. Each row gives every
category's milliseconds per batch, and a table sets each FP8 row against the bf16 row of its
model and variant: what the products gained, what quantizing added, what else moved.

``--kernels`` adds the linear layers alone, per distinct shape of the tower at the batch size:
the bf16 product, the FP8 products alone (row-wise and tensor-wise ``_scaled_mm``, inputs
quantized beforehand) and the eager quantization each way
(:func:`vlmrm_fast.encoders.fp8_speed.fp8_kernel_times`). ``--block-probe`` adds what
``precision="auto"`` measures: the compiled first block, bf16 against FP8, per scaling
(:func:`~vlmrm_fast.encoders.fp8_speed.compiled_block_speedup`).

    python bench/profile_encoders.py --models ViT-L-14 ViT-bigG-14 --batch-size 256 --out bench/out/profile.json
    python bench/profile_encoders.py --models ViT-L-14 --precision bf16 fp8 --variants compiled --kernels --block-probe
    python bench/profile_encoders.py --quick     # CPU, tiny model: op categories from CPU self time

Chrome traces go to ``--trace-dir`` when given (open in chrome://tracing or Perfetto).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.encoders import make_image_encoder  # noqa: E402
from vlmrm_fast.encoders.fp8 import FP8_SCALINGS, STATIC_SCALING  # noqa: E402
from vlmrm_fast.models import RandomWeightsWarning
from vlmrm_fast.models.clip import load_clip  # noqa: E402

warnings.filterwarnings("ignore", category=RandomWeightsWarning)

VARIANTS = ("eager", "eager-fused", "compiled")
CATEGORY_ORDER = (
    "matmul",
    "fp8 matmul",
    "attention",
    "layer norm",
    "gelu",
    "fp8 quantize",
    "fused quantize",
    "copy",
    "other elementwise",
)
#: Kernel names of FP8 products, for kernels whose launching op the trace does not give.
FP8_MATMUL = re.compile(r"e4m3|e5m2|f8f8|scaled_mm", re.I)
#: What quantizing an input to e4m3 is made of: eager kernels (abs, amax's max-reduction, divide,
#: clamp, the cast into Float8_e4m3fn) or the names inductor gives the kernels it fuses them into.
QUANTIZE = re.compile(r"float8|e4m3|fp8_quant|quantize|amax|MaxOps|abs_kernel|clamp|div_true|reciprocal", re.I)
#: The work a fused quantization kernel may also do: a layer norm, a GELU, a residual add.
FUSED_WITH = re.compile(r"layer_norm|gelu|erf|_add(_|$)")
#: First match wins: kernel (or CPU op) name patterns of the other categories.
CATEGORIES: list[tuple[str, re.Pattern]] = [
    ("attention", re.compile(r"flash|fmha|attention|sdpa|softmax", re.I)),
    (
        "matmul",
        re.compile(
            r"gemm|cutlass|xmma|nvjet|cublas|sm\d+_.*mma|matmul|addmm|\bmm\b|aten::mm|bmm|scaled_mm|f8f8|conv", re.I
        ),
    ),
    ("layer norm", re.compile(r"layer_norm|layernorm", re.I)),
    ("gelu", re.compile(r"gelu|erf", re.I)),
    ("copy", re.compile(r"copy|clone|contiguous|cat|transpose|permute", re.I)),
]


def categorize(name: str, op: str | None = None) -> str:
    """The category of a kernel (or CPU op) ``name`` launched by the op ``op`` (when known)."""
    if op == "aten::_scaled_mm":
        return "fp8 matmul"
    # Inductor's pointwise/reduction kernels name the aten ops they fused ("triton_poi_fused_addmm_gelu"
    # is the bias + GELU after a cuBLAS product); only its templates ("triton_tem_") are matrix products.
    fused = name.startswith(("triton_poi", "triton_per", "triton_red"))
    if QUANTIZE.search(name) and not (op or "").startswith("aten::_scaled"):
        if fused and FUSED_WITH.search(name):
            return "fused quantize"
        if fused or not re.search(r"gemm|flash|fmha", name, re.I):
            return "fp8 quantize"
    if not fused and FP8_MATMUL.search(name) and re.search(r"gemm|cutlass|xmma|nvjet|scaled_mm|f8f8", name, re.I):
        return "fp8 matmul"
    return next(
        (category for category, pattern in CATEGORIES if not (fused and category == "matmul") and pattern.search(name)),
        "other elementwise",
    )


def summarize_trace(trace: dict[str, Any], wall_s: float, calls: int = 1) -> dict[str, Any]:
    """Kernel time by category (share, and ms per call over ``calls`` calls) and the GPU's busy
    fraction from a Chrome trace of GPU kernels."""
    events = trace.get("traceEvents", [])
    ops = {
        e["args"]["External id"]: e["name"]
        for e in events
        if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})
    }
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    by_category: dict[str, float] = {}
    by_kernel: dict[str, float] = {}
    intervals = []
    for e in kernels:
        us = float(e["dur"])
        category = categorize(e["name"], ops.get(e.get("args", {}).get("External id")))
        by_category[category] = by_category.get(category, 0.0) + us
        by_kernel[e["name"]] = by_kernel.get(e["name"], 0.0) + us
        intervals.append((float(e["ts"]), float(e["ts"]) + us))
    busy = 0.0
    end = float("-inf")
    for a, b in sorted(intervals):  # union of kernel intervals
        if b > end:
            busy += b - max(a, end)
            end = b
    total = sum(by_category.values()) or 1.0
    ordered = sorted(by_category.items(), key=lambda kv: -kv[1])
    return {
        "kernels": len(kernels),
        "gpu_busy": round(busy / 1e6 / wall_s, 4) if wall_s > 0 else None,
        "share": {k: round(v / total, 4) for k, v in ordered},
        "ms": {k: round(v / 1e3 / calls, 4) for k, v in ordered},
        "top": [(k[:100], round(v / total, 4)) for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1])[:8]],
    }


def summarize_cpu(profiler, calls: int = 1) -> dict[str, Any]:
    """On a CPU: self time of the aten ops by category."""
    by_category: dict[str, float] = {}
    by_op: dict[str, float] = {}
    for item in profiler.key_averages():
        if not item.key.startswith("aten::"):
            continue
        us = float(item.self_cpu_time_total)
        by_category[categorize(item.key)] = by_category.get(categorize(item.key), 0.0) + us
        by_op[item.key] = by_op.get(item.key, 0.0) + us
    total = sum(by_category.values()) or 1.0
    ordered = sorted(by_category.items(), key=lambda kv: -kv[1])
    return {
        "kernels": None,
        "gpu_busy": None,
        "share": {k: round(v / total, 4) for k, v in ordered},
        "ms": {k: round(v / 1e3 / calls, 4) for k, v in ordered},
        "top": [(k, round(v / total, 4)) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]],
    }


def fp8_options(precision: str, scaling: str | None, image_size: int) -> dict[str, Any]:
    """The encoder options of an FP8 row: its scaling, and random frames to calibrate static scales on."""
    if precision != "fp8":
        return {}
    options: dict[str, Any] = {"fp8_scaling": scaling}
    if scaling == STATIC_SCALING:
        rng = np.random.default_rng(0)
        options["fp8_calibration"] = rng.integers(0, 256, size=(32, image_size, image_size, 3), dtype=np.uint8)
    return options


def make_variant(
    model: str, variant: str, precision: str, batch: int, device: torch.device, quiet: bool, scaling: str | None = None
):
    clip = load_clip(model, device=torch.device("cpu"))
    options = fp8_options(precision, scaling, clip.preprocess.size)
    if variant == "compiled":
        encoder = make_image_encoder(
            clip, "compile", device=device, precision=precision, batch_size=batch, progress=not quiet, **options
        )
        return encoder, encoder._compiled, encoder  # the compiled tower itself, outside its CUDA graph
    attention = "fused" if variant == "eager-fused" else "open_clip"
    encoder = make_image_encoder(clip, "torch", device=device, precision=precision, attention=attention, **options)
    return encoder, encoder.visual, None


def profile_one(
    model: str, variant: str, precision: str, batch: int, device: torch.device, args, scaling: str | None = None
) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    row: dict[str, Any] = {
        "model": model,
        "variant": variant,
        "precision": precision,
        "fp8_scaling": scaling,
        "batch_size": batch,
    }
    try:
        encoder, run, graphed = make_variant(model, variant, precision, batch, device, args.quiet, scaling)
    except Exception as exc:  # noqa: BLE001 - FP8 on a GPU without it, out of memory: report and go on
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        return row
    size = encoder.image_size
    x = torch.randn((batch, 3, size, size), device=device).clamp_(-2, 2).to(encoder.input_dtype)
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    with torch.inference_mode():
        for _ in range(args.warmup):
            run(x)
        sync()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(args.calls):
                run(x)
            sync()
            wall = time.perf_counter() - start
        row["ms_per_batch"] = round(wall / args.calls * 1e3, 3)
        if graphed is not None and cuda:
            graphed(graphed.input_buffer())
            sync()
            start = time.perf_counter()
            for _ in range(args.calls):
                graphed(graphed.input_buffer())
            sync()
            row["graph_ms_per_batch"] = round((time.perf_counter() - start) / args.calls * 1e3, 3)
    if cuda:
        with tempfile.TemporaryDirectory() as tmp:
            label = f"{precision}-{scaling}" if scaling else precision
            path = pathlib.Path(args.trace_dir or tmp) / f"{model}_{variant}_{label}_b{batch}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(path))
            row.update(summarize_trace(json.loads(path.read_text()), wall, args.calls))
            if args.trace_dir:
                row["trace"] = str(path)
    else:
        row.update(summarize_cpu(prof, args.calls))
    encoder.close()
    torch._dynamo.reset()
    if cuda:
        torch.cuda.empty_cache()
    return row


def label(row: dict[str, Any]) -> str:
    return f"fp8 {row['fp8_scaling']}" if row.get("fp8_scaling") else row["precision"]


def print_rows(rows: list[dict[str, Any]]) -> None:
    head = f"{'model':<13}{'variant':<12}{'precision':<23}{'batch':>6}{'ms':>9}{'graph ms':>9}{'busy':>6}" + "".join(
        f"{c[:10]:>11}" for c in CATEGORY_ORDER
    )
    print("share of kernel time per category\n" + head + "\n" + "-" * len(head))
    for r in rows:
        start = f"{r['model']:<13}{r['variant']:<12}{label(r):<23}{r['batch_size']:>6}"
        if "error" in r:
            print(f"{start}  failed: {r['error'][:100]}")
            continue
        busy = f"{r['gpu_busy']:.0%}" if r.get("gpu_busy") is not None else "-"
        graph = f"{r['graph_ms_per_batch']:.2f}" if r.get("graph_ms_per_batch") else "-"
        shares = "".join(f"{r['share'].get(c, 0):>11.1%}" for c in CATEGORY_ORDER)
        print(f"{start}{r['ms_per_batch']:>9.2f}{graph:>9}{busy:>6}{shares}")
    print_fp8_against_bf16(rows)
    for r in rows:
        if "top" in r:
            print(f"\n{r['model']} {r['variant']} {label(r)}: top kernels (share of kernel time)")
            for name, share in r["top"]:
                print(f"  {share:6.1%}  {name}")


def fp8_against_bf16(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each FP8 row, its kernel milliseconds per batch by category and the bf16 row's (same
    model, variant and batch), with the differences."""
    bf16 = {(r["model"], r["variant"], r["batch_size"]): r for r in rows if r["precision"] == "bf16" and "ms" in r}
    out = []
    for r in rows:
        base = bf16.get((r["model"], r["variant"], r["batch_size"]))
        if r["precision"] != "fp8" or "ms" not in r or base is None:
            continue
        delta = {c: round(r["ms"].get(c, 0.0) - base["ms"].get(c, 0.0), 4) for c in CATEGORY_ORDER}
        out.append(
            {
                "model": r["model"],
                "variant": r["variant"],
                "fp8_scaling": r["fp8_scaling"],
                "batch_size": r["batch_size"],
                "bf16_ms": base["ms"],
                "fp8_ms": r["ms"],
                "delta_ms": delta,
                "speedup": round(base["ms_per_batch"] / r["ms_per_batch"], 3),
                "graph_speedup": round(base["graph_ms_per_batch"] / r["graph_ms_per_batch"], 3)
                if base.get("graph_ms_per_batch") and r.get("graph_ms_per_batch")
                else None,
            }
        )
    return out


def print_fp8_against_bf16(rows: list[dict[str, Any]]) -> None:
    compared = fp8_against_bf16(rows)
    if not compared:
        return
    head = f"{'model':<13}{'variant':<12}{'fp8 scaling':<20}{'x bf16':>7}{'graph x':>8}" + "".join(
        f"{c[:10]:>11}" for c in CATEGORY_ORDER
    )
    print("\nFP8 against bf16: kernel ms per batch, FP8 minus bf16 (negative: FP8 saves it)\n" + head)
    print("-" * len(head))
    for c in compared:
        graph = f"{c['graph_speedup']:.3f}" if c["graph_speedup"] else "-"
        cells = "".join(f"{c['delta_ms'][k]:>+11.2f}" for k in CATEGORY_ORDER)
        print(f"{c['model']:<13}{c['variant']:<12}{c['fp8_scaling']:<20}{c['speedup']:>7.3f}{graph:>8}{cells}")


def kernel_rows(model: str, batch: int, device: torch.device) -> dict[str, Any]:
    """The tower's linear layers alone at ``batch`` (fp8_speed.fp8_kernel_times), summed over the
    tower: ms per batch of each kernel, and the products' speed-ups."""
    from vlmrm_fast.encoders.fp8_speed import KERNELS, fp8_kernel_times, linear_shapes
    from vlmrm_fast.encoders.precision import tower_tokens

    visual = load_clip(model, device=torch.device("cpu")).model.visual
    shapes = linear_shapes(visual, tower_tokens(visual), batch)
    per_shape = fp8_kernel_times(shapes, device)
    total = {name: round(sum(r[name] * r["count"] for r in per_shape) * 1e3, 3) for name in KERNELS}
    return {
        "model": model,
        "batch_size": batch,
        "tower_ms": total,
        "shapes": [{**r, **{k: round(r[k] * 1e3, 4) for k in KERNELS}} for r in per_shape],
        "rowwise_mm_x_bf16": round(total["bf16 linear"] / total["fp8 mm rowwise"], 3),
        "tensorwise_mm_x_bf16": round(total["bf16 linear"] / total["fp8 mm tensorwise"], 3),
    }


def print_kernels(rows: list[dict[str, Any]]) -> None:
    from vlmrm_fast.encoders.fp8_speed import KERNELS

    for r in rows:
        print(f"\n{r['model']} b{r['batch_size']}: linear layers alone, ms per batch (all blocks)")
        print("  " + "".join(f"{k:>20}" for k in ("(M, K, N) x count", *KERNELS)))
        for s in r["shapes"]:
            print(
                "  "
                + f"{str(tuple(s['shape'])) + ' x' + str(s['count']):>20}"
                + "".join(f"{s[k] * s['count']:>20.3f}" for k in KERNELS)
            )
        print("  " + f"{'tower':>20}" + "".join(f"{r['tower_ms'][k]:>20.3f}" for k in KERNELS))
        print(
            f"  products alone: row-wise {r['rowwise_mm_x_bf16']:.3f}x bf16, tensor-wise {r['tensorwise_mm_x_bf16']:.3f}x bf16"
        )


def block_probe_rows(model: str, batch: int, device: torch.device, scalings: list[str]) -> list[dict[str, Any]]:
    """What precision="auto" measures (fp8_speed.compiled_block_speedup) for each scaling."""
    from vlmrm_fast.encoders.fp8_speed import compiled_block_speedup
    from vlmrm_fast.encoders.precision import AUTO_FP8_MIN_SPEEDUP

    visual = load_clip(model, device=torch.device("cpu")).model.visual
    rows = []
    for scaling in scalings:
        row: dict[str, Any] = {"model": model, "batch_size": batch, "fp8_scaling": scaling}
        try:
            row["block_speedup"] = round(compiled_block_speedup(visual, device, batch, fp8_scaling=scaling), 3)
            row["auto_picks"] = "fp8" if row["block_speedup"] >= AUTO_FP8_MIN_SPEEDUP else "bf16"
        except Exception as exc:  # noqa: BLE001 - report and go on
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
        print(f"  block probe {model} b{batch} {scaling}: " + (row.get("error") or f"{row['block_speedup']:.3f}x bf16"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["ViT-L-14", "ViT-bigG-14"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--precision", nargs="+", default=["bf16"], choices=["bf16", "fp16", "fp32", "fp8"])
    parser.add_argument(
        "--fp8-scaling", nargs="+", default=list(FP8_SCALINGS), choices=list(FP8_SCALINGS), help="default: all"
    )
    parser.add_argument("--kernels", action="store_true", help="also time the linear layers alone (GPU)")
    parser.add_argument(
        "--block-probe", action="store_true", help="also run what precision='auto' measures, per scaling (GPU)"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--trace-dir", help="keep the Chrome traces here")
    parser.add_argument("--quick", action="store_true", help="CPU, the tiny model, batch 8")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    from vlmrm_fast.runtime.device import resolve_device

    if args.quick:
        args.models, args.device, args.precision, args.batch_size, args.calls = ["vlmrm-tiny"], "cpu", ["fp32"], 8, 3
    device = resolve_device(args.device)
    machine = common.machine()
    rows, kernels, probes = [], [], []
    for model in args.models:
        for precision in args.precision:
            for scaling in args.fp8_scaling if precision == "fp8" else [None]:
                for variant in args.variants:
                    row = profile_one(model, variant, precision, args.batch_size, device, args, scaling)
                    rows.append(row)
                    print(
                        f"  {model} {variant} {label(row)}: "
                        + (row.get("error") or f"{row['ms_per_batch']:.2f} ms/batch"),
                        flush=True,
                    )
        if args.kernels and device.type == "cuda":
            kernels.append(kernel_rows(model, args.batch_size, device))
        if args.block_probe and device.type == "cuda":
            probes += block_probe_rows(model, args.batch_size, device, args.fp8_scaling)
    print(f"\n{machine['gpu'] or machine['cpu']} | torch {machine['versions']['torch']}")
    print_rows(rows)
    print_kernels(kernels)
    for p in probes:
        if "error" not in p:
            print(
                f"block probe {p['model']} b{p['batch_size']} {p['fp8_scaling']}: {p['block_speedup']:.3f}x bf16, "
                f"auto picks {p['auto_picks']}"
            )
    if args.out:
        common.write_json(
            args.out,
            {
                "machine": machine,
                "results": rows,
                "fp8_against_bf16": fp8_against_bf16(rows),
                "kernels": kernels,
                "block_probe": probes,
            },
        )
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
