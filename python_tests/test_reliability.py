"""Training that survives kills and signals, resumes exactly, and logs what happened when it happened.

The fault-injection test kills a short run (tiny CLIP, tiny networks) with SIGKILL at
chosen and at random moments, several of them while checkpoint files are being
written, and resumes after each kill; the other tests run in this process.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import random
import signal
import tempfile
import time

import numpy as np
import pytest
import yaml
from child_process import PreloadedChild
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback

from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training import callbacks as training_callbacks
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.config import load_config
from vlmrm_fast.training.train import train

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),  # see conftest.py
    pytest.mark.slow,  # kills, signals and restarts of training runs in child processes: left out of the quick subset (-m "not slow")
]

# Small enough to run in seconds on a 2-core CPU: 2 envs, 32 px frames, 32-unit networks.
BASE = {
    "seed": 3,
    "reward": {"model": "vlmrm-tiny", "alpha": 0.5, "device": "cpu"},
    "env": {"task": "humanoid-kneeling", "n_envs": 2, "episode_length": 10, "render_size": 32},
    "rl": {
        "algorithm": "SAC",
        "total_timesteps": 120,
        "device": "cpu",
        "kwargs": {
            "learning_starts": 20,
            "batch_size": 16,
            "buffer_size": 1000,
            "policy_kwargs": {"net_arch": [32, 32]},
        },
    },
    "logging": {"checkpoint_every": 40, "video_every": 0},
}


def _config(tmp_path: pathlib.Path, name: str = "run", **patch) -> pathlib.Path:
    cfg = copy.deepcopy(BASE)
    for section, values in patch.items():
        if isinstance(values, dict):
            cfg[section].update(values)
        else:
            cfg[section] = values
    cfg["output_dir"] = str(tmp_path / name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _complete_steps(run: pathlib.Path) -> list[int]:
    return [c.steps for c in checkpoints.scan(run / "checkpoints").complete]


def _scalars(run: pathlib.Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = next((run / "tensorboard").iterdir())
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else []


# --------------------------------------------------------------------- kill -9
def _child(config: pathlib.Path, progress: pathlib.Path, *args: str, kill: str | None = None) -> PreloadedChild:
    import vlmrm_fast

    package_root = str(pathlib.Path(vlmrm_fast.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p),
    }
    env["VLMRM_TEST_PROGRESS"] = str(progress)
    env["OMP_NUM_THREADS"] = "1"  # a tiny model gains nothing from threads, and loses much to a busy machine
    env.pop("VLMRM_TEST_KILL", None)
    progress.unlink(missing_ok=True)  # this child's steps only
    if kill:
        env["VLMRM_TEST_KILL"] = kill
    # training_child.py's main() in a child forked with the training stack imported (seconds saved a run)
    return PreloadedChild(["train", str(config), *args], env, pathlib.Path(tempfile.mkdtemp(dir=progress.parent)))


def _last_progress(progress: pathlib.Path) -> int:
    lines = progress.read_text().split() if progress.exists() else []
    return int(lines[-1]) if lines else 0


def _wait_for_step(child: PreloadedChild, progress: pathlib.Path, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _last_progress(progress) < step:
        assert child.poll() is None, f"the run ended before step {step}: {child.communicate()}"
        assert time.monotonic() < deadline, f"step {step} not reached in {timeout} s"
        time.sleep(0.005)


def _resumed_from(stderr: str) -> int:
    line = next(line for line in stderr.splitlines() if line.startswith("resuming from"))
    return int(line.split(" at ")[1].split()[0])


def test_kill_minus_9_at_any_moment_then_sigterm_then_resume(tmp_path):
    """Kills landing inside checkpoint writes (chosen) and at a random moment (seeded), then a
    preemption (SIGTERM, and another 50 ms later); every resume starts from the newest complete
    checkpoint, losing at most one checkpoint interval, and the last run finishes exactly."""
    config = _config(tmp_path, rl={"total_timesteps": 200})
    run = tmp_path / "run"
    progress = tmp_path / "progress.txt"
    interval = BASE["logging"]["checkpoint_every"]
    rng = random.Random(16)

    def resume(
        previous_step: int, *, kill: str | None = None, at_step: int | None = None, signum: int = signal.SIGKILL
    ) -> tuple[str, int]:
        child = _child(config, progress, *(["--resume"] if previous_step else []), kill=kill)
        if at_step is not None:
            _wait_for_step(child, progress, at_step)
            child.send_signal(signum)
            if signum == signal.SIGTERM:
                time.sleep(0.05)
                child.send_signal(signum)
        _, err = child.communicate(timeout=300)
        assert child.returncode == (143 if signum == signal.SIGTERM else -signal.SIGKILL), err
        start = 0
        if previous_step:
            start = _resumed_from(err)
            assert previous_step - interval <= start <= previous_step, err  # lost at most one interval
        return err, max(start, _last_progress(progress))

    # 1. killed while writing the model of the second checkpoint (80 steps): a half-written temporary
    _, reached = resume(0, kill="model-mid-write:2")
    assert _complete_steps(run) == [40] and (run / "checkpoints" / ".model_80_steps.zip.tmp").exists()
    # 2. resumes from 40, removing the half file; killed with the model of 120 in place but not its buffer
    err, reached = resume(reached, kill="buffer-before-rename:2")
    assert _resumed_from(err) == 40 and ".model_80_steps.zip.tmp" in err
    assert (run / "checkpoints" / "model_120_steps.zip").exists() and _complete_steps(run) == [40, 80]
    # 3. killed at a random moment, wherever it lands (inside a checkpoint write or not); the model of
    #    120 without its buffer does not count: the resume is from 80 at most
    err, reached = resume(reached, at_step=rng.randrange(90, 150, 2))
    assert _resumed_from(err) == 80 and "model_120_steps.zip" in err
    # 4. preempted: SIGTERM saves a checkpoint and exits with 143; a second SIGTERM 50 ms later, wherever
    #    it lands (while stopping, saving or exiting), changes neither (its message: the in-process test below)
    err, reached = resume(reached, at_step=min(reached + 20, 180), signum=signal.SIGTERM)
    newest = checkpoints.scan(run / "checkpoints").newest()
    assert newest.name.startswith("model_interrupted_") and newest.reason == "stopped by SIGTERM"
    # 5. the last run finishes: exactly the steps asked for, nothing incomplete left, logs without repeats
    child = _child(config, progress, "--resume")
    _, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert _resumed_from(err) == newest.steps
    assert SAC.load(run / "final_model.zip").num_timesteps == 200
    assert not checkpoints.scan(run / "checkpoints").incomplete
    steps = [s for s, _ in _scalars(run, "rollout/ep_vlm_reward_mean")]
    assert steps and steps == sorted(set(steps)), f"TensorBoard shows steps twice after the resumes: {steps}"


# ------------------------------------------------------------- signals in process


class _SignalAt(BaseCallback):
    """Sends this process ``signum`` once the run reaches ``step``."""

    def __init__(self, step: int, signum: int):
        super().__init__()
        self.step, self.signum, self.sent = step, signum, False

    def _on_step(self) -> bool:
        if not self.sent and self.num_timesteps >= self.step:
            self.sent = True
            os.kill(os.getpid(), self.signum)
        return True


def _add_callbacks(monkeypatch, *extra: BaseCallback) -> None:
    original = training_callbacks.TrainingControl.__init__

    def init(self, callbacks, stop, *, on_policy):
        original(self, list(extra) + list(callbacks), stop, on_policy=on_policy)

    monkeypatch.setattr(training_callbacks.TrainingControl, "__init__", init)


def test_two_sigints_in_quick_succession_save_one_whole_checkpoint(tmp_path, monkeypatch, capfd):
    cfg = load_config(_config(tmp_path, rl={"total_timesteps": 400}))
    _add_callbacks(monkeypatch, _SignalAt(30, signal.SIGINT))
    original = checkpoints.write_atomically

    def write_atomically(path, write, **kwargs):
        def interrupted_write(f):  # the second Ctrl-C lands while the model file is being written
            if path.name.startswith("model_interrupted_") and path.suffix == ".zip":
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
            write(f)

        return original(path, interrupted_write, **kwargs)

    monkeypatch.setattr(checkpoints, "write_atomically", write_atomically)
    # Python's own handler to start from (a test runner started in the background inherits SIGINT ignored).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert train(cfg) == 130
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert "SIGINT again" in capfd.readouterr().err
    scan = checkpoints.scan(cfg.run_dir / "checkpoints")
    assert not scan.incomplete and scan.newest().name.startswith("model_interrupted_")
    assert SAC.load(scan.newest().model).num_timesteps == scan.newest().steps


class _ProgressRecord:
    def __init__(self, monkeypatch):
        self.closed: list[tuple[int, int]] = []
        original = training_callbacks.TrainingProgress.close

        def close(progress, steps=None):
            if progress.bar is not None:
                self.closed.append((int(steps if steps is not None else progress.bar.n), int(progress.bar.total)))
            original(progress, steps)

        monkeypatch.setattr(training_callbacks.TrainingProgress, "close", close)


def test_resume_continues_exactly(tmp_path, monkeypatch):
    """Stopped by SIGTERM mid-run and resumed: the exact step count, the same gradient steps as an
    uninterrupted run, no checkpoint or video at the resume step, a progress bar that counts right."""
    patch = {
        "rl": {"total_timesteps": 120, "kwargs": {**BASE["rl"]["kwargs"], "train_freq": 3}},  # rollouts of 6 env steps
        "logging": {"checkpoint_every": 36, "video_every": 48, "video_episodes": 1},
    }
    cfg = load_config(_config(tmp_path, **patch))
    bars = _ProgressRecord(monkeypatch)
    with monkeypatch.context() as m:
        _add_callbacks(m, _SignalAt(50, signal.SIGTERM))
        assert train(cfg) == 143
    run = cfg.run_dir
    assert _complete_steps(run) == [36, 54]  # stopped at the first rollout start after the signal
    assert bars.closed[-1] == (54, 120)
    assert train(cfg, resume=True) == 0
    assert bars.closed[-1] == (120, 120)
    final = SAC.load(run / "final_model.zip")
    assert final.num_timesteps == 120
    # SAC trains after every rollout that ends past learning_starts (20): rollouts end at 6, 12, ..., 120
    assert final._n_updates == sum(1 for end in range(6, 121, 6) if end > 20)
    names = sorted(p.name for p in (run / "checkpoints").glob("*.zip"))
    assert names == [
        "model_108_steps.zip",
        "model_120_steps.zip",
        "model_36_steps.zip",
        "model_72_steps.zip",
        "model_interrupted_54_steps.zip",
    ]
    assert sorted(p.name for p in (run / "videos").glob("*.mp4")) == [
        "policy_000000048_steps.mp4",
        "policy_000000096_steps.mp4",
    ]
    steps = [s for s, _ in _scalars(run, "rollout/ep_vlm_reward_mean")]
    assert steps == sorted(set(steps)) and steps[-1] == 120


def test_ppo_stopped_mid_rollout_resumes_from_the_rollout_start(tmp_path, monkeypatch):
    """On-policy data is not saved: a stop inside a rollout discards it and the checkpoint is the rollout start."""
    kwargs = {
        "n_steps": 8,
        "batch_size": 16,
        "n_epochs": 2,
        "policy_kwargs": {"net_arch": [32]},
    }  # rollouts of 16 env steps
    cfg = load_config(
        _config(
            tmp_path,
            rl={"algorithm": "PPO", "total_timesteps": 96, "kwargs": kwargs},
            logging={"checkpoint_every": 1000, "video_every": 0},
        )
    )
    bars = _ProgressRecord(monkeypatch)
    with monkeypatch.context() as m:
        _add_callbacks(m, _SignalAt(40, signal.SIGTERM))
        assert train(cfg) == 143
    assert _complete_steps(cfg.run_dir) == [32] and bars.closed[-1] == (32, 96)
    assert (
        PPO.load(checkpoints.scan(cfg.run_dir / "checkpoints").newest().model)._n_updates == 2 * 2
    )  # 2 rollouts trained
    assert train(cfg, resume=True) == 0
    final = PPO.load(cfg.run_dir / "final_model.zip")
    assert final.num_timesteps == 96 and final._n_updates == 6 * 2 and bars.closed[-1] == (96, 96)


# ------------------------------------------------------------------- run folders
def test_a_used_run_folder_is_refused_then_overwritten_on_request(tmp_path, capsys):
    config = _config(tmp_path)
    run = tmp_path / "run"
    # where the run writes, files no record shows a run wrote: refused, --overwrite too, and kept as they are
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("task: cartpole\n")
    (run / "final_model.zip").write_bytes(b"old")
    for flags in ([], ["--overwrite"]):
        assert cli_main(["train", str(config), *flags]) == 2
        err = capsys.readouterr().err
        assert "holds config.yaml, final_model.zip where the run writes, and no record shows a run wrote them" in err
        assert "nothing was changed. Move them away" in err and len(err.strip().splitlines()) == 1, err
        assert (run / "final_model.zip").read_bytes() == b"old" and (run / "config.yaml").is_file()
    (run / "config.yaml").unlink()
    (run / "final_model.zip").unlink()
    assert cli_main(["train", str(config), "--total-timesteps", "20"]) == 0
    assert cli_main(["train", str(config)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run (config.yaml, final_model.zip, learning_curves.csv" in err, err
    assert "--resume" in err and "--overwrite (deletes those" in err, err
    assert cli_main(["train", str(config), "--overwrite", "--total-timesteps", "40"]) == 0
    assert f"--overwrite: deleting the previous run's 9 files in {run}" in capsys.readouterr().err
    assert SAC.load(run / "final_model.zip").num_timesteps == 40


def _fake_checkpoint(run: pathlib.Path, steps: int, identity: dict, *, buffer: bool) -> None:
    folder = run / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    model, replay, manifest = checkpoints.checkpoint_paths(folder, steps)
    model.write_bytes(b"zip")
    files = {"model": {"name": model.name, "bytes": 3}, "replay_buffer": {"name": replay.name, "bytes": 3}}
    if buffer:
        replay.write_bytes(b"pkl")
    manifest.write_text(json.dumps({"format": 1, "steps": steps, "files": files, "identity": identity}))


def test_resume_refuses_another_configs_checkpoint_and_a_missing_replay_buffer(tmp_path, capsys):
    from vlmrm_fast.training.config import resolved, run_identity
    from vlmrm_fast.training.run_folder import plain

    config = _config(tmp_path)
    identity = plain(run_identity(resolved(load_config(config))))
    other = copy.deepcopy(identity)
    other["reward"]["alpha"] = 0.25
    run = tmp_path / "run"
    _fake_checkpoint(run, 40, other, buffer=True)
    assert cli_main(["train", str(config), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "belongs to a run with another config (reward.alpha: 0.25 then, 0.5 now). Set it back to resume" in err
    assert len(err.strip().splitlines()) == 1
    # a run started on MuJoCo Warp's physics (float32, Newton) does not resume on MuJoCo's own
    warp = copy.deepcopy(identity)
    warp["env"]["physics"] = "warp"
    _fake_checkpoint(tmp_path / "warp", 40, warp, buffer=True)
    assert cli_main(["train", str(config), "--resume", "--output-dir", str(tmp_path / "warp")]) == 2
    err = capsys.readouterr().err
    assert "(env.physics: 'warp' then, 'auto' now). Set it back to resume" in err, err
    _fake_checkpoint(run, 80, identity, buffer=False)
    assert cli_main(["train", str(config), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "model_replay_buffer_80_steps.pkl is missing" in err and "--allow-empty-replay-buffer" in err
    assert not (run / "config.yaml").exists()  # nothing written by a refused start


def test_atomic_writes_leave_whole_files_or_recognized_temporaries(tmp_path, monkeypatch):
    target = tmp_path / "model_40_steps.zip"
    target.write_bytes(b"old")

    def boom(temporary, path):
        raise KeyboardInterrupt  # interrupted between the write and the rename

    monkeypatch.setattr(checkpoints, "_publish", boom)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.write_atomically(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"old" and not checkpoints.temporary_path(target).exists()
    # a temporary that a kill left behind is recognized; a file no manifest vouches for, with no save of it
    # under way, did not come from a kill: damaged, to be set aside, not removed
    checkpoints.temporary_path(target).write_bytes(b"ne")
    scan = checkpoints.scan(tmp_path)
    assert scan.complete == [] and [p.name for p in scan.incomplete] == [".model_40_steps.zip.tmp"]
    assert [[p.name for p in d.files] for d in scan.damaged] == [["model_40_steps.zip"]]
    assert "no manifest names it" in scan.damaged[0].why
    # with its manifest still under the temporary name (the mark of a save under way), a kill cut it short
    checkpoints.temporary_path(tmp_path / "model_40_steps.json").write_bytes(b"saving")
    scan = checkpoints.scan(tmp_path)
    assert not scan.damaged and {p.name for p in scan.incomplete} == {
        ".model_40_steps.zip.tmp",
        ".model_40_steps.json.tmp",
        "model_40_steps.zip",
    }


def test_a_checkpoint_counts_only_once_its_manifest_is_written(tmp_path, monkeypatch):
    class Model:  # what save_checkpoint asks of an SB3 model
        num_timesteps = 80
        replay_buffer = object()

        def save(self, f):
            f.write(b"model")

        def save_replay_buffer(self, f):
            f.write(b"buffer")

    checkpoints.save_checkpoint(Model(), tmp_path, reason="periodic")
    assert [c.steps for c in checkpoints.scan(tmp_path).complete] == [80]
    before = sorted(p.name for p in tmp_path.iterdir())
    original = checkpoints._publish

    def stopped_before_the_manifest(temporary, path):
        if path.suffix == ".json":
            raise SystemExit  # the process ends here; model and buffer of 120 are in place
        original(temporary, path)

    monkeypatch.setattr(checkpoints, "_publish", stopped_before_the_manifest)
    Model.num_timesteps = 120
    with pytest.raises(SystemExit):
        checkpoints.save_checkpoint(Model(), tmp_path, reason="periodic")
    # the failed save removed its own files at once
    assert (
        sorted(p.name for p in tmp_path.iterdir())
        == before
        == [
            "model_80_steps.json",
            "model_80_steps.zip",
            "model_replay_buffer_80_steps.pkl",
        ]
    )
    # what a kill (which runs no clean-up) leaves at that moment: the mark of the save, model and buffer
    checkpoints.temporary_path(tmp_path / "model_120_steps.json").write_bytes(b"saving")
    (tmp_path / "model_120_steps.zip").write_bytes(b"model")
    (tmp_path / "model_replay_buffer_120_steps.pkl").write_bytes(b"buffer")
    scan = checkpoints.scan(tmp_path)
    assert [c.steps for c in scan.complete] == [80] and scan.complete[0].replay_buffer is not None
    assert {p.name for p in scan.incomplete} == {
        ".model_120_steps.json.tmp",
        "model_120_steps.zip",
        "model_replay_buffer_120_steps.pkl",
    }
    assert not scan.damaged
    for path in scan.incomplete:  # what --resume removes (ResumePoint.apply)
        path.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# ------------------------------------------------------------------ logged rewards
class _Recorder(BaseCallback):
    """Per step: the step count, the rewards the algorithm got, the env's own rewards, the dones."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []

    def _on_step(self) -> bool:
        infos = self.locals["infos"]
        self.rows.append(
            (
                self.num_timesteps,
                np.array(self.locals["rewards"], np.float64),
                np.array([info["gt_reward"] for info in infos], np.float64),
                np.array(self.locals["dones"], bool),
            )
        )
        return True


def _episode_returns(steps: list[int], rewards: np.ndarray, dones: np.ndarray) -> list[tuple[int, float]]:
    """(end step, return) of every finished episode, in the order they finished."""
    total = np.zeros(rewards.shape[1])
    out = []
    for step, r, d in zip(steps, rewards, dones):
        total += r
        for env in np.flatnonzero(d):
            out.append((step, float(total[env])))
            total[env] = 0.0
    return out


def _expected_mean(returns: list[tuple[int, float]], step: int, window: int = 100) -> float:
    finished = [r for end, r in returns if end <= step][-window:]
    return float(np.mean(finished))


@pytest.mark.parametrize(
    "algorithm, episode_batch, kwargs",
    [
        (
            "SAC",
            False,
            {"learning_starts": 20, "batch_size": 16, "buffer_size": 1000, "policy_kwargs": {"net_arch": [32]}},
        ),
        (
            "SAC",
            True,
            {
                "learning_starts": 20,
                "batch_size": 16,
                "buffer_size": 1000,
                "train_freq": 4,
                "policy_kwargs": {"net_arch": [32]},
            },
        ),
        ("PPO", False, {"n_steps": 16, "batch_size": 16, "n_epochs": 1, "policy_kwargs": {"net_arch": [32]}}),
    ],
    ids=["SAC", "SAC-episode-batch", "PPO"],
)
def test_logged_episode_rewards_equal_hand_computed_returns_at_their_steps(
    tmp_path, monkeypatch, algorithm, episode_batch, kwargs
):
    # 3 envs, episodes of 8 steps: episodes end in threes, so SB3's every-4th-episode logging leaves a final interval
    cfg = load_config(
        _config(
            tmp_path,
            env={"n_envs": 3, "episode_length": 8, "render_size": 32},
            rl={
                "algorithm": algorithm,
                "total_timesteps": 96 if algorithm == "PPO" else 90,
                "kwargs": kwargs,
                "episode_batch": episode_batch,
            },
            logging={"checkpoint_every": 1000, "video_every": 0},
        )
    )
    recorder = _Recorder()
    _add_callbacks(monkeypatch, recorder)
    assert train(cfg) == 0
    steps = [row[0] for row in recorder.rows]
    vlm = np.stack([row[1] for row in recorder.rows])
    gt = np.stack([row[2] for row in recorder.rows])
    dones = np.stack([row[3] for row in recorder.rows])
    if episode_batch:  # the env returned zeros while collecting; the replay buffer holds the scored rewards
        newest = checkpoints.scan(cfg.run_dir / "checkpoints").newest()
        model = SAC.load(newest.model)
        model.load_replay_buffer(newest.replay_buffer)
        vlm = model.replay_buffer.rewards[: len(steps)].astype(np.float64)
        assert np.all(vlm != 0.0)
    for tag, rewards in (("rollout/ep_vlm_reward_mean", vlm), ("rollout/ep_gt_reward_mean", gt)):
        returns = _episode_returns(steps, rewards, dones)
        logged = _scalars(cfg.run_dir, tag)
        assert logged, tag
        for step, value in logged:
            assert value == pytest.approx(_expected_mean(returns, step), rel=1e-5, abs=1e-5), (tag, step)
        assert logged[-1][0] >= returns[-1][0], f"{tag}: the final interval is not logged"
    if episode_batch:  # SB3's own episode reward, from the zeros the env returned, is set to the VLM returns
        returns = _episode_returns(steps, vlm, dones)
        for step, value in _scalars(cfg.run_dir, "rollout/ep_rew_mean"):
            assert value == pytest.approx(_expected_mean(returns, step), rel=1e-5, abs=1e-5)


# ------------------------------------------------------------------ thread safety
def test_reward_models_loaded_in_four_threads_equal_a_lone_load():
    import logging
    import threading

    import torch

    from vlmrm_fast import load_reward_model

    def load():
        return load_reward_model(
            "vlmrm-tiny",
            target_prompts="a humanoid robot kneeling",
            baseline_prompts="a humanoid robot",
            alpha=0.5,
            device="cpu",
            seed=5,
        )

    root_level = logging.getLogger().level
    torch.manual_seed(123)
    expected_draws = torch.rand(8)
    torch.manual_seed(123)
    lone = load()
    assert torch.equal(torch.rand(8), expected_draws), "loading consumed or reseeded the global torch generator"
    frames = np.random.default_rng(0).integers(0, 256, (4, 48, 48, 3), dtype=np.uint8)
    lone_rewards = lone(frames)

    start = threading.Barrier(5)
    loaded: list = [None] * 4

    def worker(i: int) -> None:
        start.wait()
        loaded[i] = load()

    def noise() -> None:  # another thread drawing from the global generator meanwhile
        start.wait()
        for _ in range(3000):
            torch.randn(16)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)] + [threading.Thread(target=noise)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reference = lone.clip.model.state_dict()
    for model in loaded:
        state = model.clip.model.state_dict()
        assert len(state) == len(reference)
        assert all(torch.equal(state[k], reference[k]) for k in reference)  # bit for bit
        assert torch.equal(model(frames), lone_rewards)
    assert logging.getLogger().level == root_level


# ------------------------------------------------------------------------ messages
def test_checkpoint_messages_name_the_real_cause(tmp_path):
    from vlmrm_fast import load_reward_model

    garbage = tmp_path / "weights.pt"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ValueError) as info:
        load_reward_model("vlmrm-tiny", target_prompts="a", checkpoint=str(garbage), device="cpu")
    message = str(info.value)
    assert (
        "could not be loaded" in message and "not a readable weights file" in message and "weights_only" not in message
    )
    with pytest.raises(IsADirectoryError, match="is a folder, not a weights file.*local-dir:"):
        load_reward_model("vlmrm-tiny", target_prompts="a", checkpoint=str(tmp_path), device="cpu")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_reward_model("vlmrm-tiny", target_prompts="a", checkpoint=str(tmp_path / "missing.pt"), device="cpu")


def test_frame_and_action_messages_give_a_fix_that_works():
    import torch

    from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model
    from vlmrm_fast.frames.preprocess import as_frame_tensor

    unit = np.random.default_rng(0).random((2, 8, 8, 3), dtype=np.float32)
    with pytest.raises(
        TypeError, match=r"values in \[0, 1\].*\(frames \* 255\)\.round\(\)\.clip\(0, 255\)\.astype\(np\.uint8\)"
    ) as info:
        as_frame_tensor(unit)
    fixed = eval(str(info.value).rsplit("first: ", 1)[1], {"frames": unit, "np": np})  # the advice, run as given
    assert fixed.dtype == np.uint8 and fixed.max() > 200
    with pytest.raises(TypeError, match=r"\.to\(torch\.uint8\)"):
        as_frame_tensor(torch.from_numpy(unit * 255))
    rm = load_reward_model("vlmrm-tiny", target_prompts="a pole", device="cpu")
    env = FastVLMRewardVecEnv("cartpole", 2, reward_model=rm, seed=0)
    try:
        with pytest.raises(
            TypeError,
            match=r"actions must be integers, an array of shape \(2,\) for 2 envs of Discrete\(2\); got dtype <U5",
        ):
            env.step(np.array(["left", "right"]))
    finally:
        env.close()


def test_a_prompt_longer_than_the_context_is_named_with_the_tokens_dropped():
    from vlmrm_fast import PromptTruncatedWarning, load_reward_model

    long = "a humanoid robot " + "very " * 80 + "kneeling"
    with pytest.warns(PromptTruncatedWarning, match=r"is 88 tokens long .* the last 11 are dropped"):
        load_reward_model("vlmrm-tiny", target_prompts=long, device="cpu")


def test_the_seed_is_applied_at_construction():
    from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model

    rm = load_reward_model("vlmrm-tiny", target_prompts="a humanoid robot", device="cpu")

    def trajectory(reset: bool) -> np.ndarray:
        env = FastVLMRewardVecEnv("humanoid-kneeling", 2, reward_model=rm, render_size=32, episode_length=3, seed=7)
        try:
            if reset:
                env.reset()
            actions = np.full((2, 17), 0.1, np.float32)
            return np.stack([env.step(actions)[0] for _ in range(5)])  # past an auto-reset
        finally:
            env.close()

    without_reset = trajectory(False)
    assert np.array_equal(without_reset, trajectory(False))
    assert np.array_equal(without_reset, trajectory(True))


def test_run_config_holds_the_resolved_prompts(tmp_path):
    cfg = load_config(_config(tmp_path, rl={"total_timesteps": 4}))
    assert cfg.reward.target_prompts is None
    assert train(cfg) == 0
    saved = yaml.safe_load((cfg.run_dir / "config.yaml").read_text())
    assert saved["reward"]["target_prompts"] == ["a humanoid robot kneeling"]
    assert saved["reward"]["baseline_prompts"] == ["a humanoid robot"]
    assert saved["env"]["episode_length"] == 10


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"batch_size": "64"},
            r"rl\.kwargs\.batch_size: expected an integer, got the string '64'; remove the quotes: 64",
        ),
        ({"learning_rate": "3e-4"}, r"rl\.kwargs\.learning_rate: expected a number .* write 3\.0e-4"),
        ({"train_freq": [1, 2]}, r"rl\.kwargs\.train_freq: expected an integer or a list \[int, str\]"),
        (
            {"learnig_rate": 0.001},
            r"rl\.kwargs\.learnig_rate: SAC has no argument 'learnig_rate'; did you mean 'learning_rate'\?",
        ),
        ({"seed": 1}, r"rl\.kwargs\.seed: set by the config's seed"),
        (
            {"policy_kwargs": {"activation_fn": "Relu"}},
            r"activation_fn: 'Relu' is not a class in torch\.nn; did you mean ReLU\?",
        ),
    ],
)
def test_rl_kwargs_are_checked_against_the_algorithm_before_training(tmp_path, kwargs, message):
    from vlmrm_fast.training.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, rl={"kwargs": kwargs}))


def test_rl_kwargs_in_yaml_forms_reach_sb3_as_it_wants_them(tmp_path):
    import torch

    from vlmrm_fast.training.config import algorithm_kwargs

    cfg = load_config(
        _config(tmp_path, rl={"kwargs": {"train_freq": [2, "step"], "policy_kwargs": {"activation_fn": "ReLU"}}})
    )
    kwargs = algorithm_kwargs(cfg.rl)
    assert kwargs["train_freq"] == (2, "step") and kwargs["policy_kwargs"]["activation_fn"] is torch.nn.ReLU


def _offline(monkeypatch, tmp_path) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))


def test_a_missing_model_offline_is_one_line_in_every_command(tmp_path, monkeypatch, capsys):
    from vlmrm_fast.evaluation.dataset import StateDataset

    _offline(monkeypatch, tmp_path)
    model = "ViT-B-32/laion2b_s34b_b79k"
    dataset = StateDataset(
        "cartpole", np.zeros((4, 4)), np.zeros((4, 8, 8, 3), np.uint8), ("a", "b", "c", "d"), np.array([0.0, 1, 0, 1])
    )
    data = dataset.save(tmp_path / "d.npz")
    config = _config(tmp_path, reward={"model": model})
    commands = {
        "train": ["train", str(config)],
        "evaluate": ["evaluate", str(data), "--models", model, "--device", "cpu", "-o", str(tmp_path / "eval")],
        "landscape": [
            "landscape",
            "cartpole",
            "--variable",
            "pole_angle",
            "--model",
            model,
            "--device",
            "cpu",
            "-o",
            str(tmp_path / "eval"),
        ],
        "download": ["download", model],
        "export": ["export", model, "--onnx-only", str(tmp_path / "x.onnx")],
    }
    for name, argv in commands.items():
        assert cli_main(argv) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, f"{name}: {err}"
        if name == "download":  # the advice is never the command just run: the variable that stops it is named
            assert f"{model}: not in the local cache, and HF_HUB_OFFLINE=1 keeps the download" in err, err
            assert "(unset HF_HUB_OFFLINE)" in err and "`vlmrm-fast download" not in err, err
            continue
        assert "HF_HUB_OFFLINE is set" in err and f"vlmrm-fast download {model}" in err, name
        assert "hf download laion/CLIP-ViT-B-32-laion2B-s34B-b79K" in err and "huggingface-cli" not in err, name
    assert not (tmp_path / "run").exists(), "a refused train left a run folder"
    assert not (tmp_path / "eval").exists()


def test_info_on_a_machine_without_a_gpu_says_so(monkeypatch, capsys):
    from vlmrm_fast import cli
    from vlmrm_fast.runtime import device

    info = {
        "cuda_compiled": True,
        "cuda_available": False,
        "cuda_device_name": None,
        "cuda_version": "13.0",
        "cuda_device_count": 0,
        "cuda_error": "CUDA driver version is insufficient for CUDA runtime version",
    }
    monkeypatch.setattr(device, "nvidia_driver_present", lambda: False)
    assert device.describe_cuda_device(info) == "no GPU: this machine has no NVIDIA driver (CPU paths are used)"
    monkeypatch.setattr(device, "nvidia_driver_present", lambda: True)
    assert "update the driver" in device.describe_cuda_device(info)
    monkeypatch.undo()
    if not device.nvidia_driver_present():  # this machine: the real command
        assert cli.main(["info"]) == 0
        out = capsys.readouterr().out
        assert "no GPU" in out and "insufficient" not in out


def test_profile_prints_a_table_of_the_stages():
    from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model

    rm = load_reward_model("vlmrm-tiny", target_prompts="a humanoid robot", device="cpu")
    env = FastVLMRewardVecEnv("humanoid-kneeling", 2, reward_model=rm, render_size=32, seed=0)
    try:
        timer = env.profile()
        assert "no stage timed yet" in str(timer)
        env.reset()
        for _ in range(3):
            env.step(np.zeros((2, 17), np.float32))
        table = str(timer)
    finally:
        env.close()
    header, *rows, total = table.splitlines()
    assert header.split() == ["stage", "calls", "total", "ms", "ms/call", "share"]
    assert {row.split()[0] for row in rows} >= {"physics", "render", "preprocess", "encode", "reward"}
    assert all(row.split()[1] == "3" for row in rows) and total.startswith("all")
    assert "ms_per_call" in repr(timer)


def test_landscape_says_why_no_goal_is_marked(tmp_path, capsys):
    argv = [
        "landscape",
        "humanoid-kneeling",
        "--variable",
        "qpos:right_knee",
        "--model",
        "vlmrm-tiny",
        "--points",
        "2",
        "--alphas",
        "0",
        "--size",
        "16",
        "16",
        "--device",
        "cpu",
        "-o",
        str(tmp_path),
    ]
    assert cli_main(argv) == 0
    assert "no goal marked: humanoid-kneeling defines no goal value for qpos:right_knee" in capsys.readouterr().out
    assert cli_main(argv[:-2] + ["--goal", "-1.0", "-o", str(tmp_path)]) == 0
    assert "no goal marked" not in capsys.readouterr().out


def test_a_folder_another_process_trains_in_is_refused(tmp_path, capsys):
    from vlmrm_fast.training.run_folder import RunFolder

    config = _config(tmp_path)
    held = RunFolder(tmp_path / "run").lock()  # as another process would hold it
    try:
        for argv in (["train", str(config)], ["train", str(config), "--resume"]):
            assert cli_main(argv) == 2
            assert f"is in use by another training process (pid {os.getpid()})" in capsys.readouterr().err
    finally:
        held.release()
    assert not (tmp_path / "run").exists()  # the lock's folder goes with a refused start


def test_the_lock_file_goes_with_its_release_and_a_stale_open_is_not_a_lock(tmp_path):
    import fcntl

    from vlmrm_fast.training.run_folder import LOCK_FILE, RunFolder, RunFolderError

    folder = RunFolder(tmp_path / "run")
    (tmp_path / "run").mkdir()
    first = folder.lock()
    stale = os.open(tmp_path / "run" / LOCK_FILE, os.O_RDWR)  # a process that opened the lock before the release
    with pytest.raises(RunFolderError, match="in use by another training process"):
        folder.lock()
    assert (tmp_path / "run" / LOCK_FILE).exists(), "a refused start leaves the holder's lock alone"
    first.release()
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    try:
        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # it now locks a file no name leads to
        second = folder.lock()  # ... and a new start is not blocked by it
        assert (tmp_path / "run" / LOCK_FILE).exists()
        second.release()
    finally:
        os.close(stale)
    assert (tmp_path / "run").is_dir() and not any((tmp_path / "run").iterdir())
