"""serve_shard: what every rank but 0 runs in a sharded job.

It tells rank 0 who it is, builds the envs rank 0 gives it (a FastVLMRewardVecEnv on its
own device), then answers rank 0's calls until rank 0 closes, like a SubprocVecEnv worker.
Meanwhile it beats on the job's store and watches rank 0's beat (``heartbeat.py``), and times
its steps and its waits for rank 0 (``timings.py``).
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import sys
import threading

from vlmrm_fast.distributed.channel import UNBOUNDED, Link, RankFailure
from vlmrm_fast.distributed.heartbeat import Heartbeat
from vlmrm_fast.distributed.launch import DEFAULT_TIMEOUT, Launch, LayoutError, Membership, as_timeout, join
from vlmrm_fast.distributed.protocol import Built, Call, Refuse, Reply, ShardSpec, answer
from vlmrm_fast.distributed.timings import RankClock


def _is_close(message) -> bool:
    return isinstance(message, Call) and message.method == "close"


@contextlib.contextmanager
def _stop_signals_handled(rank: int):
    """Ctrl-C reaches every rank at once (torchrun forwards SIGINT): a serving rank lets rank 0
    decide, save what it must and close the run (if rank 0 dies instead, its connection closes
    and this rank stops with an error). SIGTERM (a launcher or scheduler tearing the job down)
    stops this rank at once, through its cleanup."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def defer(_signum, _frame):
        print(f"rank {rank}: SIGINT received; serving until rank 0 closes", file=sys.stderr, flush=True)

    def stop(_signum, _frame):
        raise SystemExit(f"rank {rank}: SIGTERM received; stopping")

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, defer), signal.SIGTERM: signal.signal(signal.SIGTERM, stop)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_shard(*, timeout: datetime.timedelta | float = DEFAULT_TIMEOUT) -> None:
    """Serves this rank's envs to rank 0's :class:`~vlmrm_fast.distributed.ShardedVecEnv` until it closes.

    Returns when rank 0 closes the env. Raises :class:`LayoutError` when rank 0 refuses the
    job's layout, :class:`RankFailure` when rank 0 dies or stops beating (its heartbeat, whose
    interval and timeout rank 0 sends with the layout, bounds the wait for rank 0's next call,
    through its gradient updates and saves), and the error of building the envs when that fails
    here. ``timeout`` (seconds or a timedelta) bounds the wait for the layout.
    """
    launch = Launch.detect()
    if launch.rank == 0:
        raise RuntimeError("rank 0 builds the ShardedVecEnv; serve_shard() is for the other ranks")
    timeout = as_timeout(timeout)
    membership = join(timeout)
    link = Link(membership.group, 0, "the learner", timeout)
    shard = None
    heartbeat: Heartbeat | None = None
    clock = RankClock()
    try:
        with _stop_signals_handled(launch.rank):
            link.send(Reply(value=launch))
            order = link.receive("laying out the envs")
            if isinstance(order, Refuse):
                raise LayoutError(order.message)
            if not isinstance(order, ShardSpec):  # rank 0 gave up before the layout (another rank failed)
                link.send(Reply())
                link.flush("closing")
                return
            heartbeat = _beat(membership, launch.rank, order)
            try:
                shard = order.build()
            except Exception as error:
                link.send(Reply.of_error(error))
                if _is_close(link.receive("closing after the failed build", timeout=UNBOUNDED)):
                    link.send(Reply())
                    link.flush("closing")
                raise
            link.send(Reply(value=Built.of(shard)))
            while True:
                with clock.timing("idle"):
                    call = link.receive("waiting for the next call", timeout=UNBOUNDED)
                if _is_close(call):
                    break
                link.send(answer(shard, call, clock))
                link.expect()  # the next call lands as soon as rank 0 sends it
            link.send(Reply())
            link.flush("closing")
    except RankFailure as failure:
        raise _explained(failure, heartbeat) from failure
    finally:
        if heartbeat is not None:
            heartbeat.close()
        if shard is not None:
            shard.close()
        membership.leave()


def _beat(membership: Membership, rank: int, order: ShardSpec) -> Heartbeat:
    """Starts this rank's heartbeat, watching rank 0: silent, it is named and the group given up."""

    def rank0_silent(found: dict[int, str]) -> None:
        print(f"rank {rank}: {found[0]}; stopping", file=sys.stderr, flush=True)
        membership.abandon(0)

    heartbeat = Heartbeat(
        membership.group,
        rank,
        interval=order.distributed.heartbeat,
        timeout=order.distributed.heartbeat_timeout,
        on_silence=rank0_silent,
    )
    heartbeat.watch({0: "the learner"})
    return heartbeat


def _explained(failure: RankFailure, heartbeat: Heartbeat | None) -> RankFailure:
    """The failure as this rank knows it best: rank 0 silent (the heartbeat), or rank 0's reason for
    ending the run (its stop notice), else the link's own error."""
    if heartbeat is None:
        return failure
    if 0 in heartbeat.silent:
        return RankFailure(heartbeat.silent[0], 0, kind="silent")
    notice = heartbeat.stop_notice()
    if notice is not None:
        return RankFailure(f"{notice} (and closed its connection to this rank)", 0, kind=failure.kind)
    return failure
