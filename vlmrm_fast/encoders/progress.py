"""One-line progress messages on stderr for slow encoder set-up (compilation, engine builds)."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator


def note(message: str, enabled: bool = True) -> None:
    if enabled:
        print(f"[vlmrm-fast] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stage(message: str, enabled: bool = True) -> Iterator[None]:
    """Prints ``message ...`` before the block and how long it took after it."""
    note(f"{message} ...", enabled)
    start = time.perf_counter()
    yield
    note(f"{message}: done in {time.perf_counter() - start:.1f} s", enabled)
