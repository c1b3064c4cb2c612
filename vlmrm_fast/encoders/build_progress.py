"""Progress on stderr for slow encoder set-up (compilation, engine builds).

:func:`note` and :func:`stage` print one line each. :class:`Phases` shows a job made of named
steps: on a terminal one progress bar whose elapsed time ticks while a step runs (a compile
prints nothing for tens of seconds otherwise), elsewhere (logs, CI) one line per finished step.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Sequence


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


class Phases:
    """``with Phases("compiling X", ["trace", "capture"]) as p: with p.step("trace"): ...``"""

    def __init__(self, title: str, steps: Sequence[str], enabled: bool = True, *, tty: bool | None = None):
        self.title = title
        self.steps = list(steps)
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._bar = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._start = 0.0
        self.durations: dict[str, float] = {}

    def __enter__(self) -> Phases:
        self._start = time.perf_counter()
        if not self.enabled:
            return self
        if self.tty:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=len(self.steps),
                desc=f"[vlmrm-fast] {self.title}",
                unit="step",
                file=sys.stderr,
                bar_format="{desc}: {n_fmt}/{total_fmt} steps |{bar:20}| {elapsed}",
                leave=True,
            )
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        else:
            note(f"{self.title} ({', '.join(self.steps)}) ...")
        return self

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            bar = self._bar
            if bar is not None:
                bar.refresh()

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        begin = time.perf_counter()
        if self._bar is not None:
            self._bar.set_description_str(f"[vlmrm-fast] {self.title}: {name}", refresh=True)
        yield
        self.durations[name] = time.perf_counter() - begin
        if self._bar is not None:
            self._bar.update(1)
        elif self.enabled:
            note(f"{self.title}: {name} done in {self.durations[name]:.1f} s")

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.set_description_str(f"[vlmrm-fast] {self.title}", refresh=False)
            self._bar.close()
        if self.enabled and exc_type is None:
            note(f"{self.title}: done in {self.elapsed:.1f} s")

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start
