"""CLIP image-tower backends behind one option: ``backend="torch" | "compile" | "tensorrt" | "auto"``.

Each backend describes itself in one :class:`~vlmrm_fast.encoders.base.Backend` row, defined in its
own module; :data:`BACKEND_TABLE` lists them, and everything here reads the table:

- ``"torch"`` (:mod:`.torch_eager`): eager PyTorch, any batch size (bf16/fp16/FP8 on the GPU, fp32
  on the CPU).
- ``"compile"`` (:mod:`.compiled`): torch.compile for one fixed ``batch_size``, replayed as a CUDA
  graph on the GPU; compiled code is cached on disk for later processes (:mod:`.compile_cache`).
- ``"tensorrt"`` (:mod:`.tensorrt_engine`): a TensorRT engine for one fixed ``batch_size``, built
  from an ONNX export and cached on disk (``pip install .[tensorrt]``). bf16/fp16/fp32 only.
- ``"auto"``: the first backend by ``auto_rank`` that runs on the device's type, runs the
  precision, gets the batch size it needs and is available: on CUDA with a fixed batch size
  TensorRT when it is installed (and FP8 is not asked for), else compile; otherwise torch.

Precisions (:mod:`.precision`, the one resolver): ``"auto"``, ``"fp32"``, ``"fp16"``, ``"bf16"`` and
``"fp8"`` (the transformer's linear layers in FP8 on sm_89+ GPUs, :mod:`.fp8`, with the option
``fp8_scaling`` and, for static scales, ``fp8_calibration``). "auto" weighs FP8 only where the
backend compiles the tower. All backends return raw (unnormalized) embeddings of the same model
within the precision's tolerance.

A new backend: a module with an :class:`~vlmrm_fast.encoders.base.ImageEncoder` subclass and its
``Backend`` row, and the row added to :data:`BACKEND_TABLE`.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from vlmrm_fast.checks import positive_int
from vlmrm_fast.encoders import compiled, fp8_speed, tensorrt_engine, torch_eager
from vlmrm_fast.encoders.base import Backend, ImageEncoder
from vlmrm_fast.encoders.fp8 import check_fp8_options
from vlmrm_fast.encoders.precision import PRECISION_NAMES, check_precision_name, resolve

#: Every backend, as it describes itself. The functions below read it at each call.
BACKEND_TABLE: tuple[Backend, ...] = (torch_eager.BACKEND, compiled.BACKEND, tensorrt_engine.BACKEND)
#: The names the settings accept (RewardModelSpec, configs), from the table.
BACKENDS = ("auto", *(b.name for b in BACKEND_TABLE))
#: Options each backend takes beside device, precision and batch_size, from the table; "auto"
#: takes them all and passes each to the backend it picks when that backend takes it.
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {b.name: b.options for b in BACKEND_TABLE}


def backend_named(name: str) -> Backend:
    """The row of backend ``name`` (not "auto")."""
    for row in BACKEND_TABLE:
        if row.name == name:
            return row
    raise ValueError(f"backend {name!r} is unknown; use one of {('auto', *(b.name for b in BACKEND_TABLE))}")


def choose_backend(device: torch.device, batch_size: int | None, precision: str = "auto") -> str:
    """What ``backend="auto"`` picks on ``device`` for ``precision`` (a name: "auto", "bf16", "fp8", ...)."""
    device = torch.device(device)
    ranked = sorted((b.auto_rank, i, b) for i, b in enumerate(BACKEND_TABLE) if b.auto_rank is not None)
    for _, _, row in ranked:
        if (
            (row.auto_devices is None or device.type in row.auto_devices)
            and (batch_size is not None or not row.fixed_batch)
            and row.runs(precision)
            and row.unavailable(device) is None
        ):
            return row.name
    raise ValueError(f"no encoder backend runs precision={precision!r} on {device}")


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
    ``attention`` ("torch", "compile": "fused" or "open_clip"); ``fp8_scaling``,
    ``fp8_calibration`` ("torch", "compile"; encoders/fp8.py); ``engine_cache_dir``,
    ``workspace_gib``, ``rebuild_engine`` ("tensorrt"); ``progress`` (compile, tensorrt).
    """
    if backend != "auto":
        backend_named(backend)  # refuses an unknown name
    batch_size = positive_int(batch_size, "batch_size", allow_none=True)
    device = torch.device(device)
    _check_options(backend, options)
    check_precision_name(precision)
    check_fp8_options(precision, options)
    if backend != "auto":
        _check_runs(backend_named(backend), precision)
    row = backend_named(backend if backend != "auto" else choose_backend(device, batch_size, precision))
    if row.fixed_batch and batch_size is None:
        raise ValueError(
            f"backend={row.name!r} runs one fixed batch size: pass batch_size=N (e.g. the number of environments); "
            "smaller batches are padded"
        )
    fp8_pays = None
    if row.compiles and row.runs("fp8") and batch_size is not None:  # eager FP8 never pays (module docstring)

        def fp8_pays() -> bool:
            return fp8_speed.auto_prefers_fp8(
                clip.model.visual,
                torch.device(device),
                batch_size,
                compile_options=_taken(row, options),
                fp8_scaling=options.get("fp8_scaling"),
            )

    resolved = resolve(precision, device, fp8_pays=fp8_pays)
    try:
        return row.make(clip, device=device, precision=resolved, batch_size=batch_size, **_taken(row, options))
    except Exception as exc:
        if backend != "auto" or row.name != "tensorrt":
            raise
        # auto means the best that works here; say why TensorRT did not
        warnings.warn(
            f"backend='auto': TensorRT failed ({type(exc).__name__}: {exc}); using backend='compile'", stacklevel=2
        )
        fallback = backend_named("compile")
        return fallback.make(
            clip, device=device, precision=resolved, batch_size=batch_size, **_taken(fallback, options)
        )


def _taken(row: Backend, options: dict[str, Any]) -> dict[str, Any]:
    """The options ``row`` takes ("auto" passes each backend only its own)."""
    return {k: v for k, v in options.items() if k in row.options}


def _check_runs(row: Backend, precision: str) -> None:
    if row.runs(precision):
        return
    runners = [b.name for b in BACKEND_TABLE if b.runs(precision)]
    raise ValueError(
        f"precision={precision!r} runs through backend={' or '.join(map(repr, runners))}; the {row.name} backend "
        f"runs {', '.join(row.precisions)}"
    )


def _check_options(backend: str, options: dict[str, Any]) -> None:
    if backend == "auto":
        allowed = tuple(sorted({o for b in BACKEND_TABLE for o in b.options}))
    else:
        allowed = backend_named(backend).options
    unknown = sorted(set(options) - set(allowed))
    if not unknown:
        return
    owners = {name: [b.name for b in BACKEND_TABLE if name in b.options] for name in unknown}
    hints = "; ".join(
        f"{name!r} belongs to backend {' / '.join(map(repr, owners[name]))}"
        if owners[name]
        else f"{name!r} is no encoder option"
        for name in unknown
    )
    raise TypeError(
        f"unexpected encoder option(s) for backend={backend!r}: {hints}. Options of {backend!r}: {list(allowed) or 'none'}"
    )


__all__ = [
    "BACKENDS",
    "BACKEND_OPTIONS",
    "BACKEND_TABLE",
    "PRECISION_NAMES",
    "Backend",
    "ImageEncoder",
    "backend_named",
    "choose_backend",
    "make_image_encoder",
]
