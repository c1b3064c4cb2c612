"""The CLIP image tower through torch.compile for one fixed batch size, replayed as a CUDA graph.

On CUDA the tower is compiled with ``mode="max-autotune-no-cudagraphs"`` (inductor
picks the faster of its Triton templates and cuBLAS per matrix product) and then
captured once, by hand, into a ``torch.cuda.CUDAGraph`` over a static input and
output buffer. A call is then one graph replay, with no Python per layer.

Why not ``mode="reduce-overhead"``: its CUDA-graph trees copy every input into
buffers of their own (so the preprocess could not write into the graph's input),
overwrite earlier outputs on the next replay, and fall back to running without a
graph, with only a log line, when a condition is not met. Capturing by hand makes
the graph explicit: the input buffer is ours (:meth:`input_buffer`), the replay
either happens or capture fails loudly at construction.

On the CPU the same compiled function runs directly (inductor's C++ backend),
without a graph.
"""

from __future__ import annotations

import torch

from vlmrm_fast.encoders.base import ImageEncoder
from vlmrm_fast.encoders.progress import stage

#: torch.compile modes this backend accepts; the cudagraph modes would capture twice.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
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
    for names in (("recompile_limit", "cache_size_limit"), ("accumulated_recompile_limit", "accumulated_cache_size_limit")):
        name = next((n for n in names if hasattr(config, n)), None)
        if name is not None:
            lifted[name] = max(getattr(config, name), 1 << 20)
    return config.patch(**lifted)


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
        compile_mode: str | None = None,
        progress: bool = True,
        name: str = "image tower",
    ):
        self.device = torch.device(device)
        self.input_dtype = dtype
        self.image_size = image_size
        self.embed_dim = embed_dim
        self.batch_size = batch_size
        if compile_mode is None:
            compile_mode = "max-autotune-no-cudagraphs" if self.device.type == "cuda" else "default"
        if compile_mode not in COMPILE_MODES:
            raise ValueError(
                f"compile_mode={compile_mode!r} is not supported; use one of {COMPILE_MODES} "
                "(this backend captures the CUDA graph itself)"
            )
        self.compile_mode = compile_mode
        self.visual = visual.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self._compiled = torch.compile(self.visual, mode=compile_mode, fullgraph=True, dynamic=False)
        self._input = torch.zeros((batch_size, 3, image_size, image_size), dtype=dtype, device=self.device)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._output: torch.Tensor | None = None
        what = f"compiling the {name} for batch {batch_size} ({str(dtype).replace('torch.', '')}, {compile_mode}, {self.device})"
        with stage(what, progress), torch.inference_mode(), _lifted_recompile_limits():
            if self.device.type == "cuda":
                self._capture()
            else:
                for _ in range(_WARMUP_CALLS):
                    self._compiled(self._input)

    def _capture(self) -> None:
        with torch.cuda.device(self.device):
            current = torch.cuda.current_stream()
            # Warm-up (compilation, autotuning, cuBLAS handles) on a side stream, as capture requires.
            side = torch.cuda.Stream()
            side.wait_stream(current)
            with torch.cuda.stream(side):
                for _ in range(_WARMUP_CALLS):
                    self._compiled(self._input)
            current.wait_stream(side)
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

    def close(self) -> None:
        self._graph = self._output = self._compiled = self.visual = None
        self._input = None
