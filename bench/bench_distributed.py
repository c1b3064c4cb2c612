"""The cost of splitting the envs over torch.distributed ranks: bytes per step and the gather's time.

Run under torchrun with 2 ranks (every rank runs this script):

    python -m torch.distributed.run --standalone --nproc-per-node 2 bench/bench_distributed.py \\
        --num-envs 8 --render-size 64 --out bench/out/distributed.json

Rank 0 measures, with the same total envs:
  single    one process holding every env (FastVLMRewardVecEnv; rank 1 waits meanwhile)
  sharded   the ShardedVecEnv: each step's time on rank 0, split into its own shard's step and the
            wait for the other rank's reply after it; every rank's own shard step is timed too, so
            overhead = sharded step - the slower rank's shard step (messages, pickling, the gather)
  messages  the same Link messages alone (an action message out, a reply back) for replies of
            1 to 512 envs' worth of bytes: the latency and bandwidth of the gather
and bytes per step that cross ranks (both ways, counted by the links). Prints a table, writes JSON.
``--device cuda:0`` puts both ranks on one GPU (explicit devices may be shared).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.distributed import ShardedVecEnv, launched_rank, serve_shard  # noqa: E402
from vlmrm_fast.distributed.channel import Link  # noqa: E402
from vlmrm_fast.distributed.launch import Launch, join  # noqa: E402
from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv  # noqa: E402

SHARD_STEP_SECONDS: list[float] = []  # this process's shard steps (FastVLMRewardVecEnv.step), timed


def _timed_step(step):
    def timed(self, actions):
        start = time.perf_counter()
        result = step(self, actions)
        SHARD_STEP_SECONDS.append(time.perf_counter() - start)
        return result

    return timed


FastVLMRewardVecEnv.step = _timed_step(FastVLMRewardVecEnv.step)


def random_actions(env, rng: np.random.Generator) -> np.ndarray:
    space = env.action_space
    if hasattr(space, "n"):
        return rng.integers(0, space.n, size=env.num_envs)
    return rng.uniform(space.low, space.high, size=(env.num_envs,) + space.shape).astype(space.dtype)


def time_steps(env, steps: int, warmup: int) -> tuple[list[float], dict[str, int]]:
    """Seconds of each timed step, and the bytes that crossed ranks during them (sharded env)."""
    rng = np.random.default_rng(0)
    env.reset()
    for _ in range(warmup):
        env.step(random_actions(env, rng))
    SHARD_STEP_SECONDS.clear()
    before = dict(getattr(env, "traffic", {}))
    seconds = []
    for _ in range(steps):
        actions = random_actions(env, rng)
        start = time.perf_counter()
        env.step(actions)
        seconds.append(time.perf_counter() - start)
    traffic = {key: value - before[key] for key, value in getattr(env, "traffic", {}).items()}
    return seconds, traffic


def ms(values: list[float]) -> float:
    return 1e3 * statistics.median(values)


def message_round_trips(
    action_bytes: int, reply_bytes_per_env: int, env_counts: list[int], repeats: int
) -> dict[int, float]:
    """Rank 0 sends an action message and rank 1 answers with ``n`` envs' worth of reply bytes (pickled
    numpy arrays, as the replies are): the median milliseconds of one exchange, per ``n``."""
    rank = launched_rank()
    membership = join(dist.default_pg_timeout)
    link = Link(membership.group, 1 - rank, "the other rank", dist.default_pg_timeout)
    result = {}
    try:
        for n in env_counts:
            reply = np.zeros(n * reply_bytes_per_env, np.uint8)
            action = np.zeros(action_bytes * n, np.uint8)
            seconds = []
            for _ in range(repeats):
                if rank == 0:
                    start = time.perf_counter()
                    link.send(action)
                    link.receive()
                    seconds.append(time.perf_counter() - start)
                else:
                    link.receive()
                    link.send(reply)
            link.flush()
            result[n] = ms(seconds) if seconds else 0.0
    finally:
        membership.leave()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="humanoid-kneeling")
    parser.add_argument("--model", default="vlmrm-tiny")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--render-size", type=int, default=64)
    parser.add_argument(
        "--device", default="auto", help="auto: cuda:LOCAL_RANK on GPUs, else the CPU; cuda:0: both ranks share GPU 0"
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--message-envs", type=int, nargs="+", default=[1, 8, 32, 128, 512])
    parser.add_argument("--message-repeats", type=int, default=50)
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    if Launch.detect().world_size != 2:
        raise SystemExit("run under torchrun with 2 ranks (see the header)")
    rank = launched_rank()
    kwargs = {"model": args.model, "alpha": 0.5, "render_size": args.render_size, "seed": 0}

    report: dict = {}
    if rank == 0:
        device = (
            "cuda:0"
            if args.device == "auto" and torch.cuda.is_available()
            else ("cpu" if args.device == "auto" else args.device)
        )
        single = FastVLMRewardVecEnv(args.task, args.num_envs, device=device, **kwargs)
        report["single_step_ms"] = ms(time_steps(single, args.steps, args.warmup)[0])
        single.close()
        env = ShardedVecEnv(args.task, args.num_envs, device=args.device, **kwargs)
        steps, traffic = time_steps(env, args.steps, args.warmup)
        report["layout"] = [shard.describe() for shard in env.shards]
        local = list(SHARD_STEP_SECONDS)
        env.close()
        report["bytes_per_step"] = {
            "to_other_ranks": traffic["sent"] / args.steps,
            "from_other_ranks": traffic["received"] / args.steps,
        }
    else:
        serve_shard()
        local = list(SHARD_STEP_SECONDS)
    timings = [None] * dist.get_world_size()
    dist.all_gather_object(timings, local)
    if rank == 0:
        per_step_slowest = [max(parts) for parts in zip(*timings)]
        report["sharded_step_ms"] = ms(steps)
        report["rank_shard_step_ms"] = [ms(t) for t in timings]
        report["gather_overhead_ms"] = 1e3 * statistics.median([s - m for s, m in zip(steps, per_step_slowest)])
        envs_on_rank1 = args.num_envs // 2
        reply_per_env = int(report["bytes_per_step"]["from_other_ranks"] / envs_on_rank1)
        action_per_env = int(report["bytes_per_step"]["to_other_ranks"] / envs_on_rank1)
        sizes = [reply_per_env, action_per_env]
    else:
        sizes = [0, 0]
    dist.broadcast_object_list(sizes, src=0)
    trips = message_round_trips(sizes[1], sizes[0], args.message_envs, args.message_repeats)
    if rank != 0:
        return
    report["message_round_trip_ms"] = {str(n): value for n, value in trips.items()}
    report["reply_bytes_per_env"], report["action_bytes_per_env"] = sizes
    report["config"] = vars(args) | {"out": str(args.out) if args.out else None}
    report["machine"] = common.machine()
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
