"""The two hooks of ``vlmrm-fast train`` under torchrun: every rank but 0 serves and returns;
rank 0 trains on the sharded env (and alone writes checkpoints, logs and videos)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from vlmrm_fast.distributed.channel import RankFailure
from vlmrm_fast.distributed.config import DEFAULTS, DistributedConfig
from vlmrm_fast.distributed.launch import Launch, LayoutError, check_launcher, check_reward_splits, launched

if TYPE_CHECKING:
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.reward.spec import RewardModelSpec


def check_launch(reward: RewardModelSpec | None = None) -> None:
    """Refuses a launch that cannot work, with the fix (srun tasks without torchrun, torchrun
    restarts on a shared store; see ``launch.check_launcher``), and under torchrun a ``reward`` whose model cannot
    be split over ranks (``launch.check_reward_splits``), the same on every rank."""
    check_launcher()
    if reward is not None and Launch.detect().world_size > 1:
        check_reward_splits(reward.needs)


def serving_rank() -> bool:
    """True on every rank but 0 of a job of several ranks."""
    launch = Launch.detect()
    return launch.world_size > 1 and launch.rank != 0


def serve_for_training(distributed: DistributedConfig) -> int:
    """Serves this rank's envs until rank 0 closes; the exit status (0: rank 0 closed the run)."""
    from vlmrm_fast.distributed.serve import serve_shard

    rank = Launch.detect().rank
    try:
        serve_shard(timeout=distributed.timeout)
    except LayoutError as error:
        print(f"rank {rank}: the job cannot run: {error}", file=sys.stderr)
        return 2
    except RankFailure as error:
        print(f"rank {rank}: stopping: {error}", file=sys.stderr)
        return 1
    return 0


def several_ranks() -> bool:
    """True on rank 0 of a job of several ranks, whose envs are a ShardedVecEnv (each rank plans its own)."""
    return launched()


def make_sharded_env(env: EnvSpec, reward: RewardModelSpec, distributed: DistributedConfig = DEFAULTS, **options: Any):
    """On rank 0 of a job of several ranks, the ShardedVecEnv of ``env`` scored by ``reward``, laid out as
    ``distributed`` says (the layout printed one line per rank). ``options``: FastVLMRewardVecEnv's ``seed``,
    ``env_kwargs``, ``defer_rewards`` (refused: episode batches need every frame in one process)."""
    from vlmrm_fast.distributed.sharded import REFUSED_ARGUMENTS, ShardedVecEnv

    if options.pop("defer_rewards", False):
        raise ValueError(f"ShardedVecEnv: defer_rewards= is not supported: {REFUSED_ARGUMENTS['defer_rewards']}")
    return ShardedVecEnv.from_specs(env, reward, distributed, **options)
