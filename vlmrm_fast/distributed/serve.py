"""serve_shard: what every rank but 0 runs in a sharded job.

It tells rank 0 who it is, builds the envs rank 0 gives it (a FastVLMRewardVecEnv on its
own device), then answers rank 0's calls until rank 0 closes, like a SubprocVecEnv worker.
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import sys
import threading

from vlmrm_fast.distributed.channel import Link
from vlmrm_fast.distributed.launch import DEFAULT_TIMEOUT, Launch, LayoutError, as_timeout, join
from vlmrm_fast.distributed.protocol import Call, Refuse, Reply, ShardSpec, answer


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
    job's layout, :class:`RankFailure` when rank 0 dies or is silent for longer than ``timeout``
    (seconds or a timedelta; it includes rank 0's time between steps, e.g. its gradient
    updates), and the error of building the envs when that fails here.
    """
    launch = Launch.detect()
    if launch.rank == 0:
        raise RuntimeError("rank 0 builds the ShardedVecEnv; serve_shard() is for the other ranks")
    timeout = as_timeout(timeout)
    membership = join(timeout)
    link = Link(membership.group, 0, "the learner", timeout)
    shard = None
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
            try:
                shard = order.build()
            except Exception as error:
                link.send(Reply.of_error(error))
                if _is_close(link.receive("closing after the failed build")):
                    link.send(Reply())
                    link.flush("closing")
                raise
            link.send(Reply(value=str(shard.reward_model.device)))
            while not _is_close(call := link.receive("sending the next call")):
                link.send(answer(shard, call))
            link.send(Reply())
            link.flush("closing")
    finally:
        if shard is not None:
            shard.close()
        membership.leave()
