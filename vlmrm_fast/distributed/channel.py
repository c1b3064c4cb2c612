"""Messages between rank 0 and one other rank: pickled objects over a gloo group, every wait bounded.

A message is one gloo point-to-point message: its length (8 bytes), then its pickled bytes. The
receiver posts the receive of the next message ahead of time (:meth:`Link.expect`), so a reply
travels the moment it is sent, and rank 0 posts every rank's receive at once: the replies of all
ranks arrive in parallel (:func:`receive_all`), and a step waits for the slowest, not for their sum.

A receive is posted before the message's length is known, into a buffer of the link's capacity:
gloo delivers a shorter message into a longer buffer (a longer one aborts the process), so both
ends size it the same way, from the size of the last message on the link (:func:`next_capacity`).
A message longer than the capacity sends its rest as a second message of its exact size, which
costs one more round trip.

Each rank pair talks in strict turns (rank 0 sends a call, the rank answers it), so the order on
the pair is the order of the calls. A gloo wait that runs out closes every pair of the group for
good, so a timeout or a dead peer ends the link: it becomes a :class:`RankFailure` naming the peer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import pickle
import signal
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist

#: the length word that starts every message
HEADER = struct.Struct("<q")
#: the receive buffer of a link's first message, and the smallest one
MIN_CAPACITY = 64 * 1024
#: the largest receive buffer posted ahead of time (a longer message comes in two parts)
MAX_CAPACITY = 64 * 1024 * 1024
#: the wait of a serving rank for rank 0's next call: rank 0's heartbeat bounds it, not a timeout
UNBOUNDED = datetime.timedelta(days=365)


def next_capacity(size: int) -> int:
    """The receive buffer for the message after one of ``size`` bytes: twice it, as a power of two,
    within [MIN_CAPACITY, MAX_CAPACITY]. Both ends of a link compute it from the same sizes."""
    return min(MAX_CAPACITY, max(MIN_CAPACITY, 1 << (2 * size - 1).bit_length()))


class RankFailure(RuntimeError):
    """Other ranks died, hung or closed their connection; the sharded run cannot go on.

    ``rank``: the first of them; ``ranks``: all of them (every failed rank is named in the message).
    ``kind``: ``"closed"`` (its process died or exited), ``"timeout"`` (no answer within the
    timeout), ``"silent"`` (no heartbeat), ``"collateral"`` (the group was closed because of another
    rank) or ``"error"``.
    """

    def __init__(self, message: str, rank: int, *, ranks: Iterable[int] = (), kind: str = "error"):
        super().__init__(message)
        self.rank = rank
        self.ranks = tuple(ranks) or (rank,)
        self.kind = kind

    @classmethod
    def of(cls, failures: Iterable[RankFailure]) -> RankFailure:
        """One failure naming every rank of ``failures`` (one line each, in rank order)."""
        failures = sorted(failures, key=lambda f: f.ranks)
        if len(failures) == 1:
            return failures[0]
        ranks = sorted({r for f in failures for r in f.ranks})
        lines = "\n".join(f"  {f}" for f in failures)
        return cls(f"{len(ranks)} ranks failed:\n{lines}", ranks[0], ranks=ranks, kind=failures[0].kind)


def _kind(error: Exception) -> str:
    text = str(error)
    if "pair closure" in text:  # another wait on the group ran out, or the group was given up
        return "collateral"
    if "Timed out" in text or "timeout" in text.lower():
        return "timeout"
    if any(word in text for word in ("closed by peer", "Connection reset", "Broken pipe", "Connection refused")):
        return "closed"
    return "error"


def _reason(kind: str, error: Exception, timeout: datetime.timedelta) -> str:
    if kind in ("timeout", "collateral"):
        return f"did not answer within {timeout.total_seconds():g} s (hung, or slower than the timeout)"
    if kind == "closed":
        return "closed its connection: its process died or exited (see that rank's log)"
    return f"failed: {error}"


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


@dataclasses.dataclass
class _Arrival:
    """A message whose first part has arrived: its buffer, its size, the receive of its rest (if any)."""

    buffer: torch.Tensor
    size: int
    rest: dist.Work | None = None


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
        self._send_capacity = self._receive_capacity = MIN_CAPACITY
        self._sending: list[tuple[dist.Work, Any]] = []  # gloo reads the buffers until the sends complete
        self._posted: tuple[dist.Work, torch.Tensor] | None = None  # the receive of the next message
        self._arrival: _Arrival | None = None
        self._buffer = torch.empty(0, dtype=torch.uint8)  # reused: unpickling copies what it keeps

    @property
    def who(self) -> str:
        return f"rank {self.peer} ({self.name})"

    @property
    def complete(self) -> bool:
        """True when the message :meth:`arrive` waited for came whole (no rest to wait for)."""
        return self._arrival is not None and self._arrival.rest is None

    def send(self, message: Any) -> None:
        """Posts ``message``; it is delivered when the peer receives (confirmed by the next call)."""
        self._check()
        self._confirm_sends("sending")
        out = io.BytesIO()
        out.write(bytes(HEADER.size))
        pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
        size = out.tell()
        view = out.getbuffer()
        HEADER.pack_into(view, 0, size - HEADER.size)
        data = torch.frombuffer(view, dtype=torch.uint8)
        first = min(size, self._send_capacity)
        with self._whole("sending"), self._failing("sending"):
            self._sending = [(dist.isend(data[:first], self.peer, self.group), (out, view, data))]
            if size > first:
                self._sending.append((dist.isend(data[first:], self.peer, self.group), None))
        self._send_capacity = next_capacity(size)
        self.bytes_sent += size

    def expect(self) -> None:
        """Posts the receive of the peer's next message (once): it then lands as soon as it is sent."""
        self._check()
        if self._posted is None and self._arrival is None:
            if self._buffer.numel() != self._receive_capacity:
                self._buffer = torch.empty(self._receive_capacity, dtype=torch.uint8)
            buffer = self._buffer
            with self._failing("posting a receive"):  # posting fails at once on a pair that is already closed
                self._posted = (dist.irecv(buffer, self.peer, self.group), buffer)

    def receive(
        self, doing: str = "answering", *, deadline: float | None = None, timeout: datetime.timedelta | None = None
    ) -> Any:
        """The peer's next message; waits until ``deadline`` (time.monotonic()), else at most
        ``timeout`` (default: the link's) for each part."""
        self.arrive(doing, deadline=deadline, timeout=timeout)
        return self.take(doing, deadline=deadline, timeout=timeout)

    def arrive(
        self, doing: str = "answering", *, deadline: float | None = None, timeout: datetime.timedelta | None = None
    ) -> None:
        """Waits for the first part of the next message; posts the receive of its rest, if it has one."""
        self._check()
        if self._arrival is not None:
            return
        self._confirm_sends(doing)
        self.expect()
        assert self._posted is not None
        with self._whole(doing):
            work, buffer = self._posted
            self._wait(work, doing, deadline, timeout)
            self._posted = None
            size = HEADER.unpack_from(buffer.numpy(), 0)[0] + HEADER.size
            if size <= buffer.numel():
                self._arrival = _Arrival(buffer, size)
            else:
                whole = torch.empty(size, dtype=torch.uint8)
                whole[: buffer.numel()] = buffer
                with self._failing(doing):
                    rest = dist.irecv(whole[buffer.numel() :], self.peer, self.group)
                self._arrival = _Arrival(whole, size, rest)

    def take(
        self, doing: str = "answering", *, deadline: float | None = None, timeout: datetime.timedelta | None = None
    ) -> Any:
        """The message whose first part :meth:`arrive` waited for (waits for its rest)."""
        self._check()
        if self._arrival is None:
            raise RuntimeError(f"{self.who}: take() without arrive()")
        with self._whole(doing):
            arrival = self._arrival
            if arrival.rest is not None:
                self._wait(arrival.rest, doing, deadline, timeout)
            self._arrival = None
        self._receive_capacity = next_capacity(arrival.size)
        self.bytes_received += arrival.size
        return pickle.loads(arrival.buffer.numpy()[HEADER.size : arrival.size])

    def flush(self, doing: str = "receiving") -> None:
        """Waits until the peer has received what was sent (before leaving the group, say)."""
        self._check()
        self._confirm_sends(doing)

    def fail(self, failure: RankFailure) -> None:
        """Gives the link up with ``failure`` (raised by its next use): another rank's wait found the peer gone."""
        if self.failure is None:
            self.failure = failure
        self._sending, self._posted, self._arrival = [], None, None

    def _confirm_sends(self, doing: str) -> None:
        sending, self._sending = self._sending, []
        for work, _buffers in sending:
            self._wait(work, doing, None, None)

    def _wait(self, work: dist.Work, doing: str, deadline: float | None, timeout: datetime.timedelta | None) -> None:
        if deadline is not None:
            wait = datetime.timedelta(seconds=max(deadline - time.monotonic(), 1e-3))
        else:
            wait = timeout or self.timeout
        with self._failing(doing, timeout or self.timeout):
            work.wait(wait)

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
                    f"the message with {self.who} was interrupted midway while {doing}; that link is given up",
                    self.peer,
                )
            raise

    @contextlib.contextmanager
    def _failing(self, doing: str, timeout: datetime.timedelta | None = None):
        """Turns a gloo error on this link into a :class:`RankFailure` naming the peer, and keeps it."""
        try:
            yield
        except RankFailure:
            raise
        except RuntimeError as error:
            kind = _kind(error)
            reason = _reason(kind, error, timeout or self.timeout)
            self.fail(RankFailure(f"{self.who} {reason} while {doing}", self.peer, kind=kind))
            assert self.failure is not None
            raise self.failure from error


def receive_all(
    links: Mapping[int, Link], doing: str = "answering", *, deadline: float | None = None
) -> dict[int, Any]:
    """Every link's next message, by rank; a link that fails gives its :class:`RankFailure` instead.

    The receives were posted ahead of time (:meth:`Link.expect`), so the messages travel in
    parallel; the waits share one ``deadline`` (time.monotonic(); default: each link's timeout),
    so the whole gather waits for the slowest rank, not for their sum."""
    out: dict[int, Any] = {}
    for rank, link in links.items():
        try:
            link.expect()
        except RankFailure as failure:
            out[rank] = failure
    split: list[int] = []  # messages longer than the capacity: their rest is read after every first part
    for rank, link in links.items():
        if rank in out:
            continue
        try:
            link.arrive(doing, deadline=deadline)
            if link.complete:  # read now, while the later ranks' replies are still on their way
                out[rank] = link.take(doing, deadline=deadline)
            else:
                split.append(rank)
        except RankFailure as failure:
            out[rank] = failure
    for rank in split:
        try:
            out[rank] = links[rank].take(doing, deadline=deadline)
        except RankFailure as failure:
            out[rank] = failure
    return {rank: out[rank] for rank in links}
