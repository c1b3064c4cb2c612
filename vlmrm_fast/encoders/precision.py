"""Which precision an image tower runs in: ``precision="auto" | "fp32" | "fp16" | "bf16" | "fp8"``.

- ``"fp32"``: the CPU's (and "auto" there).
- ``"bf16"``/``"fp16"``: weights and activations in that type (GPUs).
- ``"fp8"``: the transformer's linear layers in FP8 e4m3 (:mod:`vlmrm_fast.encoders.fp8`),
  everything else, and the encoder's input, bf16. Needs an sm_89+ GPU and torchao.
- ``"auto"``: on the CPU fp32. On a GPU bf16 (fp16 where bf16 is missing), or FP8 when the batch
  size is fixed, FP8 can run, and the tower's own linear-layer shapes at that batch size run at
  least :data:`AUTO_FP8_MIN_SPEEDUP` times faster in FP8 than in bf16 on this GPU. That is measured
  once per GPU, model shape and batch size in a process (well under a second; see
  :func:`~vlmrm_fast.encoders.fp8.fp8_matmul_speedup`). Small towers stay bf16 (at ViT-B-32's
  shapes FP8 products ran at 0.82x of bf16 on an H100, 2026-11-22); large ones at large batches
  get FP8 (1.61x at ViT-L-14's MLP shapes, 1.80x at ViT-bigG-14's).

FP8 changes the embeddings slightly more than bf16 does; ``vlmrm-fast check-precision MODEL``
reports by how much for a model's real weights. Ask for ``precision="bf16"`` to rule FP8 out.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import torch
from torch import nn

from vlmrm_fast.encoders.base import PRECISIONS, resolve_precision

logger = logging.getLogger(__name__)

PRECISION_NAMES = ("auto", *PRECISIONS, "fp8")
#: "auto" takes FP8 only for at least this speed-up of the tower's linear layers.
AUTO_FP8_MIN_SPEEDUP = 1.15


@dataclasses.dataclass(frozen=True)
class Precision:
    """A resolved precision: ``name`` ("fp32", "fp16", "bf16", "fp8") and ``dtype``, the type of the
    activations and of the encoder's input (bf16 for FP8)."""

    name: str
    dtype: torch.dtype

    @property
    def fp8(self) -> bool:
        return self.name == "fp8"


def check_precision_name(precision: str) -> None:
    if precision not in PRECISION_NAMES:
        raise ValueError(f"precision {precision!r} is unknown; use one of {', '.join(map(repr, PRECISION_NAMES))}")


def named_precision(precision: str) -> Precision:
    """The precision of an explicit name ("fp32", "fp16", "bf16", "fp8"), whatever the device."""
    if precision == "fp8":
        return Precision("fp8", torch.bfloat16)
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(map(repr, [*PRECISIONS, 'fp8']))}")
    return Precision(precision, PRECISIONS[precision])


def resolve(
    precision: str,
    device: torch.device,
    *,
    visual: nn.Module | None = None,
    batch_size: int | None = None,
) -> Precision:
    """``precision`` for ``device``; "auto" may measure FP8 against bf16 for ``visual`` at ``batch_size``."""
    check_precision_name(precision)
    device = torch.device(device)
    if precision == "fp8":
        from vlmrm_fast.encoders.fp8 import require_fp8

        require_fp8(device)
        return named_precision("fp8")
    dtype = resolve_precision(precision, device)
    name = next(n for n, d in PRECISIONS.items() if d == dtype)
    if precision == "auto" and dtype == torch.bfloat16 and visual is not None and batch_size is not None:
        if auto_prefers_fp8(visual, device, batch_size):
            return named_precision("fp8")
    return Precision(name, dtype)


def tower_tokens(visual: nn.Module) -> int | None:
    """Tokens per image of an open_clip VisionTransformer (patches + class token), None for other towers."""
    grid = getattr(visual, "grid_size", None)
    if grid is None or getattr(getattr(visual, "transformer", None), "resblocks", None) is None:
        return None
    return int(grid[0]) * int(grid[1]) + 1


def auto_prefers_fp8(visual: nn.Module, device: torch.device, batch_size: int) -> bool:
    """Whether ``precision="auto"`` takes FP8 for this tower and batch size on ``device``."""
    from vlmrm_fast.encoders.fp8 import fp8_compatible, fp8_unsupported_reason, linear_shapes, transformer_linears

    if fp8_unsupported_reason(device) is not None:
        return False
    tokens = tower_tokens(visual)
    linears = [m for _, m in transformer_linears(visual)]
    if tokens is None or not linears or not all(fp8_compatible(m) for m in linears):
        return False
    shapes = linear_shapes(visual, tokens, batch_size)
    speedup = _measured_speedup(torch.cuda.get_device_name(device), device.index, tuple(shapes))
    chosen = speedup >= AUTO_FP8_MIN_SPEEDUP
    logger.info(
        "precision='auto': FP8 linear layers ran %.2fx bf16 at batch %d; using %s",
        speedup,
        batch_size,
        "fp8" if chosen else "bf16",
    )
    return chosen


@functools.lru_cache(maxsize=64)
def _measured_speedup(gpu_name: str, index: int | None, shapes: tuple[tuple[int, int, int], ...]) -> float:
    from vlmrm_fast.encoders.fp8 import fp8_matmul_speedup

    device = torch.device("cuda", index if index is not None else torch.cuda.current_device())
    try:
        return fp8_matmul_speedup(list(shapes), device)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # e.g. no row-wise FP8 kernel for this GPU
        logger.warning("precision='auto': could not time FP8 products (%s); using bf16", exc)
        return 0.0
    finally:
        torch.cuda.empty_cache()
