"""CLIP image-tower backends behind one option: ``backend="torch" | "compile" | "tensorrt" | "auto"``.

- ``"torch"``: eager PyTorch, any batch size (bf16/fp16/FP8 on the GPU, fp32 on the CPU).
- ``"compile"``: torch.compile for one fixed ``batch_size``, replayed as a CUDA graph on the GPU;
  compiled code is cached on disk for later processes (:mod:`.compiled`, :mod:`.compile_cache`).
- ``"tensorrt"``: a TensorRT engine for one fixed ``batch_size``, built from an ONNX export and
  cached on disk (``pip install .[tensorrt]``). bf16/fp16/fp32 only.
- ``"auto"``: on CUDA, TensorRT when it is installed and a batch size is fixed (and FP8 is not
  chosen), else compile when a batch size is fixed, else torch; on the CPU, torch.

Precisions (:mod:`.precision`): ``"auto"``, ``"fp32"``, ``"fp16"``, ``"bf16"`` and ``"fp8"`` (the
transformer's linear layers in FP8 on sm_89+ GPUs, :mod:`.fp8`). All backends return raw
(unnormalized) embeddings of the same model within the precision's tolerance.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from vlmrm_fast.checks import positive_int
from vlmrm_fast.encoders.base import ImageEncoder
from vlmrm_fast.encoders.precision import PRECISION_NAMES, Precision, check_precision_name, resolve
from vlmrm_fast.encoders.torch_eager import TorchImageEncoder

BACKENDS = ("auto", "torch", "compile", "tensorrt")
FIXED_BATCH_BACKENDS = ("compile", "tensorrt")
#: Options each backend takes beside device, precision and batch_size; "auto" takes them all
#: and passes each to the backend it picks when that backend takes it.
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "torch": ("attention",),
    "compile": ("compile_mode", "compile_scope", "compile_cache", "attention", "progress"),
    "tensorrt": ("engine_cache_dir", "workspace_gib", "rebuild_engine", "progress"),
}
#: The attention path each backend takes unless told (see encoders/attention.py): eager keeps
#: open_clip's own module (torch's fused fast path), compile gets the fused QKV + SDPA rewrite.
DEFAULT_ATTENTION = {"torch": "open_clip", "compile": "fused"}


def choose_backend(device: torch.device, batch_size: int | None, precision: str = "auto") -> str:
    """What ``backend="auto"`` picks on ``device`` (``precision``: the resolved name, e.g. "fp8")."""
    from vlmrm_fast.encoders.tensorrt_engine import tensorrt_available

    if torch.device(device).type != "cuda" or batch_size is None:
        return "torch"
    return "tensorrt" if precision != "fp8" and tensorrt_available() else "compile"


def make_image_encoder(
    clip: Any,
    backend: str = "auto",
    *,
    device: torch.device,
    precision: str = "auto",
    batch_size: int | None = None,
    **options: Any,
) -> ImageEncoder:
    """An encoder for ``clip`` (a :class:`~vlmrm_fast.models.LoadedClip`).

    ``batch_size`` is required by the fixed-batch backends ("compile", "tensorrt"); "torch"
    runs any batch. Options: ``compile_mode``, ``compile_scope``, ``compile_cache`` ("compile");
    ``attention`` ("torch", "compile": "fused" or "open_clip"); ``engine_cache_dir``,
    ``workspace_gib``, ``rebuild_engine`` ("tensorrt"); ``progress`` (compile, tensorrt).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is unknown; use one of {BACKENDS}")
    batch_size = positive_int(batch_size, "batch_size", allow_none=True)
    device = torch.device(device)
    _check_options(backend, options)
    check_precision_name(precision)
    if backend == "tensorrt" and precision == "fp8":
        raise ValueError(
            "precision='fp8' runs through backend='torch' or 'compile' (torchao); the TensorRT backend "
            "builds bf16, fp16 or fp32 engines"
        )
    # TensorRT builds no FP8 engines: "auto" need not time FP8 for it.
    resolved = resolve(
        precision, device, visual=clip.model.visual if backend != "tensorrt" else None, batch_size=batch_size
    )
    if backend != "auto":
        return _make(clip, backend, device, resolved, batch_size, options)

    chosen = choose_backend(device, batch_size, resolved.name)
    if chosen == "tensorrt":
        try:
            return _make(clip, "tensorrt", device, resolved, batch_size, options)
        except Exception as exc:  # auto means the best that works here; say why TensorRT did not
            warnings.warn(
                f"backend='auto': TensorRT failed ({type(exc).__name__}: {exc}); using backend='compile'", stacklevel=2
            )
            chosen = "compile"
    return _make(clip, chosen, device, resolved, batch_size, options)


def _check_options(backend: str, options: dict[str, Any]) -> None:
    if backend == "auto":
        allowed = tuple(sorted({o for opts in BACKEND_OPTIONS.values() for o in opts}))
    else:
        allowed = BACKEND_OPTIONS[backend]
    unknown = sorted(set(options) - set(allowed))
    if not unknown:
        return
    owners = {name: [b for b, opts in BACKEND_OPTIONS.items() if name in opts] for name in unknown}
    hints = "; ".join(
        f"{name!r} belongs to backend {' / '.join(map(repr, owners[name]))}"
        if owners[name]
        else f"{name!r} is no encoder option"
        for name in unknown
    )
    raise TypeError(
        f"unexpected encoder option(s) for backend={backend!r}: {hints}. Options of {backend!r}: {list(allowed) or 'none'}"
    )


def _make(
    clip: Any, backend: str, device: torch.device, precision: Precision, batch_size: int | None, options: dict[str, Any]
) -> ImageEncoder:
    options = {k: v for k, v in options.items() if k in BACKEND_OPTIONS[backend]}
    if backend in FIXED_BATCH_BACKENDS and batch_size is None:
        raise ValueError(
            f"backend={backend!r} runs one fixed batch size: pass batch_size=N (e.g. the number of environments); "
            "smaller batches are padded"
        )
    size, dim = clip.preprocess.size, clip.embed_dim
    if backend == "tensorrt":
        from vlmrm_fast.encoders.tensorrt_engine import make_tensorrt_encoder, require_cuda_device

        require_cuda_device(device)
        return make_tensorrt_encoder(clip, device=device, dtype=precision.dtype, batch_size=batch_size, **options)

    from vlmrm_fast.encoders.tower import prepare_image_tower

    attention = options.pop("attention", DEFAULT_ATTENTION[backend])
    visual = prepare_image_tower(clip.model.visual, device=device, precision=precision, attention=attention)
    common = dict(device=device, dtype=precision.dtype, precision=precision.name, image_size=size, embed_dim=dim)
    if backend == "torch":
        return TorchImageEncoder(visual, **common)
    from vlmrm_fast.encoders.compiled import CompiledImageEncoder

    return CompiledImageEncoder(
        visual, batch_size=batch_size, name=f"{clip.architecture} image tower", **common, **options
    )


__all__ = ["BACKENDS", "BACKEND_OPTIONS", "PRECISION_NAMES", "ImageEncoder", "choose_backend", "make_image_encoder"]
