"""Handing freed memory back to the system after a large object is closed.

Closing a VecEnv frees its frame buffers, simulator data, renderer and (when it loaded one)
its reward model's weights and tokenizer tables. glibc's allocator keeps most of that memory
in the process: after the first large block is freed, its dynamic mmap threshold puts
blocks of that size on the heap, and the small objects that outlive each env, allocated
between them, keep the heap from shrinking. Nothing stays in use (``mallinfo2``'s
in-use bytes are flat from one env to the next), yet the resident size grew by 1 to 3 MiB
with each env made and closed. ``malloc_trim(0)`` returns the free pages anywhere in the
heap; it takes about a millisecond. Before it, the garbage collector frees what reference
cycles still hold: with the MuJoCo Warp renderer, the closed env's device model and buffers
sit in such a cycle (not yet traced to its owner), and the resident size grew by about
1.5 MiB per env made and closed until the collector's next pass.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # musl and others have none
        return None


def release_freed_memory() -> None:
    """Frees what reference cycles hold, then returns the pages glibc holds free to the system (the
    trim has no effect elsewhere)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
