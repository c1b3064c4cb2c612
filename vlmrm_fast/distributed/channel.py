"""Messages between rank 0 and one other rank: pickled objects over a gloo group, every wait bounded.

A message is two point-to-point sends, its length (int64) then its bytes. Each rank pair
talks in strict turns (rank 0 sends a call, the rank answers it), so the order on the pair
is the order of the calls. A gloo wait that runs out closes the pair for good, so a timeout
or a dead peer ends the link: it becomes a :class:`RankFailure` naming the peer.
"""

from __future__ import annotations

import contextlib
import datetime
import pickle
import signal
import threading
from typing import Any

import torch
import torch.distributed as dist


class RankFailure(RuntimeError):
    """Another rank died, hung or closed its connection; the sharded run cannot go on."""

    def __init__(self, message: str, rank: int):
        super().__init__(message)
        self.rank = rank


def _reason(error: Exception, timeout: datetime.timedelta) -> str:
    text = str(error)
    if "Timed out" in text or "timeout" in text.lower():
        return f"did not answer within {timeout.total_seconds():g} s (hung, or slower than the timeout)"
    if "closed by peer" in text or "Connection reset" in text or "Broken pipe" in text or "Connection refused" in text:
        return "closed its connection: its process died or exited (see that rank's log)"
    return f"failed: {text}"


@contextlib.contextmanager
def signals_held(signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)):
    """Holds SIGINT and SIGTERM until the block ends, then runs the handlers that were installed
    (Ctrl-C's KeyboardInterrupt, say): a message is then never half sent or half read, and the
    record of which ranks owe a reply matches what they were sent. Python runs signal handlers in
    the main thread only, so elsewhere this holds nothing (and needs not)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append((signum, frame))) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum, frame in held:
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


class Link:
    """Messages with rank ``peer`` (``name`` says who it is in errors), each wait at most ``timeout``."""

    def __init__(self, group: dist.ProcessGroup | None, peer: int, name: str, timeout: datetime.timedelta):
        self.group = group
        self.peer = peer
        self.name = name
        self.timeout = timeout
        self.failure: RankFailure | None = None
        self.bytes_sent = 0
        self.bytes_received = 0
        self._sending: list[tuple[dist.Work, torch.Tensor]] = []  # gloo reads the tensors until the sends complete

    def send(self, message: Any) -> None:
        """Posts ``message``; it is delivered when the peer receives (confirmed by the next call)."""
        self._check()
        self._confirm_sends("sending")
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        length = torch.tensor([len(payload)], dtype=torch.int64)
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        with self._whole("sending"), self._failing("sending"):
            self._sending = [(dist.isend(length, self.peer, self.group), length)]
            self._sending.append((dist.isend(data, self.peer, self.group), data))
        self.bytes_sent += length.numel() * 8 + data.numel()

    def receive(self, doing: str = "answering") -> Any:
        """The peer's next message (waits at most ``timeout`` for each part)."""
        self._check()
        self._confirm_sends(doing)
        with self._whole(doing):
            length = torch.empty(1, dtype=torch.int64)
            self._receive_into(length, doing)
            data = torch.empty(int(length.item()), dtype=torch.uint8)
            self._receive_into(data, doing)
        self.bytes_received += 8 + data.numel()
        return pickle.loads(data.numpy())

    def flush(self, doing: str = "receiving") -> None:
        """Waits until the peer has received what was sent (before leaving the group, say)."""
        self._check()
        self._confirm_sends(doing)

    def _confirm_sends(self, doing: str) -> None:
        sending, self._sending = self._sending, []
        for work, _tensor in sending:
            self._wait(work, doing)

    def _receive_into(self, tensor: torch.Tensor, doing: str) -> None:
        with self._failing(doing):  # posting fails at once on a pair that is already closed
            dist.irecv(tensor, self.peer, self.group).wait(self.timeout)

    def _wait(self, work: dist.Work, doing: str) -> None:
        with self._failing(doing):
            work.wait(self.timeout)

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    @contextlib.contextmanager
    def _whole(self, doing: str):
        """A message interrupted between its parts (an exception from outside, in a thread that
        cannot hold signals) leaves the pair out of step: the link is given up."""
        try:
            yield
        except BaseException:
            if self.failure is None:
                self.failure = RankFailure(
                    f"the message with rank {self.peer} ({self.name}) was interrupted midway "
                    f"while {doing}; that link is given up",
                    self.peer,
                )
            raise

    @contextlib.contextmanager
    def _failing(self, doing: str):
        """Turns a gloo error on this link into a :class:`RankFailure` naming the peer, and keeps it."""
        try:
            yield
        except RankFailure:
            raise
        except RuntimeError as error:
            self.failure = RankFailure(
                f"rank {self.peer} ({self.name}) {_reason(error, self.timeout)} while {doing}", self.peer
            )
            self._sending = []
            raise self.failure from error
