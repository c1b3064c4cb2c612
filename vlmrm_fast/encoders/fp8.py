"""FP8 (e4m3) linear layers for the image tower, through torchao's float8 inference.

Each ``nn.Linear`` of the transformer blocks (QKV and output projections after
:func:`~vlmrm_fast.encoders.attention.fuse_attention`, the two MLP layers) gets its weight
quantized once to float8_e4m3fn with one scale per output channel; at every call its input is
quantized with one scale per row (token), and the product runs in ``torch._scaled_mm`` with bf16
output. Scales are amax / 448 (e4m3's largest finite value), computed in bf16 as torchao does. Attention
itself (scaled_dot_product_attention), layer norms, the patch embedding and the final projection
stay bf16.

FP8 matrix products need an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper,
Blackwell); elsewhere :func:`require_fp8` says so. torch's CPU kernel for ``_scaled_mm`` computes
the same e4m3 products (accumulating in fp32), which :func:`convert_linears_to_fp8` uses with
``emulate=True``: the tests and ``vlmrm-fast check-precision --emulate-fp8`` see FP8's numerics on
a CPU, never its speed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator

import torch
from torch import nn

#: The first compute capability with FP8 tensor cores (Ada Lovelace, sm_89).
FP8_MIN_CAPABILITY = (8, 9)
#: torch._scaled_mm wants both matrix dimensions of a weight divisible by 16.
FP8_DIM_MULTIPLE = 16
INSTALL_HINT = "pip install torchao (or the package's extra: pip install .[fp8])"


class FP8UnavailableError(RuntimeError):
    """FP8 was asked for where it cannot run; the message says why and what to use instead."""


@functools.lru_cache(maxsize=1)
def _import_torchao():
    # torchao registers pytree constants at import, which current torch logs as a deprecation
    # warning meant for torchao's developers; keep it out of the user's terminal.
    pytree_log = logging.getLogger("torch.utils._pytree")
    level = pytree_log.level
    pytree_log.setLevel(logging.ERROR)
    try:
        import torchao.quantization as quantization
    finally:
        pytree_log.setLevel(level)
    return quantization


def _torchao_version() -> str:
    import torchao

    return getattr(torchao, "__version__", "(unknown version)")


def torchao_available() -> bool:
    try:
        _import_torchao()
    except ImportError:
        return False
    return True


def fp8_unsupported_reason(device: torch.device | str) -> str | None:
    """Why FP8 cannot run on ``device``, or None when it can."""
    device = torch.device(device)
    need = f"FP8 needs an NVIDIA GPU with compute capability {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or newer (sm_89+: Ada, Hopper, Blackwell)"
    if device.type != "cuda":
        return f"{need}; this device is {device.type.upper() if device.type == 'cpu' else device}"
    if not torch.cuda.is_available():
        from vlmrm_fast.device import no_gpu_reason

        return f"{need}; {no_gpu_reason()}"
    capability = torch.cuda.get_device_capability(device)
    if tuple(capability) < FP8_MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        return f"{need}; {name} is sm_{capability[0]}{capability[1]}"
    if not torchao_available():
        return f"FP8 runs through torchao, which is not installed: {INSTALL_HINT}"
    return None


def require_fp8(device: torch.device | str) -> None:
    """Raises :class:`FP8UnavailableError` naming the way out when FP8 cannot run on ``device``."""
    reason = fp8_unsupported_reason(device)
    if reason:
        raise FP8UnavailableError(
            f"precision='fp8': {reason}. Use precision='bf16' (or 'auto', which picks what runs here)."
        )


def fp8_compatible(linear: nn.Linear) -> bool:
    out_features, in_features = linear.weight.shape
    return out_features % FP8_DIM_MULTIPLE == 0 and in_features % FP8_DIM_MULTIPLE == 0


def transformer_linears(visual: nn.Module) -> list[tuple[str, nn.Linear]]:
    """The ``nn.Linear`` layers of the tower's transformer blocks, by qualified name."""
    blocks = getattr(getattr(visual, "transformer", None), "resblocks", None)
    if blocks is None:
        return []
    prefix = "transformer.resblocks."
    return [(prefix + name, m) for name, m in blocks.named_modules() if isinstance(m, nn.Linear)]


def convert_linears_to_fp8(visual: nn.Module, *, emulate: bool = False) -> int:
    """Quantizes, in place, the weights of the tower's transformer linear layers to FP8 (see the
    module docstring); returns how many layers were converted.

    The tower must already be bf16 on its device. Layers whose dimensions are not multiples of 16
    stay bf16. ``emulate=True`` allows a CPU (numerics only; see the module docstring).
    """
    device = next(visual.parameters()).device
    if device.type == "cuda" or not emulate:
        require_fp8(device)
    elif not torchao_available():
        raise FP8UnavailableError(f"FP8 emulation runs through torchao, which is not installed: {INSTALL_HINT}")
    targets = {id(m) for _, m in transformer_linears(visual) if fp8_compatible(m)}
    bad = [name for name, m in transformer_linears(visual) if id(m) in targets and m.weight.dtype != torch.bfloat16]
    if bad:
        raise TypeError(f"FP8 conversion expects a bf16 tower; {bad[0]} is {next(visual.parameters()).dtype}")
    if not targets:
        return 0
    ao = _import_torchao()
    config = ao.Float8DynamicActivationFloat8WeightConfig(
        granularity=ao.PerRow(),
        set_inductor_config=False,  # torchao's recommended inductor settings add autotuning (compile time)
    )
    with _hardware_check_lifted() if device.type != "cuda" else contextlib.nullcontext():
        ao.quantize_(visual, config, filter_fn=lambda module, fqn: id(module) in targets)
    return len(targets)


@contextlib.contextmanager
def _hardware_check_lifted() -> Iterator[None]:
    """torchao refuses to quantize where it cannot run the fast kernels; for CPU emulation only."""
    import torchao.quantization.quant_api as quant_api

    if not hasattr(quant_api, "_check_hardware_support"):
        raise FP8UnavailableError(
            f"torchao {_torchao_version()} cannot be made to quantize on a CPU; "
            "FP8 emulation is unavailable (FP8 on an sm_89+ GPU is not affected)"
        )
    original = quant_api._check_hardware_support
    quant_api._check_hardware_support = lambda granularity: None
    try:
        yield
    finally:
        quant_api._check_hardware_support = original


def count_fp8_linears(visual: nn.Module) -> int:
    """How many of the tower's linear layers hold FP8 weights."""
    return sum(1 for _, m in transformer_linears(visual) if getattr(m.weight, "qdata", None) is not None)


# ----------------------------------------------------------------------------- speed probe


def quantize_rowwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values, fp32 scales (rows, 1)) with x ~= values * scales, one scale per row."""
    fmax = torch.finfo(torch.float8_e4m3fn).max
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_(min=1e-12) / fmax
    return (x.float() / scale).clamp_(-fmax, fmax).to(torch.float8_e4m3fn), scale


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


def fp8_matmul_speedup(
    shapes: list[tuple[int, int, int]],
    device: torch.device,
    *,
    timer: Callable[[Callable[[], None]], float] | None = None,
) -> float:
    """bf16 time / FP8 time of the given linear layers on ``device`` (> 1: FP8 is faster).

    Each distinct shape is timed once and weighted by how often it occurs. The FP8 side pays the
    row-wise quantization of its input as an eager kernel, which a compiled tower fuses into the
    preceding op, so the figure understates FP8's gain slightly.
    """
    timer = timer or functools.partial(_cuda_seconds, device=device)
    counts: dict[tuple[int, int, int], int] = {}
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
    bf16_total = fp8_total = 0.0
    for (m, k, n), count in counts.items():
        x = torch.randn((m, k), device=device, dtype=torch.bfloat16)
        w = torch.randn((n, k), device=device, dtype=torch.bfloat16)
        w8, w_scale = quantize_rowwise(w)
        w8_t, w_scale_t = w8.t(), w_scale.t()

        def bf16(x: torch.Tensor = x, w: torch.Tensor = w) -> None:
            torch.nn.functional.linear(x, w)

        def fp8(x: torch.Tensor = x, w8_t: torch.Tensor = w8_t, w_scale_t: torch.Tensor = w_scale_t) -> None:
            _fp8_linear(x, w8_t, w_scale_t)

        bf16_total += count * timer(bf16)
        fp8_total += count * timer(fp8)
        del x, w, w8, w8_t, bf16, fp8  # the next shape's tensors may need the memory
    return bf16_total / fp8_total


def _fp8_linear(x: torch.Tensor, w8_t: torch.Tensor, w_scale_t: torch.Tensor) -> None:
    x8, x_scale = quantize_rowwise(x)  # the input's quantization counts: it runs at every call
    torch._scaled_mm(x8, w8_t, scale_a=x_scale, scale_b=w_scale_t, out_dtype=torch.bfloat16, use_fast_accum=True)


def _cuda_seconds(fn: Callable[[], None], device: torch.device, repeats: int = 10) -> float:
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
