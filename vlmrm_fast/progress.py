"""Progress for long jobs: a bar on a terminal, plain lines elsewhere.

A bar redraws itself with carriage returns, which a log file or a pipe keeps as junk. When stderr is
not a terminal, :func:`progress_bar` gives :class:`PlainProgress` instead: one line when the job
starts, at most one every ``interval`` seconds while it runs, and one at the end, each a whole line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

#: Seconds between two plain progress lines.
PLAIN_INTERVAL = 10.0


def on_terminal(stream: TextIO | None = None) -> bool:
    """True when ``stream`` (stderr by default) is a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class PlainProgress:
    """tqdm's calls (``update``, ``n``, ``set_postfix``, ``refresh``, ``close``, ``write``) as plain lines:
    ``desc: n/total unit (p%), rate unit/s, postfix``."""

    def __init__(
        self,
        *,
        total: int | None,
        desc: str,
        unit: str,
        initial: int = 0,
        interval: float = PLAIN_INTERVAL,
        stream: TextIO | None = None,
    ):
        self.total = total
        self.desc = desc
        self.unit = unit
        self.n = initial
        self.interval = interval
        self.stream = stream
        self._initial = initial
        self._start = time.monotonic()
        self._last = self._start
        self._postfix = ""
        self._closed = False
        self._print()

    def _out(self) -> TextIO:
        return sys.stderr if self.stream is None else self.stream

    def _print(self) -> None:
        count = f"{self.n:,}/{self.total:,}" if self.total else f"{self.n:,}"
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        elapsed = time.monotonic() - self._start
        rate = (
            f", {(self.n - self._initial) / elapsed:,.1f} {self.unit}/s"
            if elapsed > 0 and self.n > self._initial
            else ""
        )
        postfix = f", {self._postfix}" if self._postfix else ""
        print(f"{self.desc}: {count} {self.unit}{share}{rate}{postfix}", file=self._out(), flush=True)
        self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self._last >= self.interval:
            self._print()

    def set_postfix(self, values: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        items = {**(values or {}), **kwargs}
        self._postfix = ", ".join(f"{k} {v}" for k, v in items.items())

    def refresh(self) -> None:
        pass  # the next line shows the new count

    def write(self, line: str) -> None:
        print(line, file=self._out(), flush=True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._print()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(
    *,
    total: int | None,
    desc: str,
    unit: str,
    enabled: bool = True,
    initial: int = 0,
    leave: bool = False,
    rich: bool = False,
) -> Any:
    """A tqdm bar on a terminal (``rich``: tqdm's rich bar), plain lines otherwise, nothing when not ``enabled``."""
    if not enabled:
        from tqdm import tqdm

        return tqdm(total=total, disable=True)
    if not on_terminal():
        return PlainProgress(total=total, desc=desc, unit=unit, initial=initial)
    if rich:
        import warnings

        from tqdm import TqdmExperimentalWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TqdmExperimentalWarning)
            from tqdm.rich import tqdm as rich_tqdm

            return rich_tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave)
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave)


def progress_iter(
    iterable: Iterable[Any], *, total: int | None = None, desc: str, unit: str, enabled: bool = True
) -> Iterator[Any]:
    """``iterable``'s items, with :func:`progress_bar` counting them."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with progress_bar(total=total, desc=desc, unit=unit, enabled=enabled) as bar:
        for item in iterable:
            yield item
            bar.update(1)
