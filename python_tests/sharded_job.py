"""A sharded job for the tests: run on every rank (by torchrun, or as processes given torchrun's variables).

    python -m torch.distributed.run --nproc-per-node 2 python_tests/sharded_job.py OUT CASE [CASE ...]

Rank 0 builds a ShardedVecEnv per case and writes OUT/<case>.npz (a trajectory, see
``trajectory``) or OUT/<case>.json; the other ranks serve. ``--die-at K`` / ``--hang-at K``
make the serving ranks ``--failing`` (default: rank 1) kill themselves / stop answering at their
K-th step; ``frozen`` waits in a long "update" while the test stops rank 1 (SIGSTOP).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import pickle
import signal
import time

import numpy as np

TIMEOUT = 60.0

# (task, num_envs, steps): cartpole takes the gymnasium path, the humanoid the simulator env
TRAJECTORIES = {
    "humanoid": ("humanoid-kneeling", 4, 8),
    "cartpole": ("cartpole", 4, 8),
    "uneven": ("humanoid-kneeling", 5, 8),  # 2 envs on rank 0, 3 on rank 1
    "judge": ("humanoid-kneeling", 4, 8),  # a generative VLM judge (tiny, random) scores on every rank
    "windows": ("humanoid-kneeling", 5, 8),  # each rank keeps the windows of its own envs
}
#: A case's reward model where it is not the tiny CLIP's frames.
CASE_REWARDS = {
    "judge": {"model": "vlmrm-tiny-qwen2-vl", "alpha": 0.0, "image_size": 56},
    "windows": {"model": "viclip-tiny", "window": {"frames": 3}, "score_every": 2},
}
# Cases of a job of 3 ranks: (a TRAJECTORIES case, ShardedVecEnv's distributed arguments).
THREE_RANKS = {
    "uneven_3": ("uneven", {}),  # 1 + 2 + 2: two serving ranks answer in parallel
    # 0 + 2 + 2: rank 0 only learns; per-rank tables (timings calls) between every two steps
    "learner_only_3": ("humanoid", {"learner_envs": 0, "report_every": 1e-9}),
}


def env_kwargs(task: str, case: str | None = None) -> dict:
    """Small frames, short episodes (so that steps end episodes), the tiny CLIP (or the case's model) on the CPU."""
    kwargs = {"model": "vlmrm-tiny", "alpha": 0.5, "device": "cpu", "episode_length": 5, "seed": 3}
    if task.startswith("humanoid"):
        kwargs["render_size"] = 32
    return {**kwargs, **CASE_REWARDS.get(case or "", {})}


def trajectory(env, steps: int) -> dict[str, np.ndarray]:
    """What rank 0 sees over ``steps`` steps of seeded random actions: observations, rewards, dones,
    the env rewards and the terminal observations (zeros where no episode ended)."""
    rng = np.random.default_rng(11)
    space = env.action_space
    record: dict[str, list] = {
        "obs": [env.reset()],
        "rewards": [],
        "dones": [],
        "gt": [],
        "terminal": [],
        "actions": [],
    }
    for _ in range(steps):
        if hasattr(space, "n"):
            actions = rng.integers(0, space.n, size=env.num_envs)
        else:
            actions = rng.uniform(space.low, space.high, size=(env.num_envs,) + space.shape).astype(space.dtype)
        obs, rewards, dones, infos = env.step(actions)
        record["actions"].append(actions)
        record["obs"].append(obs)
        record["rewards"].append(rewards)
        record["dones"].append(dones)
        record["gt"].append([info["gt_reward"] for info in infos])
        record["terminal"].append([info.get("terminal_observation", np.zeros_like(obs[0])) for info in infos])
    return {key: np.asarray(value) for key, value in record.items()}


def run_trajectory(case: str, out: pathlib.Path, rank: int) -> None:
    from vlmrm_fast.distributed import ShardedVecEnv, serve_shard

    base, distributed = THREE_RANKS.get(case, (case, {}))
    task, num_envs, steps = TRAJECTORIES[base]
    if rank != 0:
        serve_shard(timeout=TIMEOUT)
        return
    env = ShardedVecEnv(task, num_envs, timeout=TIMEOUT, **distributed, **env_kwargs(task, base))
    try:
        if distributed:
            env.profile()  # every rank's stage times in the tables
        result = trajectory(env, steps)
        traffic = env.traffic
        result["bytes_per_step"] = np.array([traffic["sent"], traffic["received"]]) / (steps + 1)
        result["layout"] = np.array([s.describe() for s in env.shards])
        result["rank0_sees"] = np.array([env.task.name, env.time_limit, str(env.renderer)])  # what videos read
    finally:
        env.close()
    np.savez(out / f"{case}.npz", **result)


def run_routing(out: pathlib.Path, rank: int) -> None:
    """Per-env calls go to the rank that owns each env, errors come back with their type."""
    from vlmrm_fast.distributed import ShardedVecEnv, serve_shard

    if rank != 0:
        serve_shard(timeout=TIMEOUT)
        return
    env = ShardedVecEnv("humanoid-kneeling", 3, timeout=TIMEOUT, verbose=0, **env_kwargs("humanoid-kneeling"))
    report = {}
    try:
        report["seeds"] = list(env.seed(100))
        env.reset()
        env.set_attr("tag", "far", indices=[2, 1])
        report["tags"] = env.get_attr("tag", indices=[1, 2])
        report["index_of"] = env.get_attr("index", indices=[2, 0, 1])  # each env's index in its rank's shard
        report["qpos_rows"] = len(env.env_method("render", indices=[2]))
        report["wrapped"] = env.env_is_wrapped(object)
        report["images"] = len(env.get_images())
        report["has_missing"] = env.has_attr("no_such_attribute")
        try:
            env.get_attr("no_such_attribute", indices=[2])
        except AttributeError as error:
            report["error_notes"] = list(getattr(error, "__notes__", []))
        env.reset()  # the run goes on after a remote error
    finally:
        env.close()
    (out / "routing.json").write_text(json.dumps(report))


def run_refusal(out: pathlib.Path, rank: int) -> None:
    """More ranks than envs: every rank raises the same LayoutError before any env is built."""
    from vlmrm_fast.distributed import LayoutError, ShardedVecEnv, serve_shard

    try:
        if rank == 0:
            ShardedVecEnv("cartpole", 1, timeout=TIMEOUT, **env_kwargs("cartpole"))
        else:
            serve_shard(timeout=TIMEOUT)
    except LayoutError as error:
        (out / f"refusal_rank{rank}.txt").write_text(str(error))


def run_build_error(out: pathlib.Path, rank: int) -> None:
    """Rank 1 cannot build its envs: rank 0 raises that error, naming rank 1; every rank then closes."""
    from vlmrm_fast.distributed import ShardedVecEnv, serve_shard
    from vlmrm_fast.distributed.protocol import ShardSpec

    try:
        if rank == 0:
            ShardedVecEnv("cartpole", 2, timeout=TIMEOUT, **env_kwargs("cartpole"))
        else:
            build = ShardSpec.build
            ShardSpec.build = lambda self: (_ for _ in ()).throw(RuntimeError("no EGL device here"))
            try:
                serve_shard(timeout=TIMEOUT)
            finally:
                ShardSpec.build = build
    except RuntimeError as error:
        (out / f"build_error_rank{rank}.txt").write_text("\n".join([str(error), *getattr(error, "__notes__", [])]))


def run_messages(out: pathlib.Path, rank: int) -> None:
    """Link messages around the receive capacity (shorter, exactly it, one byte over, many times it,
    then short again), arrays compared after the next messages reused the receive buffer."""
    from vlmrm_fast.distributed.channel import HEADER, MIN_CAPACITY, Link
    from vlmrm_fast.distributed.launch import DEFAULT_TIMEOUT, join

    membership = join(DEFAULT_TIMEOUT)
    link = Link(membership.group, 1 - rank, "the other rank", DEFAULT_TIMEOUT)
    envelope = len(pickle.dumps(np.zeros(0, np.uint8), protocol=pickle.HIGHEST_PROTOCOL)) + HEADER.size
    sizes = [10, MIN_CAPACITY - envelope, MIN_CAPACITY - envelope + 1, 5_000_000, 100, 300_000, 64, 3 * MIN_CAPACITY]
    messages = [np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8) for size in sizes]
    try:
        if rank == 0:
            received = []
            for message in messages:
                link.send(message)
                link.expect()
                received.append(link.receive())
            report = {
                "equal": [bool(np.array_equal(a, b)) for a, b in zip(messages, received)],
                "sizes": [int(m.size) for m in received],
                "bytes": [link.bytes_sent, link.bytes_received],
            }
            (out / "messages.json").write_text(json.dumps(report))
        else:
            for _ in messages:
                link.send(link.receive())
        link.flush()
    finally:
        membership.leave()


def run_frozen(out: pathlib.Path, rank: int) -> None:
    """Rank 0 steps, then sleeps in a long "update" while the test freezes rank 1 (SIGSTOP): the
    heartbeat names rank 1 within its timeout, long before the update ends, and the next step raises."""
    from vlmrm_fast.distributed import RankFailure, ShardedVecEnv, serve_shard

    if rank != 0:
        serve_shard(timeout=TIMEOUT)
        return
    env = ShardedVecEnv(
        "cartpole", 2, timeout=TIMEOUT, heartbeat=0.5, heartbeat_timeout=4.0, verbose=0, **env_kwargs("cartpole")
    )
    report: dict = {}
    try:
        env.reset()
        env.step(np.zeros(2, dtype=np.int64))
        (out / "updating").write_text(str(time.time()))
        update_ends = time.monotonic() + 90
        while not env.silent_ranks and time.monotonic() < update_ends:
            time.sleep(0.05)
        report["named_at"] = time.time()
        report["silent"] = {str(r): why for r, why in env.silent_ranks.items()}
        start = time.monotonic()
        try:
            env.step(np.zeros(2, dtype=np.int64))
        except RankFailure as failure:
            report["failure"] = str(failure)
            report["ranks"] = list(failure.ranks)
        report["step_s"] = time.monotonic() - start
    finally:
        env.close()
    (out / "frozen.json").write_text(json.dumps(report))


def run_devices(out: pathlib.Path, rank: int) -> None:
    """device="auto" on GPUs: where each rank's envs went, and each rank's current CUDA device."""
    import torch

    from vlmrm_fast.distributed import ShardedVecEnv, serve_shard

    if rank != 0:
        serve_shard(timeout=TIMEOUT)
        (out / f"devices_rank{rank}.txt").write_text(str(torch.cuda.current_device()))
        return
    env = ShardedVecEnv("cartpole", 2, timeout=TIMEOUT, verbose=0, **{**env_kwargs("cartpole"), "device": "auto"})
    try:
        env.reset()
        env.step(np.zeros(2, dtype=np.int64))
        report = {"shards": [shard.device for shard in env.shards], "current_device": torch.cuda.current_device()}
    finally:
        env.close()
    (out / "devices.json").write_text(json.dumps(report))


def run_failure(
    out: pathlib.Path, rank: int, die_at: int | None, hang_at: int | None, timeout: float, failing: list[int]
) -> None:
    """Ranks ``failing`` die or hang mid-run; rank 0 must stop with an error naming each of them."""
    from vlmrm_fast.distributed import Launch, ShardedVecEnv, serve_shard
    from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv

    if rank != 0 and rank not in failing:
        serve_shard(timeout=3600)
        return
    if rank != 0:
        stepped = 0
        step = FastVLMRewardVecEnv.step_wait

        def failing_step(self):
            nonlocal stepped
            stepped += 1
            if stepped == die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if stepped == hang_at:
                time.sleep(3600)
            return step(self)

        FastVLMRewardVecEnv.step_wait = failing_step
        serve_shard(timeout=3600)
        return
    envs = Launch.detect().world_size
    env = ShardedVecEnv("cartpole", envs, timeout=timeout, verbose=0, **env_kwargs("cartpole"))
    env.reset()
    (out / "started").write_text(str(time.time()))
    for _ in range(50):
        env.step(np.zeros(envs, dtype=np.int64))
    env.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--die-at", type=int)
    parser.add_argument("--hang-at", type=int)
    parser.add_argument("--timeout", type=float, default=TIMEOUT)
    parser.add_argument("--failing", type=int, nargs="+", default=[1])
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    for case in args.cases:
        if case in TRAJECTORIES or case in THREE_RANKS:
            run_trajectory(case, args.out, rank)
        elif case == "messages":
            run_messages(args.out, rank)
        elif case == "frozen":
            run_frozen(args.out, rank)
        elif case == "routing":
            run_routing(args.out, rank)
        elif case == "refusal":
            run_refusal(args.out, rank)
        elif case == "build_error":
            run_build_error(args.out, rank)
        elif case == "devices":
            run_devices(args.out, rank)
        elif case == "failure":
            run_failure(args.out, rank, args.die_at, args.hang_at, args.timeout, args.failing)
        else:
            raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    main()
