"""Getting an open_clip image tower ready for a backend: device, dtype, attention path, FP8 (with
its calibration for static scales).

The tower is changed in place (the encoders own it from then on, as they always have: a reward
model embeds its prompts with the text tower before it builds the encoder).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from vlmrm_fast.encoders.attention import fuse_attention
from vlmrm_fast.encoders.fp8 import DEFAULT_FP8_SCALING, STATIC_SCALING, convert_linears_to_fp8, count_fp8_linears
from vlmrm_fast.encoders.precision import Precision

#: "fused": one QKV linear layer + scaled_dot_product_attention (encoders/attention.py);
#: "open_clip": the model's own nn.MultiheadAttention.
ATTENTION_PATHS = ("fused", "open_clip")


def prepare_image_tower(
    visual: nn.Module,
    *,
    device: torch.device,
    precision: Precision,
    attention: str = "open_clip",
    emulate_fp8: bool = False,
    fp8_scaling: str = DEFAULT_FP8_SCALING,
    calibration: Sequence[torch.Tensor] | None = None,
) -> nn.Module:
    """``visual`` on ``device`` in ``precision``, in eval mode without gradients.

    FP8 needs the fused attention (so that the QKV projection is a linear layer it converts) and
    sets it whatever ``attention`` says; its inputs are scaled by ``fp8_scaling``, and
    "static-tensorwise" measures its scales on ``calibration``, batches of bf16 pixels on ``device``
    (:mod:`~vlmrm_fast.encoders.fp8_calibration`). ``emulate_fp8`` allows FP8 on the CPU (numerics only).
    """
    if attention not in ATTENTION_PATHS:
        raise ValueError(f"attention={attention!r} is unknown; use one of {ATTENTION_PATHS}")
    if count_fp8_linears(visual):
        # An earlier encoder converted this tower; weights are FP8 now and cannot be cast back.
        if not precision.fp8:
            raise ValueError(
                f"this image tower was converted to FP8 by an earlier encoder and cannot run in {precision.name}; "
                "load the model again for another precision"
            )
        return visual.to(device=device)
    visual.eval().requires_grad_(False)
    if getattr(visual, "output_tokens", False):
        visual.output_tokens = False  # CoCa's tower also returns its tokens: the encoders take the embedding
    reparameterize(visual)
    visual = visual.to(device=device, dtype=precision.dtype)
    if attention == "fused" or precision.fp8:
        fuse_attention(visual)
    if precision.fp8:
        input_scales = None
        if fp8_scaling == STATIC_SCALING:
            from vlmrm_fast.encoders.fp8_calibration import measure_input_ranges, static_input_scales

            if not calibration:
                raise ValueError(f"fp8_scaling={STATIC_SCALING!r} needs calibration frames (fp8_calibration=)")
            input_scales = static_input_scales(measure_input_ranges(visual, calibration), device=torch.device(device))
        converted = convert_linears_to_fp8(visual, scaling=fp8_scaling, input_scales=input_scales, emulate=emulate_fp8)
        if converted == 0:
            raise ValueError(
                f"precision='fp8': the {type(visual).__name__} image tower has no transformer linear layers that FP8 can "
                "run (a ViT's, with dimensions divisible by 16); use precision='bf16'"
            )
    return visual


def prepare_clip_tower(
    clip: Any,
    *,
    device: torch.device,
    precision: Precision,
    attention: str,
    fp8_scaling: str | None = None,
    fp8_calibration: Any = None,
    emulate_fp8: bool = False,
) -> nn.Module:
    """:func:`prepare_image_tower` for the tower of ``clip`` (a LoadedClip), taking the encoder options
    of FP8: the calibration frames are preprocessed as the model preprocesses frames."""
    fp8_scaling = fp8_scaling or DEFAULT_FP8_SCALING
    calibration = None
    if precision.fp8 and fp8_scaling == STATIC_SCALING and fp8_calibration is not None:
        from vlmrm_fast.encoders.fp8_calibration import calibration_pixels

        calibration = calibration_pixels(fp8_calibration, clip.preprocess, torch.device(device))
    return prepare_image_tower(
        clip.model.visual,
        device=device,
        precision=precision,
        attention=attention,
        emulate_fp8=emulate_fp8,
        fp8_scaling=fp8_scaling,
        calibration=calibration,
    )


def reparameterize(visual: nn.Module) -> int:
    """Folds the training-time branches of reparameterizable blocks (MobileCLIP's FastViT/MCi:
    MobileOne and RepMixer blocks, in fp32) into single convolutions, in place, as the model's
    authors do for inference; returns how many blocks were folded. The embeddings agree with the
    unfolded tower to float precision (tests/test_families.py)."""
    blocks = [m for m in visual.modules() if callable(getattr(m, "reparameterize", None))]
    if not blocks:
        return 0
    from timm.utils.model import reparameterize_model  # the towers that have such blocks are timm's

    reparameterize_model(visual, inplace=True)
    return len(blocks)
