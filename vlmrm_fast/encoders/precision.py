"""Which precision an image tower runs in: ``precision="auto" | "fp32" | "fp16" | "bf16" | "fp8"``.
The one place that turns a precision name into what runs (:func:`resolve`).

- ``"fp32"``: the CPU's (and "auto" there).
- ``"bf16"``/``"fp16"``: weights and activations in that type (GPUs).
- ``"fp8"``: the transformer's linear layers in FP8 e4m3 (:mod:`vlmrm_fast.encoders.fp8`, which
  also says how their inputs are scaled: ``fp8_scaling``), everything else, and the encoder's input,
  bf16. Needs an sm_89+ GPU and torchao.
- ``"auto"``: on the CPU fp32. On a GPU bf16 (fp16 where bf16 is missing), or FP8 when all of these hold:

  - the backend compiles the tower (the encoder factory then passes ``fp8_pays``). Compiled, inductor fuses FP8's
    input quantization into the op before each linear layer; eager FP8 runs it as separate
    kernels with fp32 intermediates, and ran ViT-L-14 at 0.45x bf16 on an H100 (2026-11-26);
  - the batch size is fixed, and FP8 can run here;
  - the tower's first transformer block, compiled as the backend compiles it, runs at least
    :data:`AUTO_FP8_MIN_SPEEDUP` times faster in FP8 than in bf16 at that batch size on this GPU
    (:func:`~vlmrm_fast.encoders.fp8_speed.compiled_block_speedup`: both blocks replayed as CUDA
    graphs; measured once per GPU, tower shape, batch size, FP8 scaling and compile mode in a
    process, a few seconds the first time, the compiled code then cached on disk).

  Measuring the block rather than its matrix products is what keeps "auto" from picking a slower
  FP8: on an H100 ViT-L-14's FP8 products ran 1.64x bf16 but the compiled FP8 tower only 1.135x,
  and small towers (ViT-B-32: products at 0.82x) lose outright. The block holds all of a tower's
  work but the patch embedding and the final projection, which FP8 leaves in bf16.

FP8 changes the embeddings slightly more than bf16 does; ``vlmrm-fast check-precision MODEL``
reports by how much for a model's real weights. Ask for ``precision="bf16"`` to rule FP8 out.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import torch
from torch import nn

logger = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PRECISION_NAMES = ("auto", *PRECISIONS, "fp8")
#: "auto" takes FP8 only for at least this speed-up of the compiled block: a margin over the
#: noise of timing CUDA-graph replays, so that a tie stays bf16.
AUTO_FP8_MIN_SPEEDUP = 1.05


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
    fp8_pays: Callable[[], bool] | None = None,
) -> Precision:
    """``precision`` for ``device`` (see the module docstring).

    For "auto" on a GPU with bf16: ``fp8_pays`` says whether FP8 is worth taking for the tower as its
    backend will run it (:func:`~vlmrm_fast.encoders.fp8_speed.auto_prefers_fp8`, which the encoder
    factory passes for a compiling backend with a fixed batch); None: "auto" stays off FP8.
    """
    check_precision_name(precision)
    device = torch.device(device)
    if precision == "fp8":
        from vlmrm_fast.encoders.fp8 import require_fp8

        require_fp8(device)
        return named_precision("fp8")
    if precision == "auto":
        if device.type != "cuda":
            return named_precision("fp32")
        if not torch.cuda.is_bf16_supported():
            return named_precision("fp16")
        if fp8_pays is not None and fp8_pays():
            return named_precision("fp8")
        return named_precision("bf16")
    if device.type == "cpu" and precision != "fp32":
        raise ValueError(
            f"precision={precision!r} on the CPU is not supported; use 'fp32' (or 'auto'), in a training "
            "config reward.precision (configs/paper pins the paper's fp16, for GPUs)"
        )
    return named_precision(precision)


def tower_tokens(visual: nn.Module) -> int | None:
    """Tokens per image of an open_clip VisionTransformer (patches + class token), None for other towers."""
    grid = getattr(visual, "grid_size", None)
    if grid is None or getattr(getattr(visual, "transformer", None), "resblocks", None) is None:
        return None
    return int(grid[0]) * int(grid[1]) + 1
