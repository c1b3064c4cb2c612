"""Warp itself, for every part of the package that runs on it (the MuJoCo Warp renderer, MuJoCo Warp
physics): its import with the install hint, its quiet initialization, and one Warp stream per torch
stream handle."""

from __future__ import annotations

import threading
from typing import Any

import torch

INSTALL_HINT = "MuJoCo Warp (the Warp renderer, physics='warp') is not installed: pip install 'vlmrm-fast[warp]' (mujoco-warp, warp-lang)"


def import_warp():
    """(warp, mujoco_warp), imported and initialized; ImportError naming the install extra."""
    try:
        import mujoco_warp
        import warp
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from None
    if warp.config.log_level == warp.LOG_INFO:  # Warp's default: quiet its banner and per-module notices
        warp.config.log_level = warp.LOG_WARNING if torch.cuda.is_available() else warp.LOG_ERROR
    _init_warp(warp)
    return warp, mujoco_warp


#: What Warp's native library prints (from C, whatever its log level) where there is no NVIDIA driver:
#: on a CPU-only machine that is the expected state, said once by ``vlmrm-fast info``, not a warning.
_NO_DRIVER_NOTICE = "Could not find or load the NVIDIA CUDA driver"


_WARP_INITIALIZED = False


def _init_warp(warp) -> None:
    """``warp.init()`` with its no-driver notice dropped; anything else it prints goes to stderr as usual."""
    global _WARP_INITIALIZED
    if _WARP_INITIALIZED:
        return
    _WARP_INITIALIZED = True
    import os
    import sys
    import tempfile

    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            warp.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        printed = captured.read().decode(errors="replace")
    kept = [line for line in printed.splitlines(keepends=True) if _NO_DRIVER_NOTICE not in line]
    if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()


def warp_available() -> str | None:
    """None when MuJoCo Warp can be used here, else why not."""
    try:
        import_warp()
    except ImportError as exc:
        return str(exc)
    return None


_WARP_STREAMS: dict[tuple[str, int], Any] = {}
_WARP_STREAMS_LOCK = threading.Lock()


def warp_stream_of(stream: torch.cuda.Stream):
    """The process's one ``wp.Stream`` for torch ``stream``'s handle, kept for the life of the process.

    Warp registers external streams by raw handle, without counting, and a collected wrapper
    unregisters its handle; torch hands the same pooled handles to new ``torch.cuda.Stream``
    objects. A wrapper per renderer would thus drop a registration that another renderer, or
    the user, still relies on. One wrapper per handle, never collected, drops none.
    """
    key = (str(stream.device), int(stream.cuda_stream))
    with _WARP_STREAMS_LOCK:
        wrapper = _WARP_STREAMS.get(key)
        if wrapper is None:
            wp, _ = import_warp()
            wrapper = _WARP_STREAMS[key] = wp.stream_from_torch(stream)
        return wrapper
