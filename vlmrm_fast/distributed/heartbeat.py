"""Heartbeats: every rank of a sharded env shows that it is alive, apart from the waits for replies.

Each rank runs a thread that adds one to its counter on the job's store (torch's TCPStore, under a
prefix of the env's own group) every ``interval`` seconds, and reads the counters of the ranks it
depends on: rank 0 watches every serving rank, a serving rank watches rank 0. A counter that has
not moved for ``timeout`` seconds names its rank: its process died, froze (SIGSTOP, a swapping
node) or lost the network. That holds while rank 0 learns or saves between steps, when no reply
is awaited, so the step timeout no longer has to cover rank 0's gradient updates and saves.

What a heartbeat cannot see: a rank whose process runs but whose step hangs (a GPU hang) keeps
beating; the reply timeout names it. The thread needs the GIL: a rank whose main thread holds it
inside one C call for longer than ``timeout`` looks silent.

Rank 0 also leaves a stop notice on the store when the run ends because of a failure, so that the
serving ranks, whose connection to rank 0 then closes, can say why.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Mapping

import torch.distributed as dist

#: keys of one sharded env live under its group's prefix, then this one
PREFIX = "vlmrm_fast/heartbeat/"
STOP_KEY = "stop"


def _store_of(group: dist.ProcessGroup, timeout: float) -> dist.Store:
    """A connection of the heartbeat's own to the group's store (its ops wait at most ``timeout``), under PREFIX."""
    if hasattr(group, "get_group_store"):
        store = group.get_group_store()
    else:  # torch before get_group_store: the store torch keeps for the group
        store = dist.distributed_c10d._world.pg_map[group][1]
    try:
        store = store.clone()  # a connection of its own: a frozen store server cannot block the main thread's ops
        store.set_timeout(datetime.timedelta(seconds=timeout))
    except (AttributeError, RuntimeError):
        pass  # a store that cannot be cloned (FileStore, HashStore): shared, with its own timeout
    return dist.PrefixStore(PREFIX, store)


class Heartbeat:
    """This rank's beat and its watch over other ranks (:meth:`watch`), every ``interval`` seconds.

    ``on_silence`` is called from the heartbeat's thread with the ranks newly found silent
    (rank -> why, one line each); :attr:`silent` keeps them all."""

    def __init__(
        self,
        group: dist.ProcessGroup,
        rank: int,
        *,
        interval: float,
        timeout: float,
        on_silence: Callable[[dict[int, str]], None],
    ):
        self.rank = rank
        self.interval = interval
        self.timeout = timeout
        self.silent: dict[int, str] = {}
        self._on_silence = on_silence
        self._store = _store_of(group, timeout)
        self._watched: dict[int, str] = {}
        self._seen: dict[int, tuple[int | None, float]] = {}  # rank -> (its count, when that count was first seen)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._last_answer = time.monotonic()
        self._store.set(str(rank), "0")
        self._thread = threading.Thread(target=self._run, name=f"vlmrm-heartbeat-rank{rank}", daemon=True)
        self._thread.start()

    def watch(self, ranks: Mapping[int, str]) -> None:
        """Watches ``ranks`` (rank -> how messages name it); each has ``timeout`` seconds for its first beat."""
        now = time.monotonic()
        with self._lock:
            for rank, name in ranks.items():
                self._watched[rank] = name
                self._seen.setdefault(rank, (None, now))

    def announce_stop(self, reason: str) -> None:
        """Leaves ``reason`` for the other ranks (rank 0, when the run ends because of a failure)."""
        try:
            self._store.set(STOP_KEY, reason)
        except Exception:
            pass  # the store is gone too: the other ranks find rank 0 closed, without the reason

    def stop_notice(self) -> str | None:
        """Rank 0's reason for ending the run, if it left one."""
        try:
            if self._store.check([STOP_KEY]):
                return self._store.get(STOP_KEY).decode()
        except Exception:
            pass
        return None

    def close(self, *, keys: tuple[int, ...] = ()) -> None:
        """Stops the thread and removes this rank's counter (and those of ``keys``)."""
        self._stopping.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        for rank in (self.rank, *keys):
            try:
                self._store.delete_key(str(rank))
            except Exception:
                pass

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        self._beat()
        while not self._stopping.wait(self.interval):
            self._beat()

    def _beat(self) -> None:
        with self._lock:
            watched = dict(self._watched)
        now = time.monotonic()
        try:
            self._store.add(str(self.rank), 1)
            counts = {rank: self._store.add(str(rank), 0) for rank in watched}
        except Exception as error:  # the store did not answer within the timeout: its host died or froze
            if now - self._last_answer > self.timeout and not self._stopping.is_set():
                why = (
                    f"the job's store stopped answering ({type(error).__name__}: {error}); "
                    "the rank that hosts it (rank 0's node) died, froze or lost the network"
                )
                self._report({rank: f"rank {rank} ({name}): {why}" for rank, name in watched.items()})
            return
        self._last_answer = time.monotonic()
        newly: dict[int, str] = {}
        for rank, count in counts.items():
            last, since = self._seen.get(rank, (None, now))
            if count != last:
                self._seen[rank] = (count, now)
            elif now - since > self.timeout:
                newly[rank] = (
                    f"rank {rank} ({watched[rank]}) stopped beating: no heartbeat for {now - since:.1f} s "
                    f"(heartbeat timeout {self.timeout:g} s): its process died, froze or lost the network; see its log"
                )
        self._report(newly)

    def _report(self, found: dict[int, str]) -> None:
        with self._lock:
            newly = {rank: why for rank, why in found.items() if rank not in self.silent and rank in self._watched}
            self.silent.update(newly)
        if newly and not self._stopping.is_set():
            self._on_silence(newly)
