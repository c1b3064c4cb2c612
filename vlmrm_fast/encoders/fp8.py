"""FP8 (e4m3) linear layers for the image tower, through torchao's float8 inference.

Each ``nn.Linear`` of the transformer blocks (QKV and output projections after
:func:`~vlmrm_fast.encoders.attention.fuse_attention`, the two MLP layers) gets its weight
quantized once to float8_e4m3fn; its input is quantized at every call, and the product runs in
``torch._scaled_mm`` with bf16 output. Attention itself (scaled_dot_product_attention), layer
norms, the patch embedding and the final projection stay bf16. How the input is scaled is the
option ``fp8_scaling`` (torchao's names: dynamic or static activation scales, ``PerRow`` or
``PerTensor`` granularity):

- ``"dynamic-rowwise"`` (default): one scale per row (token) of the input, amax / 448 computed at
  every call, and one per output channel of the weight; torchao's
  ``Float8DynamicActivationFloat8WeightConfig(PerRow())``. The product is a row-wise scaled
  ``_scaled_mm`` (CUTLASS's kernel or cuBLASLt's, depending on the torch build:
  ``bench/profile_encoders.py`` names it). Each call first reduces every row (amax), then casts.
- ``"dynamic-tensorwise"``: one scale for the whole input, amax / 448 at every call, one for the
  weight; ``Float8DynamicActivationFloat8WeightConfig(PerTensor())``. A tensor-wise ``_scaled_mm``
  (cuBLAS); the amax is a reduction over the whole activation before the cast can start.
- ``"static-tensorwise"``: one scale for the input fixed ahead of time from calibration frames
  (:mod:`vlmrm_fast.encoders.fp8_calibration`), one for the weight; torchao's
  ``Float8StaticActivationFloat8WeightConfig(act_quant_scale=..., granularity=PerTensor())``
  (torchao 0.18 keeps it in ``torchao.prototype.quantization``, exported from
  ``torchao.quantization``). Quantizing the input is then an elementwise divide, clamp and cast,
  which inductor fuses into the op before it (the layer norm, the GELU): no reduction and no bf16
  copy of the input in memory. Inputs beyond the calibrated range saturate (see
  :mod:`~vlmrm_fast.encoders.fp8_calibration` for the margin).

Scales are amax / 448, e4m3's largest finite value. e4m3 is a floating-point format, so a
per-tensor scale loses no relative precision for values within its 2^15 range (a per-row one
only helps rows whose largest values are far below the tensor's); what it costs on a model's
weights ``vlmrm-fast check-precision`` measures.

FP8 matrix products need an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper,
Blackwell); elsewhere :func:`require_fp8` says so. torch's CPU kernel for ``_scaled_mm`` computes
the same e4m3 products (accumulating in fp32), for row-wise and tensor-wise scales, which
:func:`convert_linears_to_fp8` uses with ``emulate=True``: the tests and ``vlmrm-fast
check-precision --emulate-fp8`` see FP8's numerics on a CPU, never its speed. How fast FP8 runs
is measured by :mod:`vlmrm_fast.encoders.fp8_speed`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

#: The first compute capability with FP8 tensor cores (Ada Lovelace, sm_89).
FP8_MIN_CAPABILITY = (8, 9)
#: torch._scaled_mm wants both matrix dimensions of a weight divisible by 16.
FP8_DIM_MULTIPLE = 16
INSTALL_HINT = "pip install torchao (or the package's extra: pip install .[fp8])"
#: How each FP8 linear layer's input is scaled (the module docstring); the option ``fp8_scaling``.
FP8_SCALINGS = ("dynamic-rowwise", "dynamic-tensorwise", "static-tensorwise")
DEFAULT_FP8_SCALING = "dynamic-rowwise"
STATIC_SCALING = "static-tensorwise"
#: The encoder options of FP8, taken by the backends that run it: ``fp8_calibration`` is the frames
#: that "static-tensorwise" measures its scales on (:mod:`vlmrm_fast.encoders.fp8_calibration`).
FP8_OPTIONS = ("fp8_scaling", "fp8_calibration")


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
        from vlmrm_fast.runtime.device import no_gpu_reason

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


def check_fp8_scaling(scaling: str) -> str:
    if scaling not in FP8_SCALINGS:
        raise ValueError(f"fp8_scaling={scaling!r} is unknown; use one of {', '.join(map(repr, FP8_SCALINGS))}")
    return scaling


def check_fp8_options(precision: str, options: Mapping[str, Any]) -> None:
    """Refuses FP8 options that cannot apply: an unknown ``fp8_scaling``, "static-tensorwise" without
    ``fp8_calibration`` frames (or frames for another scaling), or either option with a precision
    that never runs FP8 ("auto" may pick FP8, so it takes them)."""
    given = [name for name in FP8_OPTIONS if options.get(name) is not None]
    if not given:
        return
    if precision not in ("fp8", "auto"):
        raise ValueError(
            f"{' and '.join(given)} apply to precision='fp8' (or 'auto', which may pick it), not precision={precision!r}"
        )
    scaling = check_fp8_scaling(options.get("fp8_scaling") or DEFAULT_FP8_SCALING)
    calibrated = options.get("fp8_calibration") is not None
    if scaling == STATIC_SCALING and not calibrated:
        raise ValueError(
            f"fp8_scaling={STATIC_SCALING!r} fixes each layer's input scale from calibration frames: pass "
            "fp8_calibration=FRAMES (uint8 (N, H, W, 3), or a .npz or folder of them, e.g. from "
            "`vlmrm-fast dataset sample TASK -n 64 -o frames.npz`)"
        )
    if calibrated and scaling != STATIC_SCALING:
        raise ValueError(
            f"fp8_calibration is for fp8_scaling={STATIC_SCALING!r}; fp8_scaling={scaling!r} scales at every call"
        )


def convert_linears_to_fp8(
    visual: nn.Module,
    *,
    scaling: str = DEFAULT_FP8_SCALING,
    input_scales: Mapping[str, torch.Tensor] | None = None,
    emulate: bool = False,
) -> int:
    """Quantizes, in place, the weights of the tower's transformer linear layers to FP8, their inputs
    scaled by ``scaling`` (see the module docstring); returns how many layers were converted.

    ``input_scales`` ("static-tensorwise" only): each layer's input scale by qualified name, an fp32
    tensor of one element with the input's number of dimensions
    (:func:`~vlmrm_fast.encoders.fp8_calibration.static_input_scales`). The tower must already be
    bf16 on its device. Layers whose dimensions are not multiples of 16 stay bf16. ``emulate=True``
    allows a CPU (numerics only; see the module docstring).
    """
    check_fp8_scaling(scaling)
    device = next(visual.parameters()).device
    if device.type == "cuda" or not emulate:
        require_fp8(device)
    elif not torchao_available():
        raise FP8UnavailableError(f"FP8 emulation runs through torchao, which is not installed: {INSTALL_HINT}")
    targets = {name: m for name, m in transformer_linears(visual) if fp8_compatible(m)}
    bad = [name for name, m in targets.items() if m.weight.dtype != torch.bfloat16]
    if bad:
        raise TypeError(f"FP8 conversion expects a bf16 tower; {bad[0]} is {next(visual.parameters()).dtype}")
    static = scaling == STATIC_SCALING
    if static:
        missing = [name for name in targets if input_scales is None or name not in input_scales]
        if missing:
            raise ValueError(f"fp8_scaling={scaling!r} needs an input scale for every layer; {missing[0]} has none")
    elif input_scales is not None:
        raise ValueError(f"input_scales are for fp8_scaling={STATIC_SCALING!r}, not {scaling!r}")
    if not targets:
        return 0
    ao = _import_torchao()
    # set_inductor_config=False: torchao's recommended inductor settings add autotuning (compile time).
    with _hardware_check_lifted() if device.type != "cuda" else contextlib.nullcontext():
        if static:
            assert input_scales is not None
            for name, module in targets.items():
                config = ao.Float8StaticActivationFloat8WeightConfig(
                    act_quant_scale=input_scales[name], granularity=ao.PerTensor(), set_inductor_config=False
                )
                # filter_fn: torchao's default filter skips subclasses of nn.Linear (MultiheadAttention's out_proj)
                ao.quantize_(module, config, filter_fn=lambda m, fqn, module=module: m is module)
        else:
            granularity = ao.PerRow() if scaling == "dynamic-rowwise" else ao.PerTensor()
            config = ao.Float8DynamicActivationFloat8WeightConfig(granularity=granularity, set_inductor_config=False)
            chosen = {id(m) for m in targets.values()}
            ao.quantize_(visual, config, filter_fn=lambda module, fqn: id(module) in chosen)
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
