"""SIGINT and SIGTERM during training: finish the step, save a checkpoint, exit with a code that says so.

Cluster schedulers preempt jobs with SIGTERM, people with Ctrl-C. The handler only
records the request (training stops at the next consistent point, see
``callbacks.TrainingControl``); a second signal while the checkpoint is being saved is
acknowledged and otherwise ignored, so the save always finishes. The exit code is
128 + the signal's number, as shells report it: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from vlmrm_fast.failures import Terminated

HANDLED = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    def __init__(self) -> None:
        self.signal: int | None = None
        self.count = 0

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signal) if self.signal is not None else 0

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else ""

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        name = signal.Signals(signum).name
        if self.signal is None:
            self.signal = signum
            message = f"\n{name}: stopping at the next rollout boundary to save a checkpoint\n"
        else:
            message = (
                f"\n{name} again: already stopping; the checkpoint is saved first "
                f"(kill -9 {os.getpid()} abandons it; the checkpoints on disk stay whole)\n"
            )
        # os.write, not print: the handler may run while the main thread is inside a print to stderr.
        os.write(2, message.encode())

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Handles SIGINT and SIGTERM inside the block (main thread only; elsewhere signals stay as they are)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in HANDLED}
        for s in HANDLED:
            signal.signal(s, self._handle)
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Inside the block SIGTERM raises :class:`Terminated` (main thread only): a start stopped by a scheduler
    in its first seconds then says so, instead of vanishing with exit 143 and no word. ``StopRequest``
    takes over once training starts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
