"""The envs split over torch.distributed ranks (gloo on the CPU) against one process: observations,
dones, infos and env rewards bit for bit, VLM rewards to float precision (each rank encodes a smaller
batch; see tolerances.py), and the same layout twice bit for bit; two "nodes" on 127.0.0.1; a dead and
a hung rank named; refusals; `vlmrm-fast train` under torchrun.

Jobs run python_tests/sharded_job.py in child processes (torchrun, or plain processes given
torchrun's variables where the test must control each rank's process).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import sharded_job
import torch
import yaml
from child_process import PreloadedChild, run_python
from tolerances import assert_rewards_close

import vlmrm_fast
from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model
from vlmrm_fast.distributed import Launch, LayoutError, ShardedVecEnv, plan_shards, shard_device, shard_devices

# torchrun jobs of several ranks, each a child process: left out of the quick subset (-m "not slow")
pytestmark = pytest.mark.slow

JOB = str(pathlib.Path(sharded_job.__file__))
TORCHRUN = ["-m", "torch.distributed.run"]
# The same torch thread count in every process as in this one (torchrun would set 1 per rank).
THREADS = {"OMP_NUM_THREADS": str(torch.get_num_threads())}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(extra: dict) -> dict:
    """This process's environment with the tested package on PYTHONPATH (as run_python gives it)."""
    package_root = str(pathlib.Path(vlmrm_fast.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **THREADS, **extra}


def single_process(case: str) -> dict[str, np.ndarray]:
    task, num_envs, steps = sharded_job.TRAJECTORIES[case]
    env = FastVLMRewardVecEnv(task, num_envs, **sharded_job.env_kwargs(task, case))
    try:
        return sharded_job.trajectory(env, steps)
    finally:
        env.close()


def assert_same_run(out: pathlib.Path, case: str) -> None:
    """The sharded run against one process: exact but for the VLM rewards, which agree to float precision."""
    sharded = np.load(out / f"{case}.npz")
    reference = single_process(sharded_job.THREE_RANKS.get(case, (case,))[0])
    assert reference["dones"].any(), "the steps end episodes (terminal observations compared too)"
    for key, expected in reference.items():
        if key == "rewards":
            assert sharded[key].dtype == expected.dtype == np.float32
            assert_rewards_close(sharded[key], expected, err_msg=f"{case}: {key}")
        else:
            np.testing.assert_array_equal(sharded[key], expected, err_msg=f"{case}: {key}")


def assert_same_bits(a: pathlib.Path, b: pathlib.Path, case: str) -> None:
    """Two runs of one layout: every array bit for bit, the rewards included."""
    first, second = np.load(a / f"{case}.npz"), np.load(b / f"{case}.npz")
    for key in ("obs", "rewards", "dones", "gt", "terminal", "actions"):
        np.testing.assert_array_equal(first[key], second[key], err_msg=f"{case}: {key}")


@pytest.fixture(scope="module")
def two_rank_job(tmp_path_factory):
    """One torchrun job of 2 ranks running every case in turn (each case its own sharded env)."""
    out = tmp_path_factory.mktemp("sharded")
    cases = [*sharded_job.TRAJECTORIES, "routing", "refusal", "build_error", "messages"]
    result = run_python(
        [*TORCHRUN, "--standalone", "--nproc-per-node", "2", JOB, str(out), *cases], env=THREADS, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return out, result.stdout


@pytest.mark.parametrize("case", list(sharded_job.TRAJECTORIES))
def test_two_ranks_equal_one_process(two_rank_job, case):
    """humanoid: the simulator env; cartpole: gymnasium envs; uneven: 5 envs as 2 + 3; judge: a generative VLM;
    windows: a video model's windows, each rank keeping those of its own envs (5 envs as 2 + 3)."""
    out, stdout = two_rank_job
    assert_same_run(out, case)
    layout = list(np.load(out / f"{case}.npz")["layout"])
    if case == "uneven":  # rank 0 also learns: it takes the smaller share
        assert (
            layout[0].endswith("envs 0-1")
            and layout[1].endswith("envs 2-4")
            and layout[1].startswith("rank 1 (cpu on ")
        )
    assert "\n".join(f"  {line}" for line in layout) in stdout, "the run prints its layout, one line per rank"


def test_per_env_calls_go_to_the_rank_that_holds_the_env(two_rank_job):
    report = json.loads((two_rank_job[0] / "routing.json").read_text())
    assert report["seeds"] == [100, 101, 102]
    assert report["tags"] == ["far", "far"]
    assert report["index_of"] == [1, 0, 0], "env 2 is env 1 of rank 1's shard, env 1 its env 0; env 0 is rank 0's"
    assert report["qpos_rows"] == 1 and report["images"] == 3 and report["wrapped"] == [False] * 3
    assert report["has_missing"] is False, "an AttributeError on a serving rank stays an AttributeError"
    assert any("raised on rank 1 (envs 1-2 on" in note for note in report["error_notes"])


def test_more_ranks_than_envs_is_refused_on_every_rank(two_rank_job):
    for rank in (0, 1):
        message = (two_rank_job[0] / f"refusal_rank{rank}.txt").read_text()
        assert "the job has 2 ranks but n_envs=1" in message and "launch at most 1 rank" in message


def test_a_rank_that_cannot_build_its_envs_stops_the_job(two_rank_job):
    for rank in (0, 1):
        message = (two_rank_job[0] / f"build_error_rank{rank}.txt").read_text()
        assert message.startswith("no EGL device here")
    assert "raised on rank 1 (env 1 on" in (two_rank_job[0] / "build_error_rank0.txt").read_text()


def test_messages_around_the_receive_capacity_arrive_whole(two_rank_job):
    """A receive is posted before the message's size is known: shorter messages, one of exactly the
    capacity, one byte over it, several megabytes (sent in two parts), then short again."""
    report = json.loads((two_rank_job[0] / "messages.json").read_text())
    assert all(report["equal"]), report
    assert report["bytes"][0] == report["bytes"][1], "every message came back as it went"


def test_three_ranks_gather_in_parallel_and_rank_0_may_only_learn(tmp_path):
    """Two serving ranks answer each step in parallel (5 envs as 1 + 2 + 2), and with learner_envs=0
    rank 0 holds no env (4 envs as 0 + 2 + 2) while per-rank tables are gathered between steps: the
    same trajectories as one process, observations exact and rewards to float precision."""
    cases = list(sharded_job.THREE_RANKS)
    result = run_python(
        [*TORCHRUN, "--standalone", "--nproc-per-node", "3", JOB, str(tmp_path), *cases], env=THREADS, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    for case in cases:
        assert_same_run(tmp_path, case)
    uneven, learner_only = (list(np.load(tmp_path / f"{case}.npz")["layout"]) for case in cases)
    assert [line.split(": ")[1] for line in uneven] == ["env 0", "envs 1-2", "envs 3-4"]
    assert [line.split(": ")[1] for line in learner_only] == ["no envs (the learner only)", "envs 0-1", "envs 2-3"]
    # a learner-only rank 0 still knows the run's task and time limit (train's videos need them); no renderer
    rank0 = list(np.load(tmp_path / f"{cases[1]}.npz")["rank0_sees"])
    assert rank0 == ["humanoid-kneeling", "truncate", "None"], rank0
    tables = [block for block in result.stdout.split("per-rank times over ")[1:]]
    assert len(tables) >= 8, "a table after every step (report_every), and one at the end"
    rows = tables[-1].splitlines()[2:5]
    assert [row.split()[0] for row in rows] == ["0", "1", "2"] and "<- slowest step" in tables[-1]
    head = tables[-1].splitlines()[1].split()
    assert {"physics", "render", "encode"} <= set(head), f"profile(): each rank's stage times, got {head}"


def test_one_layout_twice_gives_the_same_bits():
    """Determinism where it holds: one process, the same batch layout, run twice."""
    first, second = single_process("uneven"), single_process("uneven")
    for key, expected in first.items():
        np.testing.assert_array_equal(second[key], expected, err_msg=key)


def test_two_nodes_on_localhost(tmp_path, two_rank_job):
    """Two torchrun launchers, one rank each, meeting at a rendezvous endpoint on 127.0.0.1. Its layout
    (envs 0-1 and 2-3) is the one-launcher job's, so the two runs agree bit for bit, rewards included."""
    endpoint = f"127.0.0.1:{free_port()}"
    command = [
        sys.executable,
        *TORCHRUN,
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        "two-nodes",
        JOB,
        str(tmp_path),
        "humanoid",
    ]
    nodes = [
        subprocess.Popen(command, env=child_env({}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (stdout, stderr) in zip(nodes, outputs):
        assert node.returncode == 0, stdout[-3000:] + stderr[-6000:]
    assert_same_run(tmp_path, "humanoid")
    assert_same_bits(tmp_path, two_rank_job[0], "humanoid")


def start_ranks(out: pathlib.Path, case: str, *args: str, ranks: int = 2) -> list[PreloadedChild]:
    """Ranks as plain processes with torchrun's variables, so that the test owns each one (sharded_job.py's
    main() forked from a process that has imported the package once: seconds saved a rank)."""
    out.mkdir()
    base = {
        "WORLD_SIZE": str(ranks),
        "LOCAL_WORLD_SIZE": str(ranks),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    return [
        PreloadedChild(
            [str(out), case, *args],
            child_env({**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}),
            out.with_name(f"{out.name}_rank{rank}"),
            script="sharded_job",
        )
        for rank in range(ranks)
    ]


def test_dead_hung_and_frozen_ranks_are_named(tmp_path):
    """frozen, alone first (its timing is the test's): rank 0 sleeps in a long "update" (90 s) after
    a step, and the test stops rank 1 (SIGSTOP): its heartbeat stops, and rank 0 names it within the
    heartbeat timeout (4 s, beats every 0.5 s), long before the update ends; its next step raises at
    once. Then two jobs at once. killed: ranks 1 and 2 of 3 kill themselves at their third step (rank
    0 waits up to 60 s): rank 0 stops at once, naming both. hung: rank 1 sleeps in its third step
    (rank 0 waits 3 s for a reply): named once the timeout has passed."""
    frozen = start_ranks(tmp_path / "frozen", "frozen")
    killed: list[PreloadedChild] = []
    hung: list[PreloadedChild] = []
    try:
        updating = tmp_path / "frozen" / "updating"
        deadline = time.time() + 300
        while not updating.exists() and time.time() < deadline and frozen[0].poll() is None:
            time.sleep(0.05)
        assert updating.exists(), "rank 0 of the frozen job did not reach its update"
        frozen[1].send_signal(signal.SIGSTOP)
        stopped_at = time.time()
        stderr, elapsed = {"frozen": frozen[0].communicate(timeout=120)[1]}, {}
        killed = start_ranks(
            tmp_path / "killed", "failure", "--die-at", "3", "--timeout", "60", "--failing", "1", "2", ranks=3
        )
        hung = start_ranks(tmp_path / "hung", "failure", "--hang-at", "3", "--timeout", "3")
        for name, job in {"killed": killed, "hung": hung}.items():
            stderr[name] = job[0].communicate(timeout=300)[1]
            elapsed[name] = time.time() - float((tmp_path / name / "started").read_text())
    finally:
        for process in frozen + killed + hung:
            if process.poll() is None:
                process.kill()  # the frozen rank; the hung rank, asleep in its step
            process.communicate()
    assert killed[1].returncode == killed[2].returncode == -9 and killed[0].returncode != 0 and hung[0].returncode != 0
    assert "RankFailure: 2 ranks failed:" in stderr["killed"], stderr["killed"][-3000:]
    for rank in (1, 2):
        assert f"rank {rank} (env {rank} on" in stderr["killed"], stderr["killed"][-3000:]
    assert stderr["killed"].count("closed its connection: its process died") >= 2, stderr["killed"][-3000:]
    assert elapsed["killed"] < 60, "the survivor stops at once, well within its timeout"
    report = json.loads((tmp_path / "frozen" / "frozen.json").read_text())
    named_after = report["named_at"] - stopped_at
    # named after it froze (not before), and within the heartbeat timeout plus the load's delays
    assert 0 < named_after < 30, f"named {named_after:.1f} s after the rank froze (heartbeat timeout 4 s)"
    assert "rank 1 (env 1 on" in report["silent"]["1"] and "stopped beating" in report["silent"]["1"]
    assert report["ranks"] == [1] and "stopped beating" in report["failure"] and report["step_s"] < 5
    assert "rank 0: rank 1 (env 1 on" in stderr["frozen"], "named in rank 0's log as it happens"
    assert "RankFailure: rank 1 (env 1 on" in stderr["hung"] and "did not answer within 3 s" in stderr["hung"], stderr[
        "hung"
    ][-3000:]
    assert 3 <= elapsed["hung"] < 60


def test_layout_split_devices_and_refusals():
    assert plan_shards(5, 2) == [range(0, 2), range(2, 5)], "rank 0 also learns: never more envs than another"
    assert plan_shards(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(LayoutError, match="the job has 3 ranks but n_envs=2"):
        plan_shards(2, 3)
    node = Launch(rank=5, world_size=8, local_rank=1, local_world_size=4, host="node-b", gpus=4)
    assert shard_device("auto", node) == "cuda:1"
    assert shard_device("cuda", node) == "cuda:1"
    assert shard_device("cuda:0", node) == "cuda:0", "an explicit device is kept: ranks may share a GPU on purpose"
    assert shard_device("cpu", node) == "cpu"
    short = Launch(rank=3, world_size=4, local_rank=3, local_world_size=4, host="node-a", gpus=2)
    with pytest.raises(
        LayoutError, match="node node-a runs 4 ranks but shows 2 GPU.*--nproc-per-node 2.*device='cuda:0'"
    ):
        shard_device("auto", short)
    assert shard_device("auto", Launch(gpus=0)) == "cpu"
    with pytest.raises(LayoutError, match="device='cuda' but torch sees no GPU"):
        shard_device("cuda", Launch(gpus=0))


def node_of(gpus: int, visible: list[str | None], host: str = "node-a") -> list[Launch]:
    """The launches of one node's ranks, each shown ``gpus`` GPUs through its CUDA_VISIBLE_DEVICES."""
    n = len(visible)
    return [
        Launch(rank=r, world_size=n, local_rank=r, local_world_size=n, host=host, gpus=gpus, visible_devices=v)
        for r, v in enumerate(visible)
    ]


def test_a_scheduler_giving_each_rank_its_own_gpus_is_laid_out_on_them():
    """One GPU per rank through CUDA_VISIBLE_DEVICES is each rank's cuda:0."""
    assert shard_devices("auto", node_of(1, ["0", "1", "2", "3"])) == ["cuda:0"] * 4
    assert shard_devices("cuda", node_of(1, ["GPU-aa", "GPU-bb"])) == ["cuda:0"] * 2
    assert shard_devices("auto", node_of(2, ["0,1", "2,3"])) == ["cuda:0"] * 2, "two GPUs each: the first"
    # The same variable on every rank (torchrun's own way): a GPU per rank by LOCAL_RANK.
    assert shard_devices("auto", node_of(2, ["0,1", "0,1"])) == ["cuda:0", "cuda:1"]
    assert shard_devices("auto", node_of(2, [None, None])) == ["cuda:0", "cuda:1"]
    assert shard_devices("cuda:0", node_of(1, ["0", "0"])) == ["cuda:0"] * 2, "sharing on purpose stays possible"
    # Ranks named the same GPU, or one rank sees nothing of its own: refused, on every rank.
    for visible in (["0", "0"], ["0", "0,1"], ["0", None]):
        with pytest.raises(LayoutError, match="runs 2 ranks but shows 1 GPU.*CUDA_VISIBLE_DEVICES"):
            shard_devices("auto", node_of(1, visible))
    # Ranks are judged with the ranks of their own node: two nodes may both name GPU 0.
    two_nodes = node_of(1, ["0", "1"], "node-a") + node_of(1, ["0", "1"], "node-b")
    two_nodes = [dataclasses.replace(launch, rank=i, world_size=4) for i, launch in enumerate(two_nodes)]
    assert shard_devices("auto", two_nodes) == ["cuda:0"] * 4
    assert shard_device("auto", node_of(1, ["3"])[0]) == "cuda:0", "one rank on its node"


def test_a_ranks_spec_makes_its_gpu_the_current_device_before_building(monkeypatch):
    """resolve_device("cuda"), is_bf16_supported and Warp's "cuda" follow
    torch's current device, which each rank sets to its own GPU before building its envs."""
    from vlmrm_fast import EnvSpec, FastVLMRewardVecEnv, RewardModelSpec
    from vlmrm_fast.distributed import use_device
    from vlmrm_fast.distributed.protocol import ShardSpec

    calls: list[object] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(
        FastVLMRewardVecEnv, "from_specs", lambda env, reward, **options: calls.append(("build", reward.device))
    )
    env, reward = EnvSpec("cartpole", 2), RewardModelSpec("vlmrm-tiny")
    ShardSpec(env, reward.replace(device="cuda:1"), range(4, 6), 7, {}).build()
    assert calls == [("set_device", torch.device("cuda", 1)), ("build", "cuda:1")]
    calls.clear()
    ShardSpec(env, reward.replace(device="cpu"), range(0, 2), 7, {}).build()
    assert calls == [("build", "cpu")]
    use_device("cuda")  # no index: nothing to choose
    assert calls == [("build", "cpu")]


@pytest.mark.gpu
def test_ranks_given_their_own_gpu_by_a_scheduler_run_there(tmp_path):
    """On a GPU: each rank gets CUDA_VISIBLE_DEVICES of its own (a scheduler's
    way) and device="auto"; the job runs with every rank on its cuda:0, made its current device.
    With one GPU, its index and its UUID stand for two GPUs: the layout compares the names."""
    uuid = f"GPU-{torch.cuda.get_device_properties(0).uuid}"
    out = tmp_path / "out"
    out.mkdir()
    base = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    ranks = [
        subprocess.Popen(
            [sys.executable, JOB, str(out), "devices"],
            env=child_env({**base, "RANK": str(rank), "LOCAL_RANK": str(rank), "CUDA_VISIBLE_DEVICES": visible}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, visible in enumerate(["0", uuid])
    ]
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    for rank, (stdout, stderr) in zip(ranks, outputs):
        assert rank.returncode == 0, stdout[-3000:] + stderr[-6000:]
    report = json.loads((out / "devices.json").read_text())
    assert report["shards"] == ["cuda:0", "cuda:0"]
    assert report["current_device"] == 0 and (out / "devices_rank1.txt").read_text() == "0"


def test_one_process_sharded_env_is_the_plain_env():
    """Without torchrun the sharded env is one rank holding every env (no group is made)."""
    kwargs = sharded_job.env_kwargs("cartpole")
    sharded = ShardedVecEnv("cartpole", 2, verbose=0, **kwargs)
    plain = FastVLMRewardVecEnv("cartpole", 2, **kwargs)
    try:
        assert [s.describe().split(": ")[1] for s in sharded.shards] == ["envs 0-1"]
        np.testing.assert_array_equal(sharded.reset(), plain.reset())
        for a, b in zip(sharded.step(np.array([0, 1])), plain.step(np.array([0, 1]))):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)
        assert sharded.traffic == {"sent": 0, "received": 0}
    finally:
        sharded.close()
        plain.close()
    sharded.close()  # closing twice is harmless


def test_arguments_that_cannot_travel_are_refused():
    rm = load_reward_model("vlmrm-tiny", target_prompts="a pole", device="cpu")
    with pytest.raises(ValueError, match="reward_model= is not supported: a loaded model cannot be shared"):
        ShardedVecEnv("cartpole", 2, reward_model=rm)
    with pytest.raises(ValueError, match="defer_rewards= is not supported"):
        ShardedVecEnv("cartpole", 2, model="vlmrm-tiny", defer_rewards=True)
    with pytest.raises(ValueError, match="must pickle"):
        ShardedVecEnv("cartpole", 2, model="vlmrm-tiny", env_kwargs={"hook": lambda: None})


def test_train_under_torchrun(tmp_path):
    """`vlmrm-fast train` on 2 ranks: rank 0 learns and alone writes the run; rank 1 serves and exits 0."""
    config = {
        "seed": 1,
        "output_dir": str(tmp_path / "run"),
        "reward": {"model": "vlmrm-tiny", "device": "cpu"},
        "env": {"task": "cartpole", "n_envs": 3, "episode_length": 10},
        "distributed": {"timeout": 120},
        "rl": {
            "algorithm": "DQN",
            "total_timesteps": 60,
            "device": "cpu",
            "kwargs": {"learning_starts": 30, "batch_size": 8, "buffer_size": 500},
        },
        "logging": {"checkpoint_every": 30, "video_every": 0},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_python(
        [*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "vlmrm_fast.cli", "train", str(path)],
        env=THREADS,
        timeout=300,
        cwd=str(tmp_path),  # torchrun runs `-m`: the working directory comes first on its children's path
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "rank 0 (cpu on " in result.stdout and "): env 0" in result.stdout and "): envs 1-2" in result.stdout
    assert "  rank 0's stack      cartpole, 1 envs scored on cpu: physics gym," in result.stdout  # its plan's line
    run = tmp_path / "run"
    assert (run / "final_model.zip").is_file() and (run / "config.yaml").is_file()
    assert list((run / "checkpoints").glob("model_*_steps.zip"))


def _dqn_cartpole_config(tmp_path, *, total_timesteps: int, checkpoint_every: int) -> dict:
    """A short DQN run on 2 CartPole envs with the tiny CLIP, writing into tmp_path/run."""
    return {
        "seed": 1,
        "output_dir": str(tmp_path / "run"),
        "reward": {"model": "vlmrm-tiny", "device": "cpu"},
        "env": {"task": "cartpole", "n_envs": 2, "episode_length": 10},
        "rl": {
            "algorithm": "DQN",
            "total_timesteps": total_timesteps,
            "device": "cpu",
            "kwargs": {"learning_starts": 20, "batch_size": 8, "buffer_size": 500},
        },
        "logging": {"checkpoint_every": checkpoint_every, "video_every": 0},
    }


def test_a_killed_rank_restarts_and_the_run_resumes(tmp_path):
    """torchrun --max-restarts 1 with --resume, rank 0 only learning (distributed.learner_envs: 0):
    rank 1, which holds every env, is killed at its 40th step; rank 0 names it, saves a checkpoint
    and exits; torchrun restarts both ranks (through python -m vlmrm_fast.distributed.run, which gives
    each restart a store of its own), rank 0 resumes from the newest checkpoint and the run finishes."""
    config = _dqn_cartpole_config(tmp_path, total_timesteps=120, checkpoint_every=30)
    config["distributed"] = {"learner_envs": 0, "heartbeat": 0.5, "heartbeat_timeout": 5}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    launcher = ["-m", "vlmrm_fast.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1"]
    job = str(pathlib.Path(sharded_job.__file__).with_name("restart_job.py"))
    result = run_python(
        [*launcher, job, "40", "train", str(path), "--resume", "--start-if-new"],
        env=THREADS,
        timeout=400,
        cwd=str(tmp_path),
    )
    output = result.stdout[-4000:] + result.stderr[-8000:]
    assert result.returncode == 0, output
    assert "rank 1: killing itself at its step 40" in result.stderr, output
    assert "RankFailure: rank 1 (envs 0-1 on" in result.stderr or "SIGTERM" in result.stderr, output
    assert "resuming from " in result.stderr, output
    assert "--resume --start-if-new: no checkpoint in" in result.stderr, output  # the first start
    assert "rank 0 (cpu on " in result.stdout and "no envs (the learner only)" in result.stdout
    run = tmp_path / "run"
    assert (run / "final_model.zip").is_file()
    done = re.search(r"done: (\d+) steps", result.stdout)
    assert done and int(done.group(1)) >= 120, output  # SB3 stops at the first multiple of n_envs past 120


def test_launches_that_cannot_work_are_refused_with_the_fix():
    from vlmrm_fast.distributed.launch import check_launcher

    check_launcher({})  # one process
    check_launcher({"SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"})  # srun -n 1
    torchrun = {"RANK": "0", "WORLD_SIZE": "4", "SLURM_STEP_NUM_TASKS": "2"}  # torchrun under srun
    check_launcher(torchrun)
    with pytest.raises(LayoutError, match=r"task 3 of 4 \(srun\).*srun --ntasks-per-node=1 torchrun"):
        check_launcher({"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3"})
    restarts = {**torchrun, "TORCHELASTIC_MAX_RESTARTS": "2", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    with pytest.raises(LayoutError, match="135712.*TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1.*vlmrm_fast.distributed.run"):
        check_launcher(restarts)
    check_launcher({**restarts, "TORCHELASTIC_USE_AGENT_STORE": "False"})  # the store of each restart its own
    check_launcher({**restarts, "TORCHELASTIC_MAX_RESTARTS": "0"})  # no restarts: nothing to read stale


def test_rank_0_takes_learner_envs_and_the_others_split_the_rest():
    assert plan_shards(8, 3) == [range(0, 2), range(2, 5), range(5, 8)]
    assert plan_shards(8, 3, learner_envs=0) == [range(0, 0), range(0, 4), range(4, 8)]
    assert plan_shards(8, 3, learner_envs=1) == [range(0, 1), range(1, 5), range(5, 8)]
    assert plan_shards(3, 4, learner_envs=0) == [range(0, 0), range(0, 1), range(1, 2), range(2, 3)]
    assert plan_shards(7, 1, learner_envs=0) == [range(0, 7)], "one process holds every env"
    for n, ranks, own in [(64, w, None) for w in (2, 3, 5, 8, 16)]:
        sizes = [len(r) for r in plan_shards(n, ranks, own)]
        assert sum(sizes) == n and sizes[0] == min(sizes) and max(sizes) - min(sizes) <= 1
    with pytest.raises(LayoutError, match="learner_envs=7 leaves 1 of n_envs=8 envs for 2 serving ranks.*at most 6"):
        plan_shards(8, 3, learner_envs=7)
    with pytest.raises(LayoutError, match="the job has 4 serving ranks but n_envs=3.*at most 4 ranks"):
        plan_shards(3, 5, learner_envs=0)


def test_the_slurm_script_saves_before_the_time_limit_and_requeues(tmp_path):
    """examples/slurm/train.sbatch on one "node" of 2 CPU ranks, srun and scontrol stood in for:
    SLURM's signal before the time limit (USR1 to the script) makes rank 0 save a checkpoint and
    the script requeue the job once torchrun has ended; the requeued job, the same script again,
    resumes from that checkpoint (and is stopped the same way)."""
    script = pathlib.Path(sharded_job.__file__).resolve().parents[1] / "examples" / "slurm" / "train.sbatch"
    if not script.is_file():
        pytest.skip("examples/ is not installed with the package")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in {
        "srun": 'exec "$@"',  # one task on this "node": its torchrun
        "scontrol": 'if [ "$1" = show ]; then echo 127.0.0.1; elif [ "$1" = requeue ]; then echo "$2" >> "$REQUEUED"; fi',
        "python": f'exec {sys.executable} -P "$@"',
    }.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    config = _dqn_cartpole_config(tmp_path, total_timesteps=1_000_000, checkpoint_every=1_000_000)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    requeued = tmp_path / "requeued"
    slurm = {
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "node-a",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_ID": "4242",
        "SLURM_CPUS_PER_TASK": "2",
        "GPUS_PER_NODE": "2",
        "REQUEUED": str(requeued),
    }

    def start_and_signal(log: pathlib.Path, ready: str) -> tuple[int, str]:
        """The script until ``ready`` is in its log and a few steps later; then USR1; its status and log."""
        with log.open("w") as out:
            job = subprocess.Popen(
                ["bash", str(script), str(tmp_path / "config.yaml")],
                env=child_env({**slurm, "PORT": str(free_port())}),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                start_new_session=True,
            )
            try:
                deadline = time.time() + 240
                while ready not in log.read_text() and time.time() < deadline and job.poll() is None:
                    time.sleep(0.2)
                assert ready in log.read_text(), log.read_text()[-6000:]
                time.sleep(3)  # some steps
                job.send_signal(signal.SIGUSR1)
                status = job.wait(timeout=180)
            finally:
                if job.poll() is None:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
        return status, log.read_text()

    saved = re.compile(r"saved \S+/model_interrupted_(\d+)_steps\.zip at \d+ steps; continue with --resume")
    status, first = start_and_signal(tmp_path / "first.log", "envs of cartpole over 2 rank(s)")
    # SIGTERM reaches every rank: rank 0 saves, at the rollout's end or when it finds a serving rank gone
    assert "the time limit is near: checkpoint, then requeue" in first, first[-6000:]
    assert saved.search(first), first[-6000:]
    assert status != 0 and requeued.read_text().split() == ["4242"], first[-6000:]
    status, second = start_and_signal(tmp_path / "second.log", "resuming from model_interrupted_")
    assert saved.search(second), second[-6000:]
    assert int(saved.search(second).group(1)) > int(saved.search(first).group(1)), "it went on from the first"
    assert requeued.read_text().split() == ["4242", "4242"], second[-6000:]
