"""The envs and their rewards split over the ranks of a torchrun job (gloo messages).

    # python -m torch.distributed.run --nproc-per-node 2 loop.py
    from vlmrm_fast.distributed import ShardedVecEnv, serve_shard, launched_rank

    if launched_rank() == 0:
        env = ShardedVecEnv("humanoid-kneeling", 64, model="ViT-L-14/laion2b_s32b_b82k", seed=0)
        ...                      # an SB3 VecEnv of all 64 envs; rank 1 steps envs 32-63
        env.close()              # the other ranks' serve_shard() returns
    else:
        serve_shard()

Modules: ``config`` (DistributedConfig: rank 0's envs, the timeout, the heartbeat), ``launch``
(torchrun's variables, the split, the devices, the group, the launches refused), ``channel``
(messages with one rank, receives posted ahead, bounded waits, :class:`RankFailure`), ``heartbeat``
(every rank shows it is alive), ``protocol`` (what is said), ``timings`` (per-rank step times),
``sharded`` (the VecEnv on rank 0), ``serve`` (the other ranks), ``jobs`` (``vlmrm-fast train``),
``run`` (torchrun with what its restarts need: ``python -m vlmrm_fast.distributed.run``).
See docs/scale-out.md.
"""

from typing import TYPE_CHECKING, Any

# Names load on first use, so that a light module of the package (``distributed.config``, read by the
# training config) does not import the sharded VecEnv and with it the whole env stack.
_LAZY = {
    "RankFailure": "vlmrm_fast.distributed.channel",
    "DistributedConfig": "vlmrm_fast.distributed.config",
    "DEFAULT_TIMEOUT": "vlmrm_fast.distributed.launch",
    "Launch": "vlmrm_fast.distributed.launch",
    "LayoutError": "vlmrm_fast.distributed.launch",
    "launched": "vlmrm_fast.distributed.launch",
    "plan_shards": "vlmrm_fast.distributed.launch",
    "shard_device": "vlmrm_fast.distributed.launch",
    "shard_devices": "vlmrm_fast.distributed.launch",
    "use_device": "vlmrm_fast.distributed.launch",
    "serve_shard": "vlmrm_fast.distributed.serve",
    "Shard": "vlmrm_fast.distributed.sharded",
    "ShardedVecEnv": "vlmrm_fast.distributed.sharded",
}

if TYPE_CHECKING:  # the names as the type checker sees them
    from vlmrm_fast.distributed.channel import RankFailure
    from vlmrm_fast.distributed.config import DistributedConfig
    from vlmrm_fast.distributed.launch import (
        DEFAULT_TIMEOUT,
        Launch,
        LayoutError,
        launched,
        plan_shards,
        shard_device,
        shard_devices,
        use_device,
    )
    from vlmrm_fast.distributed.serve import serve_shard
    from vlmrm_fast.distributed.sharded import Shard, ShardedVecEnv


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def launched_rank() -> int:
    """This process's rank (0 outside a job)."""
    from vlmrm_fast.distributed.launch import Launch

    return Launch.detect().rank


__all__ = [
    "DEFAULT_TIMEOUT",
    "DistributedConfig",
    "Launch",
    "LayoutError",
    "RankFailure",
    "Shard",
    "ShardedVecEnv",
    "launched",
    "launched_rank",
    "plan_shards",
    "serve_shard",
    "shard_device",
    "shard_devices",
    "use_device",
]
