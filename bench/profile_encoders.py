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
Precision per ``--precision`` (bf16, fp8).

    python bench/profile_encoders.py --models ViT-L-14 ViT-bigG-14 --batch-size 256 --out bench/out/profile.json
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

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.encoders import make_image_encoder  # noqa: E402
from vlmrm_fast.models import RandomWeightsWarning, load_clip  # noqa: E402

warnings.filterwarnings("ignore", category=RandomWeightsWarning)

VARIANTS = ("eager", "eager-fused", "compiled")
#: First match wins: kernel (or CPU op) name patterns per category.
CATEGORIES: list[tuple[str, re.Pattern]] = [
    ("attention", re.compile(r"flash|fmha|attention|sdpa|softmax", re.I)),
    ("fp8 quantize", re.compile(r"float8|fp8_quant|amax|reciprocal|_to_copy|quantize", re.I)),
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


def categorize(name: str) -> str:
    # Inductor's pointwise/reduction kernels name the aten ops they fused ("triton_poi_fused_addmm_gelu"
    # is the bias + GELU after a cuBLAS product); only its templates ("triton_tem_") are matrix products.
    fused = name.startswith(("triton_poi", "triton_per", "triton_red"))
    return next(
        (category for category, pattern in CATEGORIES if not (fused and category == "matmul") and pattern.search(name)),
        "other elementwise",
    )


def summarize_trace(trace: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Kernel time by category and the GPU's busy fraction from a Chrome trace of GPU kernels."""
    kernels = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel" and "dur" in e]
    by_category: dict[str, float] = {}
    by_kernel: dict[str, float] = {}
    intervals = []
    for e in kernels:
        us = float(e["dur"])
        by_category[categorize(e["name"])] = by_category.get(categorize(e["name"]), 0.0) + us
        by_kernel[e["name"]] = by_kernel.get(e["name"], 0.0) + us
        intervals.append((float(e["ts"]), float(e["ts"]) + us))
    busy = 0.0
    end = float("-inf")
    for a, b in sorted(intervals):  # union of kernel intervals
        if b > end:
            busy += b - max(a, end)
            end = b
    total = sum(by_category.values()) or 1.0
    return {
        "kernels": len(kernels),
        "gpu_busy": round(busy / 1e6 / wall_s, 4) if wall_s > 0 else None,
        "share": {k: round(v / total, 4) for k, v in sorted(by_category.items(), key=lambda kv: -kv[1])},
        "top": [(k[:100], round(v / total, 4)) for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1])[:8]],
    }


def summarize_cpu(profiler) -> dict[str, Any]:
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
    return {
        "kernels": None,
        "gpu_busy": None,
        "share": {k: round(v / total, 4) for k, v in sorted(by_category.items(), key=lambda kv: -kv[1])},
        "top": [(k, round(v / total, 4)) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]],
    }


def make_variant(model: str, variant: str, precision: str, batch: int, device: torch.device, quiet: bool):
    clip = load_clip(model, device=torch.device("cpu"))
    if variant == "compiled":
        encoder = make_image_encoder(
            clip, "compile", device=device, precision=precision, batch_size=batch, progress=not quiet
        )
        return encoder, encoder._compiled, encoder  # the compiled tower itself, outside its CUDA graph
    attention = "fused" if variant == "eager-fused" else "open_clip"
    encoder = make_image_encoder(clip, "torch", device=device, precision=precision, attention=attention)
    return encoder, encoder.visual, None


def profile_one(model: str, variant: str, precision: str, batch: int, device: torch.device, args) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    row: dict[str, Any] = {"model": model, "variant": variant, "precision": precision, "batch_size": batch}
    try:
        encoder, run, graphed = make_variant(model, variant, precision, batch, device, args.quiet)
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
            path = pathlib.Path(args.trace_dir or tmp) / f"{model}_{variant}_{precision}_b{batch}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(path))
            row.update(summarize_trace(json.loads(path.read_text()), wall))
            if args.trace_dir:
                row["trace"] = str(path)
    else:
        row.update(summarize_cpu(prof))
    encoder.close()
    torch._dynamo.reset()
    if cuda:
        torch.cuda.empty_cache()
    return row


def print_rows(rows: list[dict[str, Any]]) -> None:
    categories = ["matmul", "attention", "layer norm", "gelu", "fp8 quantize", "copy", "other elementwise"]
    head = f"{'model':<13}{'variant':<12}{'prec':<5}{'batch':>6}{'ms':>9}{'graph ms':>9}{'busy':>6}" + "".join(
        f"{c[:9]:>10}" for c in categories
    )
    print(head + "\n" + "-" * len(head))
    for r in rows:
        if "error" in r:
            print(
                f"{r['model']:<13}{r['variant']:<12}{r['precision']:<5}{r['batch_size']:>6}  failed: {r['error'][:100]}"
            )
            continue
        busy = f"{r['gpu_busy']:.0%}" if r.get("gpu_busy") is not None else "-"
        graph = f"{r['graph_ms_per_batch']:.2f}" if r.get("graph_ms_per_batch") else "-"
        shares = "".join(f"{r['share'].get(c, 0):>10.1%}" for c in categories)
        print(
            f"{r['model']:<13}{r['variant']:<12}{r['precision']:<5}{r['batch_size']:>6}{r['ms_per_batch']:>9.2f}{graph:>9}{busy:>6}{shares}"
        )
    for r in rows:
        if "top" in r:
            print(f"\n{r['model']} {r['variant']} {r['precision']}: top kernels (share of kernel time)")
            for name, share in r["top"]:
                print(f"  {share:6.1%}  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["ViT-L-14", "ViT-bigG-14"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--precision", nargs="+", default=["bf16"], choices=["bf16", "fp16", "fp32", "fp8"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--trace-dir", help="keep the Chrome traces here")
    parser.add_argument("--quick", action="store_true", help="CPU, the tiny model, batch 8")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    from vlmrm_fast.device import resolve_device

    if args.quick:
        args.models, args.device, args.precision, args.batch_size, args.calls = ["vlmrm-tiny"], "cpu", ["fp32"], 8, 3
    device = resolve_device(args.device)
    machine = common.machine()
    rows = []
    for model in args.models:
        for precision in args.precision:
            for variant in args.variants:
                row = profile_one(model, variant, precision, args.batch_size, device, args)
                rows.append(row)
                print(
                    f"  {model} {variant} {precision}: " + (row.get("error") or f"{row['ms_per_batch']:.2f} ms/batch"),
                    flush=True,
                )
    print(f"\n{machine['gpu'] or machine['cpu']} | torch {machine['versions']['torch']}")
    print_rows(rows)
    if args.out:
        common.write_json(args.out, {"machine": machine, "results": rows})
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
