"""backend="tensorrt": the CLIP image tower as a TensorRT engine for one fixed batch size.

The tower is exported to ONNX in the engine's precision (:mod:`onnx_export`),
parsed into a strongly typed TensorRT network, built with an optimization
profile that fixes the batch, and cached on disk (:mod:`engine_cache`). At run
time the engine reads the caller's tensor and writes a fresh torch tensor in
place (``set_tensor_address``) and runs on torch's current CUDA stream
(``execute_async_v3``), so it orders with the preprocess before it and the
reward after it like any torch kernel.

``tensorrt`` (>= 10) is an optional dependency, imported only when this backend
is used: ``pip install .[tensorrt]``.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

from vlmrm_fast.encoders.base import Backend, ImageEncoder
from vlmrm_fast.encoders.build_progress import note, stage
from vlmrm_fast.encoders.engine_cache import EngineCache, EngineKey, StaleEngineError
from vlmrm_fast.encoders.onnx_export import INPUT_NAME, OUTPUT_NAME, export_image_tower

logger = logging.getLogger(__name__)

PRECISION_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
INSTALL_HINT = "pip install .[tensorrt]"
DEFAULT_WORKSPACE_GIB = 8.0
_MIN_TENSORRT_MAJOR = 10
_ADDRESS_ALIGNMENT = 256  # bytes, what TensorRT asks of I/O tensor addresses


def require_tensorrt():
    """The ``tensorrt`` module, or an ImportError that says how to install it."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise ImportError(
            f"backend='tensorrt' needs NVIDIA TensorRT >= {_MIN_TENSORRT_MAJOR} ({exc}). Install it with "
            "`pip install .[tensorrt]` (or `pip install 'vlmrm-fast[tensorrt]'`), or use backend='compile'."
        ) from exc
    major = int(str(trt.__version__).split(".")[0])
    if major < _MIN_TENSORRT_MAJOR:
        raise ImportError(
            f"TensorRT {trt.__version__} is too old: backend='tensorrt' needs >= {_MIN_TENSORRT_MAJOR} "
            "(pip install -U .[tensorrt])"
        )
    return trt


def tensorrt_available() -> bool:
    try:
        require_tensorrt()
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- TensorRT callbacks

_trt_logger = None


def _logger(trt):
    """One process-wide ILogger forwarding TensorRT's messages to ``logging`` (it must outlive every engine)."""
    global _trt_logger
    if _trt_logger is None:
        severity = trt.ILogger.Severity
        levels = {
            severity.INTERNAL_ERROR: logging.CRITICAL,
            severity.ERROR: logging.ERROR,
            severity.WARNING: logging.WARNING,
            severity.INFO: logging.DEBUG,
            severity.VERBOSE: logging.DEBUG,
        }

        class Logger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)

            def log(self, level, msg):
                logger.log(levels.get(level, logging.INFO), "TensorRT: %s", msg)

        _trt_logger = Logger()
    return _trt_logger


def _progress_monitor(trt):
    """An IProgressMonitor drawing one tqdm bar per build phase (nested phases below their parent)."""
    from tqdm import tqdm

    class Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self._lock = threading.Lock()  # TensorRT may report from several threads
            self._bars: dict[str, Any] = {}
            self._depth: dict[str, int] = {}

        def phase_start(self, phase_name, parent_phase, num_steps):
            with self._lock:
                depth = 0 if parent_phase is None else self._depth.get(parent_phase, 0) + 1
                self._depth[phase_name] = depth
                self._bars[phase_name] = tqdm(
                    total=num_steps,
                    desc=phase_name,
                    position=depth,
                    leave=depth == 0,
                    file=sys.stderr,
                    dynamic_ncols=True,
                )

        def step_complete(self, phase_name, step):
            with self._lock:
                bar = self._bars.get(phase_name)
                if bar is not None:
                    bar.update(step + 1 - bar.n)
            return True  # False would cancel the build

        def phase_finish(self, phase_name):
            with self._lock:
                bar = self._bars.pop(phase_name, None)
                self._depth.pop(phase_name, None)
                if bar is not None:
                    bar.close()

    return Monitor()


# --------------------------------------------------------------------------- build and load


def build_engine(
    onnx_path: str | Path,
    *,
    batch_size: int,
    image_size: int,
    workspace_gib: float = DEFAULT_WORKSPACE_GIB,
    progress: bool = True,
) -> bytes:
    """Parses ``onnx_path`` (input ``pixels`` with a dynamic or fixed batch) and builds a serialized engine."""
    trt = require_tensorrt()
    log = _logger(trt)
    builder = trt.Builder(log)
    # Strongly typed: every tensor keeps the type the ONNX graph gives it (see onnx_export).
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, log)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "\n".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx_path}:\n{errors}")
    if network.num_inputs != 1 or network.num_outputs != 1:
        raise RuntimeError(
            f"expected one input and one output in {onnx_path}, got {network.num_inputs} and {network.num_outputs}"
        )

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gib * (1 << 30)))
    shape = (batch_size, 3, image_size, image_size)
    profile = builder.create_optimization_profile()
    profile.set_shape(network.get_input(0).name, shape, shape, shape)
    config.add_optimization_profile(profile)
    monitor = _progress_monitor(trt) if progress else None
    if monitor is not None:
        config.progress_monitor = monitor
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f"TensorRT could not build the engine; its errors are logged under {__name__!r}")
    return bytes(serialized)


@dataclasses.dataclass
class LoadedEngine:
    """A deserialized engine, its runtime (which must outlive it) and its I/O types."""

    runtime: Any
    engine: Any
    input_dtype: torch.dtype
    output_dtype: torch.dtype


def deserialize_engine(
    data: bytes, *, device: torch.device, batch_size: int, image_size: int, embed_dim: int
) -> LoadedEngine:
    """Loads a serialized engine on ``device`` and checks its I/O; StaleEngineError when it does not fit."""
    trt = require_tensorrt()
    dtypes = {trt.DataType.FLOAT: torch.float32, trt.DataType.HALF: torch.float16, trt.DataType.BF16: torch.bfloat16}
    runtime = trt.Runtime(_logger(trt))
    with torch.cuda.device(device):
        engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        raise StaleEngineError("deserialize_cuda_engine returned nothing (built by another TensorRT version or GPU?)")
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
    if inputs != [INPUT_NAME] or outputs != [OUTPUT_NAME]:
        raise StaleEngineError(f"engine I/O is {inputs} -> {outputs}, expected [{INPUT_NAME!r}] -> [{OUTPUT_NAME!r}]")
    in_shape = tuple(engine.get_tensor_shape(INPUT_NAME))
    if in_shape[1:] != (3, image_size, image_size) or in_shape[0] not in (-1, batch_size):
        raise StaleEngineError(
            f"engine input shape {in_shape} does not fit batch {batch_size} of {image_size}px images"
        )
    out_shape = tuple(engine.get_tensor_shape(OUTPUT_NAME))
    if out_shape[-1] != embed_dim:
        raise StaleEngineError(f"engine output shape {out_shape} does not give {embed_dim}-d embeddings")
    in_dtype = dtypes.get(engine.get_tensor_dtype(INPUT_NAME))
    out_dtype = dtypes.get(engine.get_tensor_dtype(OUTPUT_NAME))
    if in_dtype is None or out_dtype is None:
        raise StaleEngineError("engine I/O types are not fp32/fp16/bf16")
    return LoadedEngine(runtime, engine, input_dtype=in_dtype, output_dtype=out_dtype)


# --------------------------------------------------------------------------- the encoder


class TensorRTImageEncoder(ImageEncoder):
    backend = "tensorrt"

    def __init__(
        self,
        loaded: LoadedEngine,
        *,
        device: torch.device,
        batch_size: int,
        image_size: int,
        embed_dim: int,
        engine_path: Path | None = None,
        built: bool = False,
    ):
        self.device = torch.device(device)
        self.input_dtype = loaded.input_dtype
        self.output_dtype = loaded.output_dtype
        self.image_size = image_size
        self.embed_dim = embed_dim
        self.batch_size = batch_size
        self.engine_path = engine_path
        self.built = built
        self._loaded = loaded
        with torch.cuda.device(self.device):
            self._context = loaded.engine.create_execution_context()
        if self._context is None:
            raise RuntimeError("TensorRT could not create an execution context (out of GPU memory?)")
        if not self._context.set_input_shape(INPUT_NAME, (batch_size, 3, image_size, image_size)):
            raise RuntimeError(f"the engine does not accept input shape {(batch_size, 3, image_size, image_size)}")

    @torch.inference_mode()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        if not pixels.is_contiguous() or pixels.data_ptr() % _ADDRESS_ALIGNMENT:
            pixels = pixels.clone(memory_format=torch.contiguous_format)  # torch's allocations are aligned
        with torch.cuda.device(self.device):
            out = torch.empty((self.batch_size, self.embed_dim), dtype=self.output_dtype, device=self.device)
            for name, tensor in ((INPUT_NAME, pixels), (OUTPUT_NAME, out)):
                if not self._context.set_tensor_address(name, tensor.data_ptr()):
                    raise RuntimeError(f"TensorRT refused the address of {name!r}")
            if not self._context.execute_async_v3(torch.cuda.current_stream().cuda_stream):
                raise RuntimeError(f"TensorRT execution failed; its errors are logged under {__name__!r}")
        return out

    def close(self) -> None:
        # The context goes before the engine, the engine before its runtime.
        self._context = None
        self._loaded = None

    def describe(self) -> str:
        return super().describe() + (f", engine {self.engine_path}" if self.engine_path else "")


def engine_key(
    clip: Any, *, batch_size: int, dtype: torch.dtype, device: torch.device, tensorrt_version: str
) -> EngineKey:
    """The cache key of ``clip``'s image tower built for this batch, precision and GPU."""
    weights = clip.weights_key
    if weights.startswith("random-"):
        # Random weights are a function of the seed and of torch's generator.
        weights = f"{weights}@torch-{torch.__version__}"
    major, minor = torch.cuda.get_device_capability(device)
    return EngineKey(
        architecture=clip.architecture,
        weights=weights,
        image_size=int(clip.preprocess.size),
        batch_size=int(batch_size),
        precision=PRECISION_NAMES[dtype],
        gpu=torch.cuda.get_device_name(device),
        compute_capability=f"{major}.{minor}",
        tensorrt=str(tensorrt_version),
    )


def require_cuda_device(device: Any) -> torch.device:
    """TensorRT engines run on (and are built for) one CUDA GPU: the device, or a ValueError that says so."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(
            f"TensorRT engines run on CUDA devices only (and are built for one GPU model), got device={device}; use "
            "backend='torch' or 'compile' here, or `vlmrm-fast export --onnx-only OUT.onnx` for the ONNX file"
        )
    return device


def make_tensorrt_encoder(
    clip: Any,
    *,
    device: torch.device,
    dtype: torch.dtype,
    batch_size: int,
    engine_cache_dir: str | Path | None = None,
    workspace_gib: float = DEFAULT_WORKSPACE_GIB,
    rebuild_engine: bool = False,
    progress: bool = True,
) -> TensorRTImageEncoder:
    """The cached engine for ``clip`` (a LoadedClip), or one exported and built now (minutes)."""
    trt = require_tensorrt()
    device = require_cuda_device(device)
    if not isinstance(workspace_gib, (int, float)) or isinstance(workspace_gib, bool) or workspace_gib <= 0:
        raise ValueError(f"workspace_gib must be a positive number of GiB, got {workspace_gib!r}")
    key = engine_key(clip, batch_size=batch_size, dtype=dtype, device=device, tensorrt_version=trt.__version__)
    cache = EngineCache(engine_cache_dir)
    size = int(clip.preprocess.size)
    what = f"{clip.architecture} image tower (batch {batch_size}, {key.precision}, {key.gpu}, TensorRT {key.tensorrt})"

    def build() -> bytes:
        note(
            f"no cached TensorRT engine for the {what} in {cache.directory}; building one (minutes; "
            "`vlmrm-fast export` builds it ahead of time)",
            progress,
        )
        cache.directory.mkdir(parents=True, exist_ok=True)
        # The ONNX file (weights included) sits beside the cache, where there is room for the engine too.
        with tempfile.TemporaryDirectory(prefix="onnx-", dir=cache.directory) as tmp:
            onnx_path = Path(tmp) / "image_tower.onnx"
            with stage(f"exporting the image tower to ONNX ({key.precision})", progress):
                export_image_tower(clip.model.visual, onnx_path, image_size=size, precision=key.precision)
            with stage("building the TensorRT engine", progress):
                return build_engine(
                    onnx_path, batch_size=batch_size, image_size=size, workspace_gib=workspace_gib, progress=progress
                )

    def deserialize(data: bytes) -> LoadedEngine:
        return deserialize_engine(data, device=device, batch_size=batch_size, image_size=size, embed_dim=clip.embed_dim)

    result = cache.get_or_build(key, build, deserialize, rebuild=rebuild_engine)
    if not result.built:
        note(f"loaded the TensorRT engine for the {what} from {result.path}", progress)
    return TensorRTImageEncoder(
        result.engine,
        device=device,
        batch_size=batch_size,
        image_size=size,
        embed_dim=clip.embed_dim,
        engine_path=result.path,
        built=result.built,
    )


def _make_from_row(clip: Any, *, device: torch.device, precision: Any, batch_size: int, **options: Any):
    require_cuda_device(device)  # before TensorRT's import: on a CPU the device is what is wrong
    return make_tensorrt_encoder(clip, device=device, dtype=precision.dtype, batch_size=batch_size, **options)


def _unavailable(device: torch.device) -> str | None:
    if torch.device(device).type != "cuda":
        return "TensorRT engines run on CUDA devices only"
    if not tensorrt_available():
        return f"TensorRT is not installed ({INSTALL_HINT})"
    return None


BACKEND = Backend(
    name="tensorrt",
    summary="a TensorRT engine for one fixed batch size, built from an ONNX export and cached on disk",
    make=_make_from_row,
    options=("engine_cache_dir", "workspace_gib", "rebuild_engine", "progress"),
    fixed_batch=True,
    precisions=("fp32", "fp16", "bf16"),
    needs=f"a CUDA GPU and TensorRT >= {_MIN_TENSORRT_MAJOR} ({INSTALL_HINT})",
    unavailable=_unavailable,
    auto_rank=0,
)
