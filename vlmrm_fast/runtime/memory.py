"""The process's memory: what a batch of envs needs, checked before it is allocated, and handing freed
memory back to the system after a large object is closed.

A batch too large for the machine would otherwise fail deep inside MuJoCo, MuJoCo Warp or the
renderer (``std::bad_alloc``, "Could not allocate memory", a bare ``MemoryError``) without naming
the number of envs. :func:`check_envs_fit` compares a lower bound of the batch's memory with what
the host, or the GPU that holds the simulations, has available and refuses in one line first;
:func:`check_replay_buffer_fits` does the same for an off-policy learner's replay buffer, and
:func:`check_judge_frames_fit` for a generative VLM judge's frames (its input size, its pixel buffer).

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
import os
import sys
from typing import TYPE_CHECKING, Any

from vlmrm_fast.failures import ExpectedFailure

if TYPE_CHECKING:
    import torch


class EnvsDoNotFitError(ExpectedFailure, MemoryError):
    """More envs than the machine's memory holds."""


class ReplayBufferDoesNotFitError(ExpectedFailure, MemoryError):
    """A replay buffer larger than the machine's memory."""


class JudgeFramesDoNotFitError(ExpectedFailure, MemoryError):
    """A judge's frames (its input size, or a batch of them) larger than the machine's memory."""


def available_bytes() -> int | None:
    """The memory the system can still give processes (Linux's MemAvailable), or None where it is not known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def env_bytes(model: Any, frame_shape: tuple[int, int] | None) -> int:
    """A lower bound of one env's memory in a batch: the arrays of MuJoCo's data for ``model`` (the state
    and everything a step computes) and, for frames drawn into host memory, one RGBA frame of ``frame_shape``."""
    import mujoco
    import numpy as np

    data = mujoco.MjData(model)
    arrays = sum(value.nbytes for name in dir(data) if isinstance(value := getattr(data, name, None), np.ndarray))
    return int(arrays) + (4 * frame_shape[0] * frame_shape[1] if frame_shape else 0)


def device_available_bytes(device: torch.device | None) -> int | None:
    """The memory free for new allocations on ``device`` (None or the CPU: the host's, :func:`available_bytes`)."""
    if device is None or device.type == "cpu":
        return available_bytes()
    import torch

    try:
        return int(torch.cuda.mem_get_info(device)[0])
    except (RuntimeError, AssertionError):
        return None


def check_envs_fit(n_envs: int, each: int, what: str, device: torch.device | None = None) -> None:
    """Refuses ``n_envs`` envs of ``each`` bytes (a lower bound; ``what`` says of what) when they exceed the
    memory available (the host's, or ``device``'s), naming the number of envs, the memory they need
    and the most that fit."""
    available = device_available_bytes(device)
    if available is None or n_envs * each <= available:
        return
    where = "memory" if device is None or device.type == "cpu" else f"memory on {device}"
    raise EnvsDoNotFitError(
        f"n_envs={n_envs:,}: the envs need at least {_gib(n_envs * each)} of {where} ({each / 1024:,.0f} KiB each: "
        f"{what}), and {_gib(available)} are available; use at most {available // each:,} envs here"
    )


def check_replay_buffer_fits(transitions: int, each: int, what: str) -> None:
    """Refuses a replay buffer of ``transitions`` of ``each`` bytes when it exceeds the host memory available,
    before SB3 allocates it."""
    available = available_bytes()
    if available is None or transitions * each <= available:
        return
    raise ReplayBufferDoesNotFitError(
        f"rl.kwargs.buffer_size: a replay buffer of {transitions:,} transitions needs {_gib(transitions * each)} "
        f"of memory ({each:,} bytes each: {what}), and {_gib(available)} are available; set rl.kwargs.buffer_size "
        f"to at most {available // each:,}"
    )


def check_judge_frames_fit(
    field: str, frames: int, each: int, what: str, fix: str, device: torch.device | None = None
) -> None:
    """Refuses ``frames`` frames of a judge of ``each`` bytes (a lower bound; ``what`` says of what) when they exceed
    the memory available (the host's, or ``device``'s), naming ``field`` and ``fix``, before anything is allocated."""
    available = device_available_bytes(device)
    if available is None or frames * each <= available:
        return
    where = "memory" if device is None or device.type == "cpu" else f"memory on {device}"
    raise JudgeFramesDoNotFitError(
        f"{field}: {what} need{'s' if frames == 1 else ''} at least {_gib(frames * each)} of {where}, and "
        f"{_gib(available)} are available; {fix}"
    )


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


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
