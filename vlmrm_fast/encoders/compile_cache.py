"""The on-disk cache that lets a later process reuse an image tower's compilation.

torch.compile's own caches do the work: inductor's FX graph cache (the generated code, with the
Triton kernels bundled into each entry on GPUs), the AOTAutograd cache and the autotuning cache
(max-autotune's choices). Their entries are keyed by everything the compiled code depends on
(graph, shapes, dtypes, torch and Triton versions, GPU, inductor options), so an entry never
serves another model, batch size, precision or machine; it just misses.

By default inductor keeps them under the system's temporary folder, which a reboot may empty. While
an encoder compiles they are pointed at a folder of this package instead (``$VLMRM_FAST_COMPILE_CACHE``,
else ``$XDG_CACHE_HOME/vlmrm_fast/compile``, else ``~/.cache/vlmrm_fast/compile``), and the compile
reports whether it found its graph there. Deleting the folder is always safe. A
``TORCHINDUCTOR_CACHE_DIR`` that the user set is respected.

What a hit still costs: dynamo traces the Python again (one transformer block with the default
``compile_scope="blocks"``), the cached code is loaded, and on GPUs the CUDA graph is captured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

CACHE_ENV = "VLMRM_FAST_COMPILE_CACHE"
_INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"


def default_compile_cache_dir() -> Path:
    """``$VLMRM_FAST_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/vlmrm_fast/compile``, else ``~/.cache/vlmrm_fast/compile``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "vlmrm_fast" / "compile"


def resolve_compile_cache(compile_cache: bool | str | os.PathLike) -> Path | None:
    """The folder for ``compile_cache`` (True: the default one; False: none, inductor's own default applies)."""
    if compile_cache is True:
        return default_compile_cache_dir()
    if compile_cache is False or compile_cache is None:
        return None
    if isinstance(compile_cache, (str, os.PathLike)) and str(compile_cache):
        return Path(compile_cache).expanduser()
    raise TypeError(f"compile_cache must be True, False or a folder, got {compile_cache!r}")


def _user_set_inductor_dir() -> bool:
    """True when TORCHINDUCTOR_CACHE_DIR names a folder other than inductor's default (which inductor
    itself writes into the environment on first use)."""
    value = os.environ.get(_INDUCTOR_ENV)
    if not value:
        return False
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return os.path.abspath(value) != os.path.abspath(default_cache_dir())


@dataclasses.dataclass
class CacheReport:
    """What one compilation found: ``hits`` and ``misses`` of inductor's FX graph cache."""

    directory: Path | None
    hits: int = 0
    misses: int = 0

    @property
    def found(self) -> bool:
        """Every graph came from the cache."""
        return self.hits > 0 and self.misses == 0

    def describe(self) -> str:
        where = str(self.directory) if self.directory else "inductor's default folder"
        if self.found:
            return f"reused from the compile cache ({where})"
        if self.hits or self.misses:
            return f"compiled ({self.misses} new graph(s), {self.hits} cached) into the compile cache ({where})"
        return f"compiled (the cache was not consulted; {where})"


def _counters() -> tuple[int, int]:
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"]


@contextlib.contextmanager
def inductor_caches_in(directory: Path | None) -> Iterator[CacheReport]:
    """Inside: inductor's caches are on and live in ``directory`` (unless the user chose a folder
    through TORCHINDUCTOR_CACHE_DIR, or ``directory`` is None). Yields a report filled on exit."""
    if directory is not None and _user_set_inductor_dir():
        directory = None
    report = CacheReport(directory if directory is not None else _current_inductor_dir())
    previous = os.environ.get(_INDUCTOR_ENV)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        os.environ[_INDUCTOR_ENV] = str(directory.resolve())
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    hits0, misses0 = _counters()
    patches = [inductor_config.patch(fx_graph_cache=True, autotune_local_cache=True)]
    if hasattr(functorch_config, "enable_autograd_cache"):
        patches.append(functorch_config.patch(enable_autograd_cache=True))
    try:
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            yield report
    finally:
        hits1, misses1 = _counters()
        report.hits, report.misses = hits1 - hits0, misses1 - misses0
        if directory is not None:
            if previous is None:
                os.environ.pop(_INDUCTOR_ENV, None)
            else:
                os.environ[_INDUCTOR_ENV] = previous


def _current_inductor_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(os.environ.get(_INDUCTOR_ENV) or default_cache_dir())
