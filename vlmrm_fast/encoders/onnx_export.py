"""Exports a CLIP image tower to ONNX: the input of TensorRT engine builds.

The graph maps ``pixels`` (N, 3, S, S) to ``embeddings`` (N, D), with N fixed or
a dynamic axis. It is exported with torch's dynamo exporter
(``torch.onnx.export(..., dynamo=True)``): the legacy TorchScript exporter
traces open_clip's ``nn.MultiheadAttention`` into its fused inference kernel
(``aten::_native_multi_head_attention``), which it cannot translate.

Precision lives in the graph, not in builder flags: TensorRT 10.12 deprecated
its weakly typed fp16/bf16 flags and TensorRT 11 removed them, so engines are
built from strongly typed networks. An fp16/bf16 export holds the weights,
matrix products and attention in that type and keeps each LayerNorm in fp32
(a cast in, a cast out), as torch's own kernels accumulate it; for bf16 the
patch-embedding convolution also runs in fp32, because ONNX has no bf16 Conv
before opset 22 (it is ~0.2% of the FLOPs). An fp32 export is the model as is.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from vlmrm_fast.encoders.precision import PRECISIONS

INPUT_NAME = "pixels"
OUTPUT_NAME = "embeddings"
OPSET = 18
# Protobuf files stop at 2 GiB; larger models keep their weights in a side file (``<name>.data``).
_EXTERNAL_DATA_BYTES = 1 << 30


class _Float32LayerNorm(torch.nn.Module):
    """LayerNorm computed in fp32 on a lower-precision stream, output in the input's type."""

    def __init__(self, norm: torch.nn.LayerNorm):
        super().__init__()
        self.normalized_shape = tuple(norm.normalized_shape)
        self.eps = norm.eps
        self.weight = _fp32_parameter(norm.weight)
        self.bias = _fp32_parameter(norm.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.float(), self.normalized_shape, self.weight, self.bias, self.eps).to(x.dtype)


class _Float32Conv2d(torch.nn.Module):
    """A Conv2d computed in fp32, output in the input's type."""

    def __init__(self, conv: torch.nn.Conv2d):
        super().__init__()
        self.conv = copy.deepcopy(conv).float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.float()).to(x.dtype)


def _fp32_parameter(tensor: torch.Tensor | None) -> torch.nn.Parameter | None:
    return None if tensor is None else torch.nn.Parameter(tensor.detach().float().clone(), requires_grad=False)


def export_module(visual: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A CPU copy of ``visual`` in ``dtype`` with LayerNorms (and for bf16 convolutions) in fp32.

    ``visual`` itself is left as it is.
    """
    # Tensors are copied straight to the CPU, so a tower on a GPU is not duplicated there.
    memo = {
        id(p): torch.nn.Parameter(p.detach().to("cpu", copy=True), requires_grad=False) for p in visual.parameters()
    }
    memo.update({id(b): b.detach().to("cpu", copy=True) for b in visual.buffers()})
    module = copy.deepcopy(visual, memo).eval()
    if dtype != torch.float32:
        kinds = (torch.nn.LayerNorm, torch.nn.Conv2d) if dtype == torch.bfloat16 else (torch.nn.LayerNorm,)
        # Wrappers made before the cast keep the weights at full precision.
        wrappers = {
            name: (_Float32LayerNorm if isinstance(m, torch.nn.LayerNorm) else _Float32Conv2d)(m)
            for name, m in module.named_modules()
            if isinstance(m, kinds)
        }
        module.to(dtype)
        for name, wrapper in wrappers.items():
            parent_name, _, child = name.rpartition(".")
            setattr(module.get_submodule(parent_name) if parent_name else module, child, wrapper)
    else:
        module.float()
    return module.requires_grad_(False)


def export_image_tower(
    visual: torch.nn.Module,
    path: str | os.PathLike,
    *,
    image_size: int,
    precision: str = "fp32",
    batch_size: int | None = None,
) -> Path:
    """Writes ``visual`` as ONNX to ``path`` and checks it with ``onnx.checker``.

    ``precision``: "fp32", "fp16" or "bf16" (see the module docstring).
    ``batch_size``: a fixed batch dimension, or None for a dynamic ``batch`` axis.
    Weights go to ``<path>.data`` beside the file when they exceed 1 GiB.
    """
    onnx = _require_onnx()
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is unknown; use one of {sorted(PRECISIONS)}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None (dynamic), got {batch_size!r}")
    dtype = PRECISIONS[precision]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    module = export_module(visual, dtype)
    weight_bytes = sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers()))
    # A dynamic axis needs an example batch above 1: torch.export specializes sizes 0 and 1.
    example = torch.zeros((batch_size or 2, 3, image_size, image_size), dtype=dtype)
    dynamic_shapes = None if batch_size is not None else ({0: torch.export.Dim("batch")},)
    with torch.no_grad():
        torch.onnx.export(
            module,
            (example,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=OPSET,
            dynamo=True,
            dynamic_shapes=dynamic_shapes,
            external_data=weight_bytes > _EXTERNAL_DATA_BYTES,
            verbose=False,
        )
    onnx.checker.check_model(str(path), full_check=True)
    return path


def _require_onnx():
    try:
        import onnx
        import onnxscript  # noqa: F401  (the dynamo exporter needs it)
    except ImportError as exc:
        raise ImportError(
            f"ONNX export needs the onnx and onnxscript packages ({exc}); install them with `pip install .[onnx]`"
        ) from exc
    return onnx
