"""The gather alone: rank 0 sends every other rank a step's actions and reads their replies back, with
no env behind them, the old way and the new way side by side in one run.

Run under torchrun with G ranks (every rank runs this script):

    python -m torch.distributed.run --standalone --nproc-per-node 8 bench/bench_gather.py \\
        --envs-per-rank 64 --repeats 300 --out bench/out/gather_8.json

  before   the protocol of vlmrm-fast before the parallel gather (channel.Link at bb07531, re-implemented here):
           a message is its length, then its bytes, two gloo messages; rank 0 reads the replies one
           rank after another, each part a blocking receive posted when it is read
  after    this package's channel.Link and receive_all: one gloo message per reply, every receive
           posted when the calls go out, read in parallel
  env      ShardedVecEnv.step (heartbeat, bookkeeping and all) over shards whose step costs nothing

A reply is a humanoid step's: 348 float64 observations, a float32 reward, a done and an info dict
per env (about 3.1 KB per env). "before" and "after" alternate step by step, so that both see the
same load; "env" runs after them. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import pickle
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast.distributed import ShardedVecEnv, launched_rank, serve_shard  # noqa: E402
from vlmrm_fast.distributed.channel import UNBOUNDED, Link, receive_all  # noqa: E402
from vlmrm_fast.distributed.launch import Launch, join  # noqa: E402
from vlmrm_fast.distributed.protocol import Built, ShardSpec  # noqa: E402

TIMEOUT = datetime.timedelta(minutes=5)
OBS, ACTIONS = 348, 17  # the humanoid's


def step_reply(envs: int, rng: np.random.Generator) -> tuple:
    """What a rank's step returns for ``envs`` humanoid envs."""
    obs = rng.standard_normal((envs, OBS))
    infos = [{"gt_reward": float(rng.standard_normal()), "TimeLimit.truncated": False} for _ in range(envs)]
    return obs, rng.standard_normal(envs).astype(np.float32), np.zeros(envs, bool), infos


class LegacyLink:
    """channel.Link as it was at bb07531: the length (int64), then the bytes; each receive posted when
    it is read and waited for before the next."""

    def __init__(self, group, peer: int):
        self.group, self.peer, self._sending = group, peer, []

    def send(self, message) -> None:
        self._confirm()
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        length = torch.tensor([len(payload)], dtype=torch.int64)
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        self._sending = [
            (dist.isend(length, self.peer, self.group), length),
            (dist.isend(data, self.peer, self.group), data),
        ]

    def receive(self):
        self._confirm()
        length = torch.empty(1, dtype=torch.int64)
        dist.irecv(length, self.peer, self.group).wait(TIMEOUT)
        data = torch.empty(int(length.item()), dtype=torch.uint8)
        dist.irecv(data, self.peer, self.group).wait(TIMEOUT)
        return pickle.loads(data.numpy())

    def _confirm(self) -> None:
        for work, _ in self._sending:
            work.wait(TIMEOUT)
        self._sending = []


def protocols(args, rank: int, world: int) -> dict[str, list[float]]:
    """Alternates a step of "before" and one of "after" ``repeats`` times; rank 0's seconds of each."""
    legacy, current = join(TIMEOUT), join(TIMEOUT)
    rng = np.random.default_rng(rank)
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    try:
        if rank == 0:
            old = {r: LegacyLink(legacy.group, r) for r in range(1, world)}
            new = {r: Link(current.group, r, f"rank {r}", TIMEOUT) for r in range(1, world)}
            actions = rng.uniform(-1, 1, (args.envs_per_rank, ACTIONS)).astype(np.float32)
            for i in range(args.warmup + args.repeats):
                start = time.perf_counter()
                if i % 2 == 0:
                    for link in old.values():
                        link.send(("step", actions))
                    replies = [link.receive() for link in old.values()]
                else:
                    for link in new.values():
                        link.send(("step", actions))
                        link.expect()
                    replies = list(receive_all(new).values())
                elapsed = time.perf_counter() - start
                assert all(len(reply[0]) == args.envs_per_rank for reply in replies)
                if i >= args.warmup:
                    seconds["before" if i % 2 == 0 else "after"].append(elapsed)
            for link in new.values():
                link.flush()
            for link in old.values():
                link._confirm()
        else:
            reply = step_reply(args.envs_per_rank, rng)
            old_link, new_link = LegacyLink(legacy.group, 0), Link(current.group, 0, "rank 0", TIMEOUT)
            new_link.expect()
            for i in range(args.warmup + args.repeats):
                if i % 2 == 0:
                    old_link.receive()
                    old_link.send(reply)
                else:
                    new_link.receive(timeout=UNBOUNDED)
                    new_link.send(reply)
                    new_link.expect()
            old_link._confirm()
            new_link.flush()
        dist.barrier(group=current.group)
    finally:
        legacy.leave()
        current.leave()
    return seconds


class FreeShard:
    """A shard whose step costs nothing: it returns a prepared humanoid reply."""

    def __init__(self, spec: ShardSpec):
        import gymnasium

        self.reply = step_reply(len(spec.envs), np.random.default_rng(spec.envs.start))
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (OBS,), np.float64)
        self.action_space = gymnasium.spaces.Box(-1, 1, (ACTIONS,), np.float32)
        self.render_size, self.episode_length = (64, 64), 100
        self.reward_model = type("Model", (), {"device": torch.device("cpu")})()

    def reset(self):
        return self.reply[0]

    def step(self, actions):
        return self.reply

    def close(self) -> None:
        pass


def env_steps(args, rank: int, world: int) -> list[float]:
    """ShardedVecEnv.step over free shards (rank 0 holds none): rank 0's seconds per step."""
    ShardSpec.build = lambda spec: FreeShard(spec)  # type: ignore[method-assign]
    Built.of = classmethod(  # type: ignore[method-assign]
        lambda cls, shard: cls("cpu", shard.observation_space, shard.action_space, (64, 64), 100)
    )
    if rank != 0:
        serve_shard()
        return []
    env = ShardedVecEnv(
        "humanoid-kneeling", args.envs_per_rank * (world - 1), model="vlmrm-tiny", learner_envs=0, verbose=0
    )
    seconds = []
    try:
        env.reset()
        actions = np.zeros((env.num_envs, ACTIONS), np.float32)
        for i in range(args.warmup + args.repeats // 2):
            start = time.perf_counter()
            env.step(actions)
            if i >= args.warmup:
                seconds.append(time.perf_counter() - start)
    finally:
        env.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs-per-rank", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=300, help="steps of before and after together")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    launch = Launch.detect()
    if launch.world_size < 2:
        raise SystemExit("run under torchrun with 2 or more ranks (see the header)")
    rank, world = launched_rank(), launch.world_size
    seconds = protocols(args, rank, world)
    seconds["env"] = env_steps(args, rank, world)
    if rank != 0:
        return
    ms = {mode: 1e3 * statistics.median(values) for mode, values in seconds.items()}
    quartiles = {mode: [1e3 * q for q in statistics.quantiles(values, n=4)] for mode, values in seconds.items()}
    reply_bytes = len(pickle.dumps(step_reply(args.envs_per_rank, np.random.default_rng(0)), protocol=5))
    report = {
        "ranks": world,
        "envs_per_rank": args.envs_per_rank,
        "reply_bytes": reply_bytes,
        "median_ms": ms,
        "quartiles_ms": quartiles,
        "steps": {mode: len(values) for mode, values in seconds.items()},
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        "machine": common.machine(),
    }
    print(
        f"{world} ranks, {args.envs_per_rank} envs per rank ({reply_bytes / 1e3:.0f} KB a reply): gather ms "
        + ", ".join(
            f"{mode} {value:.3f} (IQR {quartiles[mode][0]:.3f}-{quartiles[mode][2]:.3f})" for mode, value in ms.items()
        )
        + f"; after/before {ms['after'] / ms['before']:.2f}"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
