"""The two hooks of ``vlmrm-fast train`` under torchrun: every rank but 0 serves and returns;
rank 0 trains on the sharded env (and alone writes checkpoints, logs and videos)."""

from __future__ import annotations

import datetime
import sys
from typing import Any

from vlmrm_fast.distributed.channel import RankFailure
from vlmrm_fast.distributed.launch import DEFAULT_TIMEOUT, Launch, LayoutError


def serving_rank() -> bool:
    """True on every rank but 0 of a job of several ranks."""
    launch = Launch.detect()
    return launch.world_size > 1 and launch.rank != 0


def serve_for_training(timeout: datetime.timedelta | float = DEFAULT_TIMEOUT) -> int:
    """Serves this rank's envs until rank 0 closes; the exit status (0: rank 0 closed the run)."""
    from vlmrm_fast.distributed.serve import serve_shard

    rank = Launch.detect().rank
    try:
        serve_shard(timeout=timeout)
    except LayoutError as error:
        print(f"rank {rank}: the job cannot run: {error}", file=sys.stderr)
        return 2
    except RankFailure as error:
        print(f"rank {rank}: stopping: {error}", file=sys.stderr)
        return 1
    return 0


def make_vec_env(task: str, num_envs: int, *, timeout: datetime.timedelta | float = DEFAULT_TIMEOUT, **env_kwargs: Any):
    """A FastVLMRewardVecEnv in a single process; on rank 0 of a job of several ranks, the ShardedVecEnv
    of the same arguments (the layout printed one line per rank)."""
    if Launch.detect().world_size > 1:
        from vlmrm_fast.distributed.sharded import ShardedVecEnv

        return ShardedVecEnv(task, num_envs, timeout=timeout, **env_kwargs)
    from vlmrm_fast.vec_env import FastVLMRewardVecEnv

    return FastVLMRewardVecEnv(task, num_envs, **env_kwargs)
