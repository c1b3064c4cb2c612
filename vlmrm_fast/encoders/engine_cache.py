"""On-disk cache of serialized TensorRT engines, verified before use.

An engine is valid only for the model and weights, image size, batch size,
precision, GPU model and TensorRT version it was built for; :class:`EngineKey`
holds all of them and its sha256 names the files. Beside each engine
(``<name>.engine``) a JSON sidecar (``<name>.json``) records the key fields
and the sha256 of the engine bytes. A cached engine is used only when the
sidecar is readable, its fields equal the key's, the bytes hash to the recorded
value and the engine deserializes; anything else is logged, deleted and rebuilt.
Files are written to a temporary name and renamed, the sidecar last, so a
crash mid-write leaves an entry that fails verification rather than a
half-written engine that passes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

#: Bumped whenever the export or build changes what an engine computes.
FORMAT_VERSION = 1
CACHE_ENV = "VLMRM_FAST_ENGINE_CACHE"

Engine = TypeVar("Engine")


class StaleEngineError(RuntimeError):
    """A cached engine failed verification or deserialization."""


@dataclasses.dataclass(frozen=True)
class EngineKey:
    """Everything a built engine depends on."""

    architecture: str
    weights: str
    image_size: int
    batch_size: int
    precision: str
    gpu: str
    compute_capability: str
    tensorrt: str
    format_version: int = FORMAT_VERSION

    def fields(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()

    def file_stem(self) -> str:
        """Readable and unique: ``ViT-L-14-b256-bf16-<first 20 hex digits of the digest>``."""
        arch = re.sub(r"[^A-Za-z0-9._-]+", "_", self.architecture)[:64]
        return f"{arch}-b{self.batch_size}-{self.precision}-{self.digest()[:20]}"


def default_cache_dir() -> Path:
    """``$VLMRM_FAST_ENGINE_CACHE``, else ``$XDG_CACHE_HOME/vlmrm_fast/engines``, else ``~/.cache/vlmrm_fast/engines``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "vlmrm_fast" / "engines"


@dataclasses.dataclass
class CacheResult:
    engine: Any
    path: Path
    built: bool  # False: loaded from the cache


class EngineCache:
    """Get-or-build over one directory; build and deserialize are passed in (tests inject fakes)."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()

    def paths(self, key: EngineKey) -> tuple[Path, Path]:
        stem = self.directory / key.file_stem()
        return stem.with_suffix(".engine"), stem.with_suffix(".json")

    def get_or_build(
        self,
        key: EngineKey,
        build: Callable[[], bytes],
        deserialize: Callable[[bytes], Engine],
        *,
        rebuild: bool = False,
    ) -> CacheResult:
        """The cached engine for ``key`` if it verifies, else ``build()``, stored, then deserialized."""
        engine_path, sidecar_path = self.paths(key)
        if rebuild:
            self.remove(key)
        elif engine_path.exists() or sidecar_path.exists():
            try:
                return CacheResult(self._load(key, deserialize), engine_path, built=False)
            except StaleEngineError as exc:
                logger.warning(
                    "cached TensorRT engine %s is unusable (%s); deleting it and building a new one", engine_path, exc
                )
                self.remove(key)
        data = build()
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
            raise RuntimeError("the TensorRT build returned no engine")
        self.store(key, data)
        try:
            engine = deserialize(bytes(data))
        except Exception as exc:
            self.remove(key)
            raise RuntimeError(f"the freshly built TensorRT engine could not be loaded: {exc}") from exc
        return CacheResult(engine, engine_path, built=True)

    def store(self, key: EngineKey, data: bytes) -> None:
        engine_path, sidecar_path = self.paths(key)
        self.directory.mkdir(parents=True, exist_ok=True)
        sidecar = {
            "key": key.digest(),
            "fields": key.fields(),
            "engine_sha256": hashlib.sha256(data).hexdigest(),
            "engine_bytes": len(data),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _write_atomic(engine_path, data)
        _write_atomic(sidecar_path, (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode())

    def remove(self, key: EngineKey) -> None:
        for path in self.paths(key):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def _load(self, key: EngineKey, deserialize: Callable[[bytes], Engine]) -> Engine:
        engine_path, sidecar_path = self.paths(key)
        try:
            sidecar = json.loads(sidecar_path.read_text())
        except FileNotFoundError:
            raise StaleEngineError("its sidecar is missing (an interrupted write?)") from None
        except (OSError, ValueError) as exc:
            raise StaleEngineError(f"its sidecar is unreadable: {exc}") from None
        if not isinstance(sidecar, dict):
            raise StaleEngineError("its sidecar is not a JSON object")
        if sidecar.get("key") != key.digest() or sidecar.get("fields") != key.fields():
            raise StaleEngineError(f"its sidecar describes another build: {sidecar.get('fields')}")
        try:
            data = engine_path.read_bytes()
        except FileNotFoundError:
            raise StaleEngineError("the engine file is missing") from None
        if len(data) != sidecar.get("engine_bytes") or hashlib.sha256(data).hexdigest() != sidecar.get("engine_sha256"):
            raise StaleEngineError(
                "the engine file does not match the sha256 its sidecar records (corrupt or truncated)"
            )
        try:
            engine = deserialize(data)
        except StaleEngineError:
            raise
        except Exception as exc:
            raise StaleEngineError(f"TensorRT could not deserialize it: {exc}") from exc
        if engine is None:
            raise StaleEngineError("TensorRT could not deserialize it")
        return engine


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
