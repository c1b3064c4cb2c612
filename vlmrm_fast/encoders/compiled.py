"""The CLIP image tower through torch.compile for one fixed batch size, replayed as a CUDA graph.

Compilation (inductor):

- ``compile_scope="blocks"`` (default): each transformer block is compiled, and since all blocks
  run the same code on the same shapes, dynamo traces one and every block reuses its graph
  ("regional compilation"). The few ops around the blocks (patch embedding, pooling, projection)
  stay eager; inside the CUDA graph they cost no launch overhead. Cold compiles take a fraction
  of the whole-tower time, and a cached compile traces one block instead of all of them.
- ``compile_scope="tower"``: the whole tower as one graph (fusions across block boundaries too).
- ``compile_mode="default"`` (default): cuBLAS for the matrix products, Triton kernels for the
  fused rest (layer norm + residual, bias + GELU, FP8 input quantization).
  ``"max-autotune-no-cudagraphs"`` also times Triton matrix-product templates against cuBLAS
  for every shape: minutes more per new model and batch size (see bench/RESULTS.md), cached.

Compiled code goes to the on-disk cache of :mod:`vlmrm_fast.encoders.compile_cache`; a later
process with the same model, batch size, precision and GPU loads it instead of compiling.
Progress shows on stderr (``progress=False`` silences it).

On CUDA the compiled tower is then captured once, by hand, into a ``torch.cuda.CUDAGraph`` over
a static input and output buffer; a call is one graph replay, with no Python per layer.

Why not ``mode="reduce-overhead"``: its CUDA-graph trees copy every input into buffers of their
own (so the preprocess could not write into the graph's input), overwrite earlier outputs on the
next replay, and fall back to running without a graph, with only a log line, when a condition is
not met. Capturing by hand makes the graph explicit: the input buffer is ours
(:meth:`input_buffer`), the replay either happens or capture fails loudly at construction.

On the CPU the same compiled function runs directly (inductor's C++ backend), without a graph.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from vlmrm_fast.encoders.base import Backend, ImageEncoder
from vlmrm_fast.encoders.build_progress import Phases, note
from vlmrm_fast.encoders.compile_cache import CacheReport, inductor_caches_in, resolve_compile_cache
from vlmrm_fast.encoders.fp8 import DEFAULT_FP8_SCALING, FP8_OPTIONS
from vlmrm_fast.encoders.precision import Precision
from vlmrm_fast.encoders.tower import prepare_clip_tower

#: torch.compile modes this backend accepts; the cudagraph modes would capture twice.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
COMPILE_SCOPES = ("blocks", "tower")
DEFAULT_COMPILE_MODE = "default"
DEFAULT_COMPILE_SCOPE = "blocks"
_WARMUP_CALLS = 2  # the first compiles (and autotunes); the second checks that nothing recompiles


def _lifted_recompile_limits():
    """Dynamo's recompile limits lifted while an encoder compiles.

    Every encoder compiles the same ``forward`` code with a backend of its own, and dynamo
    counts all of them against one per-code limit (8 by default): with ``fullgraph=True`` the
    ninth encoder in a process would raise FailOnRecompileLimitHit (a ninth VecEnv on a GPU,
    where ``backend="auto"`` compiles). Each encoder compiles once, so the limits stay in force
    for everything else.
    """
    config = torch._dynamo.config
    lifted = {}
    for names in (
        ("recompile_limit", "cache_size_limit"),
        ("accumulated_recompile_limit", "accumulated_cache_size_limit"),
    ):
        name = next((n for n in names if hasattr(config, n)), None)
        if name is not None:
            lifted[name] = max(getattr(config, name), 1 << 20)
    return config.patch(**lifted)


@contextlib.contextmanager
def compiling(cache_dir: Path | None) -> Iterator[CacheReport]:
    """What a tower compiles under: inference mode, dynamo's recompile limits lifted, inductor's
    caches in ``cache_dir`` (the report of whether they served, filled on exit)."""
    with (
        torch.inference_mode(),
        _lifted_recompile_limits(),
        inductor_caches_in(cache_dir) as report,
        warnings.catch_warnings(),
    ):
        # torchao's FP8 tensors lack a stable hash for AOTAutograd's cache; inductor's cache still serves them.
        warnings.filterwarnings("ignore", message=".*_stable_hash_for_caching.*")
        yield report


def transformer_blocks(visual: torch.nn.Module) -> list[torch.nn.Module]:
    blocks = getattr(getattr(visual, "transformer", None), "resblocks", None)
    return list(blocks) if blocks is not None else []


def compile_tower(visual: torch.nn.Module, mode: str, scope: str):
    """The callable that runs ``visual`` compiled in ``scope`` (compilation itself happens at the first call)."""
    options = dict(mode=mode, fullgraph=True, dynamic=False)
    if scope == "tower":
        return torch.compile(visual, **options)
    blocks = transformer_blocks(visual)
    if not blocks:
        raise ValueError(
            f"compile_scope='blocks' needs a transformer tower; this {type(visual).__name__} has no "
            "transformer blocks: use compile_scope='tower'"
        )
    for block in blocks:
        block.compile(**options)
    return visual


class CompiledImageEncoder(ImageEncoder):
    backend = "compile"

    def __init__(
        self,
        visual: torch.nn.Module,
        *,
        device: torch.device,
        dtype: torch.dtype,
        image_size: int,
        embed_dim: int,
        batch_size: int,
        precision: str | None = None,
        fp8_scaling: str | None = None,
        compile_mode: str | None = None,
        compile_scope: str | None = None,
        compile_cache: bool | str | os.PathLike = True,
        progress: bool = True,
        name: str = "image tower",
    ):
        """``visual`` is prepared already (:func:`~vlmrm_fast.encoders.tower.prepare_image_tower`)."""
        self.device = torch.device(device)
        self.input_dtype = dtype
        self.precision = precision or str(dtype).replace("torch.", "")
        self.fp8_scaling = fp8_scaling
        self.image_size = image_size
        self.embed_dim = embed_dim
        self.batch_size = batch_size
        compile_mode = compile_mode or DEFAULT_COMPILE_MODE
        compile_scope = compile_scope or DEFAULT_COMPILE_SCOPE
        if compile_mode not in COMPILE_MODES:
            raise ValueError(
                f"compile_mode={compile_mode!r} is not supported; use one of {COMPILE_MODES} "
                "(this backend captures the CUDA graph itself)"
            )
        if compile_scope not in COMPILE_SCOPES:
            raise ValueError(f"compile_scope={compile_scope!r} is unknown; use one of {COMPILE_SCOPES}")
        cache_dir = resolve_compile_cache(compile_cache)
        self.compile_mode, self.compile_scope = compile_mode, compile_scope
        self.visual = visual
        self._compiled = compile_tower(visual, compile_mode, compile_scope)
        self._input = torch.zeros((batch_size, 3, image_size, image_size), dtype=dtype, device=self.device)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._output: torch.Tensor | None = None
        title = f"compiling the {name} for batch {batch_size} ({self.precision_label()}, {compile_mode}, {compile_scope}, {self.device})"
        steps = ["compile", "check for recompiles"] + (["capture the CUDA graph"] if self.device.type == "cuda" else [])
        with Phases(title, steps, progress) as phases, compiling(cache_dir) as report:
            if self.device.type == "cuda":
                self._capture(phases)
            else:
                with phases.step("compile"):
                    self._compiled(self._input)
                with phases.step("check for recompiles"):
                    self._compiled(self._input)
        self.cache_report: CacheReport = report
        self.compile_seconds = phases.elapsed
        note(f"{name}: {report.describe()}", progress)

    def _capture(self, phases: Phases) -> None:
        with torch.cuda.device(self.device):
            current = torch.cuda.current_stream()
            # Warm-up (compilation, autotuning, cuBLAS handles) on a side stream, as capture requires.
            side = torch.cuda.Stream()
            side.wait_stream(current)
            with torch.cuda.stream(side):
                with phases.step("compile"):
                    self._compiled(self._input)
                    torch.cuda.synchronize()
                with phases.step("check for recompiles"):
                    self._compiled(self._input)
                    torch.cuda.synchronize()
            current.wait_stream(side)
            with phases.step("capture the CUDA graph"):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    output = self._compiled(self._input)
                torch.cuda.synchronize()
        self._graph, self._output = graph, output

    def input_buffer(self) -> torch.Tensor:
        """(see base class) The graph's static input."""
        return self._input

    @torch.inference_mode()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        if self._graph is None:
            return self._compiled(pixels.contiguous())
        with torch.cuda.device(self.device):
            if pixels.data_ptr() != self._input.data_ptr() or not pixels.is_contiguous():
                self._input.copy_(pixels)
            self._graph.replay()
            # The next replay overwrites the static output; callers keep what they are given.
            return self._output.clone()

    def describe(self) -> str:
        return f"compile ({self.precision_label()}, batch {self.batch_size}, {self.compile_mode}, {self.compile_scope} scope, {self.device})"

    def close(self) -> None:
        self._graph = self._output = self._compiled = self.visual = None
        self._input = None


def make_compiled_encoder(
    clip: Any,
    *,
    device: torch.device,
    precision: Precision,
    batch_size: int,
    attention: str = "fused",
    fp8_scaling: str | None = None,
    fp8_calibration: Any = None,
    **compile_options: Any,
) -> CompiledImageEncoder:
    """The compile backend for ``clip`` (a LoadedClip); ``compile_options``: ``compile_mode``,
    ``compile_scope``, ``compile_cache``, ``progress``."""
    visual = prepare_clip_tower(
        clip,
        device=device,
        precision=precision,
        attention=attention,
        fp8_scaling=fp8_scaling,
        fp8_calibration=fp8_calibration,
    )
    return CompiledImageEncoder(
        visual,
        device=device,
        dtype=precision.dtype,
        precision=precision.name,
        fp8_scaling=(fp8_scaling or DEFAULT_FP8_SCALING) if precision.fp8 else None,
        image_size=clip.preprocess.size,
        embed_dim=clip.embed_dim,
        batch_size=batch_size,
        name=f"{clip.architecture} image tower",
        **compile_options,
    )


BACKEND = Backend(
    name="compile",
    summary="torch.compile for one fixed batch size, replayed as a CUDA graph on GPUs; compiled code cached on disk",
    make=make_compiled_encoder,
    options=("compile_mode", "compile_scope", "compile_cache", "attention", "progress", *FP8_OPTIONS),
    fixed_batch=True,
    compiles=True,
    auto_rank=1,
)
