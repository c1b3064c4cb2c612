"""FP8 (e4m3) linear layers for a judge, through torchao's float8 inference, as the CLIP towers' FP8
(``vlmrm_fast.encoders.fp8``): weights quantized per output channel, inputs scaled per row at each call.

Every linear layer of the vision tower and the language model whose dimensions are multiples of 16 is
converted; the output head (``lm_head``, one position per frame) and the embeddings stay bf16.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from vlmrm_fast.encoders import fp8


def fp8_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """The linear layers FP8 converts, by qualified name."""
    return {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not name.endswith("lm_head") and fp8.fp8_compatible(module)
    }


def convert_judge_to_fp8(model: nn.Module, *, emulate: bool = False) -> int:
    """Quantizes, in place, a bf16 judge's linear layers (:func:`fp8_linears`) to FP8; returns how many.
    ``emulate=True`` allows a CPU (numerics only)."""
    device = next(model.parameters()).device
    if device.type == "cuda" or not emulate:
        fp8.require_fp8(device)
    targets = fp8_linears(model)
    if any(m.weight.dtype != torch.bfloat16 for m in targets.values()):
        raise TypeError("FP8 conversion expects a bf16 judge")
    if not targets:
        return 0
    ao = fp8._import_torchao()
    config = ao.Float8DynamicActivationFloat8WeightConfig(granularity=ao.PerRow(), set_inductor_config=False)
    chosen = {id(m) for m in targets.values()}
    with fp8._hardware_check_lifted() if device.type != "cuda" else contextlib.nullcontext():
        ao.quantize_(model, config, filter_fn=lambda module, fqn: id(module) in chosen)
    return len(targets)
