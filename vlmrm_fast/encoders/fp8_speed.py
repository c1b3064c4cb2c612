"""How fast FP8 runs on this GPU: the measurements behind ``precision="auto"`` and the FP8 profile.

- :func:`compiled_block_speedup`: what "auto" decides by (:mod:`vlmrm_fast.encoders.precision`).
  The tower's first transformer block, copied, compiled as the compile backend compiles its blocks,
  once in bf16 and once in FP8 with the given scaling, each timed as a CUDA-graph replay on one
  batch of random activations. It measures the code that will run: the quantization as inductor
  fuses it, attention, layer norms, GELU and the products, without the launch gaps a graph removes.
- :func:`fp8_kernel_times`: the linear layers alone, for ``bench/profile_encoders.py``: each product
  in bf16 and in FP8 (row-wise or tensor-wise scaled ``_scaled_mm``), and the eager quantization
  kernels, so that a profile separates what the products gain from what quantizing costs.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from vlmrm_fast.encoders.fp8 import DEFAULT_FP8_SCALING, STATIC_SCALING, check_fp8_scaling, convert_linears_to_fp8

#: e4m3's largest finite value.
E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)

Timer = Callable[[Callable[[], Any]], float]


# ----------------------------------------------------------------------------- the compiled block


class _OneBlockTower(nn.Module):
    """One transformer block in the place where the tower's helpers look for blocks
    (``transformer.resblocks``), so that attention fusion, FP8 conversion, calibration and
    compilation treat it as they treat a tower."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.resblocks = nn.ModuleList([block])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transformer.resblocks[0](x)


def block_signature(visual: nn.Module) -> tuple:
    """What a block's speed depends on besides the batch size and the tokens per image: its type,
    its linear layers' shapes and its attention heads."""
    block = visual.transformer.resblocks[0]
    shapes = tuple((m.in_features, m.out_features) for m in block.modules() if isinstance(m, nn.Linear))
    mha = next((m for m in block.modules() if isinstance(m, nn.MultiheadAttention)), None)
    heads = getattr(getattr(block, "attn", None), "num_heads", None) or getattr(mha, "num_heads", None)
    return (type(block).__name__, shapes, heads)


def compiled_block_speedup(
    visual: nn.Module,
    device: torch.device,
    batch_size: int,
    *,
    fp8_scaling: str = DEFAULT_FP8_SCALING,
    compile_mode: str | None = None,
    compile_cache: Any = True,
    timer: Timer | None = None,
) -> float:
    """bf16 time / FP8 time of ``visual``'s first transformer block at ``batch_size`` images on
    ``device`` (> 1: FP8 is faster), each compiled as the compile backend compiles a block
    (``compile_mode``, its on-disk cache ``compile_cache``) and timed by ``timer`` (default: CUDA-graph
    replays). Static scales ("static-tensorwise") are calibrated on the random input: timing needs
    a scale, not the right one.

    ``visual`` is not changed. On a CPU the FP8 block is emulated (for tests: its time means
    nothing there). The compiled blocks land in the compile cache, so the tower's own compile
    later finds the block it is given.
    """
    from vlmrm_fast.encoders import compiled
    from vlmrm_fast.encoders.attention import fuse_attention
    from vlmrm_fast.encoders.compile_cache import resolve_compile_cache
    from vlmrm_fast.encoders.fp8_calibration import measure_input_ranges, static_input_scales
    from vlmrm_fast.encoders.precision import tower_tokens

    check_fp8_scaling(fp8_scaling)
    device = torch.device(device)
    timer = timer or functools.partial(graph_seconds, device=device)
    tokens = tower_tokens(visual)
    if tokens is None:
        raise ValueError(f"{type(visual).__name__} is not a transformer tower with a known number of tokens")
    width = visual.transformer.width
    shape = (
        (batch_size, tokens, width) if getattr(visual.transformer, "batch_first", True) else (tokens, batch_size, width)
    )
    x = torch.randn(shape, device=device, dtype=torch.bfloat16)
    mode = compile_mode or compiled.DEFAULT_COMPILE_MODE
    times = []
    for fp8 in (False, True):
        block = copy.deepcopy(visual.transformer.resblocks[0]).eval().requires_grad_(False)
        tower = _OneBlockTower(block).to(device=device, dtype=torch.bfloat16)
        fuse_attention(tower)
        if fp8:
            scales = None
            if fp8_scaling == STATIC_SCALING:
                scales = static_input_scales(measure_input_ranges(tower, [x]), device=device)
            convert_linears_to_fp8(tower, scaling=fp8_scaling, input_scales=scales, emulate=device.type != "cuda")
        with compiled.compiling(resolve_compile_cache(compile_cache)):
            run = compiled.compile_tower(tower, mode, "blocks")
            times.append(timer(functools.partial(run, x)))
        del block, tower, run
    return times[0] / times[1]


def graph_seconds(run: Callable[[], Any], device: torch.device, repeats: int = 10, replays: int = 3) -> float:
    """Seconds per call of ``run`` on ``device``, timed as replays of a CUDA graph of ``repeats`` calls
    (warmed up, compiled code included, on a side stream first, as capture requires)."""
    with torch.cuda.device(device):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(repeats):
                run()
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / (replays * repeats)
        del graph
        return seconds


# ----------------------------------------------------------------------------- the products alone


def quantize_rowwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values, fp32 scales (rows, 1)) with x ~= values * scales, one scale per row."""
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_(min=1e-12) / E4M3_MAX
    return (x.float() / scale).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def quantize_tensorwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values, an fp32 scale of one element) with x ~= values * scale."""
    scale = x.abs().amax().float().clamp_(min=1e-12) / E4M3_MAX
    return (x.float() / scale).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def quantize_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """e4m3 values of x / scale, ``scale`` fixed ahead of time (saturating at +-448)."""
    return (x.float() / scale).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def linear_shapes(visual: nn.Module, tokens: int, batch_size: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of every transformer linear layer for one batch: M rows, K inputs, N outputs.

    Counts the QKV projection of an unfused ``nn.MultiheadAttention`` (a bare parameter there) too.
    """
    rows = batch_size * tokens
    blocks = getattr(getattr(visual, "transformer", None), "resblocks", None)
    shapes = []
    for module in blocks.modules() if blocks is not None else ():
        if isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            shapes.append((rows, module.embed_dim, 3 * module.embed_dim))
        elif isinstance(module, nn.Linear):
            shapes.append((rows, module.in_features, module.out_features))
    return shapes


#: The kernels :func:`fp8_kernel_times` times per shape, in its columns' order.
KERNELS = (
    "bf16 linear",
    "fp8 mm rowwise",
    "fp8 mm tensorwise",
    "quantize rowwise",
    "quantize tensorwise",
    "quantize static",
)


def fp8_kernel_times(
    shapes: list[tuple[int, int, int]], device: torch.device, *, timer: Timer | None = None
) -> list[dict[str, Any]]:
    """Per distinct (M, K, N): how often it occurs and the seconds of each of :data:`KERNELS`: the bf16
    product (with bias), the FP8 products alone (inputs quantized beforehand, bias and bf16 output
    as torchao runs them) scaled row-wise and tensor-wise, and the eager quantization of the (M, K)
    input each way (dynamic ones: amax, then divide, clamp and cast; static: divide, clamp, cast)."""
    timer = timer or functools.partial(cuda_seconds, device=device)
    rows = []
    for (m, k, n), count in _counted(shapes).items():
        runs = _kernel_runs(m, k, n, device)
        rows.append({"shape": (m, k, n), "count": count, **{name: timer(runs[name]) for name in KERNELS}})
        del runs  # the next shape's tensors may need the memory
    return rows


def _kernel_runs(m: int, k: int, n: int, device: torch.device) -> dict[str, Callable[[], Any]]:
    x = torch.randn((m, k), device=device, dtype=torch.bfloat16)
    w = torch.randn((n, k), device=device, dtype=torch.bfloat16)
    bias = torch.randn((n,), device=device, dtype=torch.bfloat16)
    x8r, xsr = quantize_rowwise(x)
    w8r, wsr = quantize_rowwise(w)
    x8t, xst = quantize_tensorwise(x)
    w8t, wst = quantize_tensorwise(w)
    fp8: dict[str, Any] = dict(bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    return {
        "bf16 linear": lambda: torch.nn.functional.linear(x, w, bias),
        "fp8 mm rowwise": lambda: torch._scaled_mm(x8r, w8r.t(), scale_a=xsr, scale_b=wsr.t(), **fp8),
        "fp8 mm tensorwise": lambda: torch._scaled_mm(x8t, w8t.t(), scale_a=xst, scale_b=wst, **fp8),
        "quantize rowwise": lambda: quantize_rowwise(x),
        "quantize tensorwise": lambda: quantize_tensorwise(x),
        "quantize static": lambda: quantize_static(x, xst),
    }


def _counted(shapes: list[tuple[int, int, int]]) -> dict[tuple[int, int, int], int]:
    counts: dict[tuple[int, int, int], int] = {}
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
    return counts


def cuda_seconds(fn: Callable[[], Any], device: torch.device, repeats: int = 10) -> float:
    """Seconds per call of ``fn`` on ``device``: CUDA events around ``repeats`` calls after warm-up."""
    with torch.cuda.device(device):
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / repeats


#: Speed-ups measured in this process, by GPU, tower shape, batch size, FP8 scaling and compile mode.
logger = logging.getLogger(__name__)
_MEASURED: dict[tuple, float] = {}


def auto_prefers_fp8(
    visual: nn.Module,
    device: torch.device,
    batch_size: int,
    *,
    compile_options: Mapping[str, Any] | None = None,
    fp8_scaling: str | None = None,
) -> bool:
    """Whether ``precision="auto"`` takes FP8 for this tower, compiled with ``compile_options`` (the
    compile backend's; None: its defaults), at ``batch_size`` on ``device``."""
    from vlmrm_fast.encoders.build_progress import note, stage
    from vlmrm_fast.encoders.fp8 import fp8_compatible, fp8_unsupported_reason, transformer_linears
    from vlmrm_fast.encoders.precision import AUTO_FP8_MIN_SPEEDUP, tower_tokens

    if fp8_unsupported_reason(device) is not None:
        return False
    tokens = tower_tokens(visual)
    linears = [m for _, m in transformer_linears(visual)]
    if tokens is None or not linears or not all(fp8_compatible(m) for m in linears):
        return False
    scaling = fp8_scaling or DEFAULT_FP8_SCALING
    options = dict(compile_options or {})
    key = (
        torch.cuda.get_device_name(device),
        device.index,
        block_signature(visual),
        tokens,
        batch_size,
        scaling,
        options.get("compile_mode"),
    )
    if key not in _MEASURED:
        try:
            with stage(
                f"precision='auto': timing the first transformer block compiled in bf16 and in FP8 ({scaling}) "
                f"at batch {batch_size}",
                bool(options.get("progress", True)),
            ):
                _MEASURED[key] = compiled_block_speedup(
                    visual,
                    device,
                    batch_size,
                    fp8_scaling=scaling,
                    compile_mode=options.get("compile_mode"),
                    compile_cache=options.get("compile_cache", True),
                )
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # e.g. no FP8 kernel for a shape here
            logger.warning("precision='auto': could not time the FP8 block (%s); using bf16", exc)
            _MEASURED[key] = 0.0
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    speedup = _MEASURED[key]
    chosen = speedup >= AUTO_FP8_MIN_SPEEDUP
    message = (
        f"precision='auto': the compiled transformer block ran {speedup:.2f}x bf16 in FP8 ({scaling}) at batch "
        f"{batch_size}; using {'fp8' if chosen else 'bf16'}"
    )
    logger.info(message)
    note(message, bool(options.get("progress", True)))
    return chosen
