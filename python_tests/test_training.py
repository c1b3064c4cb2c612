"""Training with SB3 on VLM rewards (tiny CLIP, CPU) and the train CLI."""

from __future__ import annotations

import copy
import os
import pathlib
import signal

import numpy as np
import pytest
import yaml
from child_process import PreloadedChild, package_env
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback

from vlmrm_fast import load_reward_model
from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.envs import get_task
from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.config import ConfigError, load_config
from vlmrm_fast.training.run_folder import LOCK_FILE
from vlmrm_fast.training.train import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

CONFIG = {
    "seed": 1,
    "reward": {"model": "vlmrm-tiny", "alpha": 0.5, "device": "cpu"},
    "env": {"task": "humanoid-kneeling", "n_envs": 2, "episode_length": 20, "render_size": 64},
    "rl": {
        "algorithm": "SAC",
        "total_timesteps": 120,
        "device": "cpu",
        "kwargs": {"learning_starts": 40, "batch_size": 16, "buffer_size": 1000},
    },
    "logging": {"checkpoint_every": 60, "video_every": 120},
}


def latest_checkpoint(run_dir: pathlib.Path) -> pathlib.Path:
    """The model file of the run's newest complete checkpoint."""
    return checkpoints.scan(run_dir / "checkpoints").newest().model


@pytest.mark.parametrize(
    "algo, kwargs",
    [
        (SAC, {"learning_starts": 50, "batch_size": 16, "buffer_size": 1000}),
        (PPO, {"n_steps": 32, "batch_size": 16, "n_epochs": 1}),
    ],
)
def test_sb3_trains_on_humanoid(humanoid_tiny_rm, algo, kwargs):
    env = FastVLMRewardVecEnv(
        "humanoid-kneeling", 2, reward_model=humanoid_tiny_rm, render_size=64, episode_length=25, seed=0
    )
    model = algo("MlpPolicy", env, seed=0, device="cpu", **kwargs)
    model.learn(200)
    assert model.num_timesteps >= 200
    env.close()


def test_dqn_trains_on_cartpole():
    spec = get_task("cartpole")
    rm = load_reward_model("vlmrm-tiny", target_prompts=spec.target_prompts, device="cpu")
    env = FastVLMRewardVecEnv("cartpole", 2, reward_model=rm, seed=0)
    model = DQN("MlpPolicy", env, learning_starts=50, batch_size=16, buffer_size=1000, seed=0, device="cpu")
    model.learn(200)
    assert model.num_timesteps >= 200
    env.close()


def _write(tmp_path: pathlib.Path, cfg: dict) -> pathlib.Path:
    cfg = copy.deepcopy(cfg)
    cfg["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_train_cli_writes_logs_video_checkpoints_and_resumes(tmp_path):
    path = _write(tmp_path, CONFIG)
    assert cli_main(["train", str(path)]) == 0
    run = tmp_path / "run"
    assert (run / "final_model.zip").is_file()
    assert list((run / "videos").glob("*.mp4"))
    assert list((run / "tensorboard").rglob("events.out.tfevents.*"))
    assert latest_checkpoint(run).name == "model_120_steps.zip"
    assert not (run / LOCK_FILE).exists(), "a clean exit removes its lock"
    assert [p.name for p in (run / "checkpoints").glob("*.pkl")] == ["model_replay_buffer_120_steps.pkl"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((run / "tensorboard").rglob("events.out.tfevents.*"))))
    events.Reload()
    assert {"rollout/ep_vlm_reward_mean", "rollout/ep_gt_reward_mean"} <= set(events.Tags()["scalars"])
    # resume to a larger budget: continues from 120 steps
    assert cli_main(["train", str(path), "--resume", "--total-timesteps", "180"]) == 0
    assert SAC.load(run / "final_model.zip").num_timesteps >= 180


def _scalar_steps(run: pathlib.Path) -> dict[str, list[int]]:
    """Every scalar tag of the run's TensorBoard logs and the steps it was written at, in order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps: dict[str, list[int]] = {}
    for path in sorted((run / "tensorboard").rglob("events.out.tfevents.*")):
        events = EventAccumulator(str(path))
        events.Reload()
        for tag in events.Tags()["scalars"]:
            steps.setdefault(tag, []).extend(event.step for event in events.Scalars(tag))
    return steps


@pytest.mark.parametrize(
    "rl",
    [
        # SAC: 2 x 4 episodes end at the last step; SB3 writes the logs there (every 4th episode) before
        # that step's gradient update records new train/* values, which the run's end writes
        {"total_timesteps": 160},
        {"algorithm": "PPO", "total_timesteps": 96, "kwargs": {"n_steps": 16, "batch_size": 16, "n_epochs": 1}},
    ],
    ids=["SAC", "PPO"],
)
def test_tensorboard_writes_each_scalar_once_per_step(tmp_path, rl):
    cfg = copy.deepcopy(CONFIG)
    cfg["rl"] = {**cfg["rl"], **rl}
    cfg["logging"]["video_every"] = 0
    assert cli_main(["train", str(_write(tmp_path, cfg))]) == 0
    steps = _scalar_steps(tmp_path / "run")
    assert any(tag.startswith("train/") for tag in steps) and "rollout/ep_vlm_reward_mean" in steps
    repeated = {tag: s for tag, s in steps.items() if len(s) != len(set(s))}
    assert not repeated, f"scalars written twice at one step: {repeated}"


@pytest.mark.slow  # a training run in a child process
def test_output_to_a_file_is_whole_lines(tmp_path):
    """Written to a log (not a terminal), train and dataset sample print plain progress lines: no
    carriage returns, counts of what was asked, and the mean VLM return of the last episodes."""
    cfg = copy.deepcopy(CONFIG)
    cfg["logging"]["video_every"] = 0
    env = package_env(VLMRM_TRACEBACK="1")
    # `vlmrm-fast train CONFIG > FILE 2>&1`, forked with the training stack imported (seconds saved)
    done = PreloadedChild(["train", str(_write(tmp_path, cfg))], env, tmp_path / "train", stderr_to_stdout=True)
    text, _ = done.communicate(timeout=600)
    assert done.returncode == 0, text
    assert "\r" not in text and "\x1b" not in text, repr(text[-2000:])
    progress = [line for line in text.splitlines() if line.startswith("train: ")]
    assert progress and progress[-1].startswith("train: 120/120 step (100%)"), text
    assert "vlm_reward" in progress[-1], text
    assert "renderer " in text and "reward encoder" in text, text  # the start-up summary, once the envs are built

    done = PreloadedChild(
        ["dataset", "sample", "cartpole", "-n", "20", "-o", str(tmp_path / "data" / "cartpole.npz")],
        env,
        tmp_path / "sample",
    )
    text = "".join(done.communicate(timeout=600))
    assert done.returncode == 0, text
    assert "\r" not in text, repr(text)
    sample = [line for line in text.splitlines() if line.startswith("sample: ")]
    assert sample and sample[0].startswith("sample: 0/20 state") and sample[-1].startswith("sample: 20/20 state"), text


class _CtrlC(BaseCallback):
    """Presses Ctrl-C (a real SIGINT to this process) at 50 steps."""

    def _on_step(self) -> bool:
        if self.num_timesteps == 50:
            os.kill(os.getpid(), signal.SIGINT)
        return True


def test_ctrl_c_saves_a_checkpoint(tmp_path, monkeypatch):
    cfg = load_config(_write(tmp_path, CONFIG))
    cfg.logging.video_every = 0
    from vlmrm_fast.training import callbacks

    original = callbacks.TrainingControl.__init__

    def with_ctrl_c(self, cbs, stop, *, on_policy):
        original(self, list(cbs) + [_CtrlC()], stop, on_policy=on_policy)

    monkeypatch.setattr(callbacks.TrainingControl, "__init__", with_ctrl_c)
    assert train(cfg) == 130
    checkpoint = latest_checkpoint(cfg.run_dir)
    assert checkpoint is not None and "interrupted" in checkpoint.name
    # saved at the rollout start right after that step (SAC collects one step of 2 envs per rollout)
    assert SAC.load(checkpoint).num_timesteps == 50


def test_an_error_in_training_is_a_crash_that_names_the_last_checkpoint(tmp_path, monkeypatch):
    cfg = load_config(_write(tmp_path, CONFIG))
    cfg.logging.video_every = 0
    from vlmrm_fast.training import callbacks

    class Boom(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 70:
                raise RuntimeError("boom")
            return True

    original = callbacks.TrainingControl.__init__
    monkeypatch.setattr(
        callbacks.TrainingControl,
        "__init__",
        lambda self, cbs, stop, *, on_policy: original(self, list(cbs) + [Boom()], stop, on_policy=on_policy),
    )
    with pytest.raises(RuntimeError, match="boom") as info:
        cli_main(["train", str(_write(tmp_path, CONFIG))])
    assert any("the newest checkpoint is model_60_steps.zip (60 steps)" in note for note in info.value.__notes__)
    assert [c.name for c in [latest_checkpoint(cfg.run_dir)]] == ["model_60_steps.zip"]


def test_episode_batch_rewards_fill_the_replay_buffer(tmp_path, humanoid_tiny_rm):
    cfg = copy.deepcopy(CONFIG)
    cfg["rl"]["episode_batch"] = True
    cfg["logging"]["video_every"] = 0
    cfg["rl"]["kwargs"] = {"learning_starts": 40, "batch_size": 16, "train_freq": 20, "buffer_size": 1000}
    config = load_config(_write(tmp_path, cfg))
    assert train(config) == 0
    model = SAC.load(config.run_dir / "final_model.zip")
    model.load_replay_buffer(config.run_dir / "checkpoints" / "model_replay_buffer_120_steps.pkl")
    buffer = model.replay_buffer
    stored = buffer.rewards[: buffer.pos]
    assert np.all(stored != 0.0), "every stored transition got its VLM reward"
    # the stored rewards are the reward model's scores of the reached states' frames
    assert np.all((stored > -1.5) & (stored < 1.0))


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"rl": {"algorithm": "SACC"}}, r"rl.algorithm: 'SACC' is not one of SAC, PPO, DQN"),
        ({"reward": {"alpha": 2}}, r"reward.alpha: must be a finite number in \[0, 1\], got 2"),
        ({"env": {"n_envs": 0}}, "env.n_envs: must be a positive integer, got 0"),
        ({"rl": {"total_timsteps": 5}}, "rl.total_timsteps.*did you mean 'total_timesteps'|rl.total_timsteps: unknown"),
        ({"env": {"task": "humanoid-kneel"}}, "env.task: unknown task"),
        ({"task": "cartpole"}, "task: moved; write env.task"),
        ({"reward": {"episode_batch": True}}, "reward.episode_batch: moved; write rl.episode_batch"),
        ({"seed": "abc"}, "seed: must be a non-negative integer, got 'abc'"),
        ({"reward": {"target_prompts": [""]}}, "reward.target_prompts"),
        ({"rl": {"algorithm": "PPO", "episode_batch": True}}, "rl.episode_batch: only for off-policy"),
        ({"distributed": {"learner_envs": -1}}, "distributed.learner_envs: must be a non-negative integer, got -1"),
        ({"distributed": {"learner_envs": 99}}, "distributed.learner_envs: 99 is more than env.n_envs="),
        (
            {"distributed": {"heartbeat": 5, "heartbeat_timeout": 6}},
            "distributed.heartbeat_timeout: must be at least twice",
        ),
        ({"distributed": {"timout": 5}}, "distributed.timout: unknown field; did you mean 'timeout'"),
        ({"distributed": {"report_every": -1}}, "distributed.report_every: must be 0 .* got -1$"),
        ({"env": {"rank_timeout": 60}}, "env.rank_timeout: moved; write distributed.timeout"),
        # SB3 would keep one row of n_envs transitions, silently
        ({"rl": {"kwargs": {"buffer_size": -1}}}, r"rl.kwargs.buffer_size: must be a positive integer \(transitions"),
        ({"rl": {"kwargs": {"buffer_size": 0}}}, r"rl.kwargs.buffer_size: must be .* keeps\), got 0$"),
        ({"rl": {"kwargs": {"buffer_size": 1}}}, "rl.kwargs.buffer_size: 1 is fewer transitions than env.n_envs=2"),
        ({"rl": {"algorithm": "PPO", "kwargs": {"n_steps": 0}}}, "rl.kwargs.n_steps: must be a positive integer"),
        (
            {"rl": {"algorithm": "PPO", "kwargs": {"n_epochs": 0}}},
            r"rl.kwargs.n_epochs: must be a positive integer .*got 0$",
        ),
    ],
)
def test_config_errors_name_the_field(tmp_path, patch, message):
    cfg = copy.deepcopy(CONFIG)
    for key, value in patch.items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, cfg))


def test_config_error_exit_code(tmp_path, capsys):
    cfg = copy.deepcopy(CONFIG)
    cfg["rl"]["algorithm"] = "A2C"
    assert cli_main(["train", str(_write(tmp_path, cfg))]) == 2
    assert "rl.algorithm" in capsys.readouterr().err


def test_dqn_on_continuous_task_is_a_config_error(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["rl"]["algorithm"] = "DQN"
    cfg["rl"]["kwargs"] = {}
    with pytest.raises(ConfigError, match="DQN cannot train"):
        train(load_config(_write(tmp_path, cfg)))


CONFIGS = sorted((pathlib.Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_configs_are_valid(path):
    cfg = load_config(path)
    assert cfg.rl.total_timesteps > 0 and cfg.reward.model


def test_quickstart_uses_the_tiny_model_offline():
    cfg = load_config(pathlib.Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    assert cfg.reward.model == "vlmrm-tiny"
    assert len(CONFIGS) >= 8
    # Its replay buffer holds the run and no more: a buffer as large as the run's transitions, not SB3's 1e6
    buffer_size = cfg.rl.kwargs["buffer_size"]
    assert cfg.rl.total_timesteps <= buffer_size <= 2 * cfg.rl.total_timesteps


# ----------------------------------------------------------------------------- the run identity
IDENTITY_BASE = {"env": {"task": "humanoid-kneeling"}, "reward": {"model": "vlmrm-tiny"}}


def _config_places() -> list[str]:
    """Every field of the config by its place (``env.physics``), read from the dataclasses: a field added to
    EnvSpec, RewardModelSpec or RLConfig is here without a word in this file."""
    import dataclasses
    import typing

    from vlmrm_fast.training.config import IDENTITY_SECTIONS, TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    places = []
    for field in dataclasses.fields(TrainConfig):
        if not field.metadata.get("yaml", True):
            continue
        if field.name in IDENTITY_SECTIONS:
            places += [f"{field.name}.{f.name}" for f in dataclasses.fields(hints[field.name])]
        else:
            places.append(field.name)
    return places


# The fields compared by what they run take a value that runs something else; any other gets a stand-in.
_CHANGED = {"env.physics": "warp", "env.solver": "cg"}
# The fields whose "auto" stands for the choice each checkpoint records apart start from a named value.
_NAMED = {"env.renderer": "egl"}


@pytest.mark.parametrize("place", _config_places())
def test_every_config_field_is_in_the_run_identity_or_exempt_with_its_reason(place):
    from vlmrm_fast.training.config import IDENTITY_EXEMPT, _places, identity_differences, resolved, run_identity
    from vlmrm_fast.training.run_folder import plain

    identity = plain(run_identity(resolved(load_config(IDENTITY_BASE))))
    places = _places(identity)
    exempt = place if place in IDENTITY_EXEMPT else place.split(".")[0]
    if exempt in IDENTITY_EXEMPT:
        assert place not in places
        reason = IDENTITY_EXEMPT[exempt]
        assert len(reason.split()) >= 4 and not reason.endswith("."), reason  # a reason, in the table's style
        return
    assert place in places, f"{place} is neither in the run identity nor in IDENTITY_EXEMPT with a reason"
    section, _, name = place.rpartition(".")
    if place in _NAMED:
        (identity[section] if section else identity)[name] = places[place] = _NAMED[place]
    changed = copy.deepcopy(identity)
    holder = changed[section] if section else changed
    new = _CHANGED.get(place, "<another value>")
    holder[name] = new
    assert identity_differences(identity, changed) == [f"{place}: {places[place]!r} then, {new!r} now"]


@pytest.mark.parametrize(
    ("then", "now", "same"),
    [
        ({"physics": "auto"}, {"physics": "batch"}, True),  # the simulator env and gymnasium step the same
        ({"physics": "batch"}, {"physics": "gym"}, True),
        ({"physics": "batch"}, {"physics": "warp"}, False),  # float32 MuJoCo Warp, Newton
        ({"physics": "auto"}, {"physics": "warp"}, False),
        ({"physics": "warp", "solver": None}, {"physics": "warp", "solver": "newton"}, True),  # Warp's default
        ({"physics": "warp", "solver": None}, {"physics": "warp", "solver": "cg"}, False),
        ({"physics": "batch", "solver": None}, {"physics": "batch", "solver": "pgs"}, False),
        ({"renderer": "auto"}, {"renderer": "egl"}, True),  # what auto chose is recorded and compared apart
        ({"renderer": "warp"}, {"renderer": "auto"}, True),
        ({"renderer": "egl"}, {"renderer": "warp"}, False),
    ],
)
def test_physics_and_solver_are_compared_by_what_they_run(then, now, same):
    from vlmrm_fast.training.config import identity_differences, resolved, run_identity
    from vlmrm_fast.training.run_folder import plain

    base = {**IDENTITY_BASE, "env": {"task": "humanoid-kneeling"}}
    a = plain(run_identity(resolved(load_config({**base, "env": {**base["env"], **then}}))))
    b = plain(run_identity(resolved(load_config({**base, "env": {**base["env"], **now}}))))
    differences = identity_differences(a, b)
    assert (differences == []) == same, differences
    if not same:
        assert all(
            d.startswith(("env.physics: ", "env.solver: ", "env.renderer: ")) and " then, " in d for d in differences
        )


def test_a_resume_of_another_config_names_the_field_inside_a_block_not_the_block(tmp_path):
    """A window or criteria list that differs is named by its field (``reward.window.frames``,
    ``reward.criteria[0].question``), not printed whole: the refusal stays one short line."""
    from vlmrm_fast.training.config import identity_differences, resolved, run_identity
    from vlmrm_fast.training.run_folder import RunFolder, plain

    saved = plain(run_identity(resolved(load_config(IDENTITY_BASE))))
    saved["reward"]["window"] = {"model": "s3d", "frames": 8, "stride": 1, "timing": "streamed", "fps": None}
    saved["reward"]["criteria"] = [{"kind": "question", "question": "Is the robot kneeling?", "yes": "Yes", "no": "No"}]
    current = copy.deepcopy(saved)
    current["reward"]["window"]["frames"] = 16
    current["reward"]["criteria"][0]["question"] = "Is the robot standing?"
    current["reward"]["criteria"].append({"kind": "question", "question": "Is it upright?"})
    window, criteria = sorted(identity_differences(saved, current), key=lambda d: not d.startswith("reward.window"))
    assert window == "reward.window.frames: 8 then, 16 now"
    assert criteria.startswith("reward.criteria: [{'kind': 'question', 'question': 'Is the robot kneeling?'")
    assert len(criteria) < 300, criteria  # a list of another length: shown, cut short
    current["reward"]["criteria"].pop()
    assert sorted(identity_differences(saved, current)) == [
        "reward.criteria[0].question: 'Is the robot kneeling?' then, 'Is the robot standing?' now",
        "reward.window.frames: 8 then, 16 now",
    ]
    current["reward"]["window"]["overlap"] = 2  # a key one side lacks
    assert "reward.window.overlap: absent then, 2 now" in identity_differences(saved, current)
    line = str(RunFolder(tmp_path)._mismatch("checkpoint model_40_steps.zip", saved, current))
    assert len(line) < 500 and "'timing'" not in line, line


def test_a_checkpoint_older_than_an_identity_field_is_not_compared_on_it_and_the_resume_says_so():
    from vlmrm_fast.training.config import identity_differences, resolved, run_identity, unrecorded_fields
    from vlmrm_fast.training.run_folder import plain

    current = plain(run_identity(resolved(load_config({**IDENTITY_BASE, "env": {"task": "humanoid-kneeling"}}))))
    saved = copy.deepcopy(current)
    del saved["env"]["physics"], saved["env"]["solver"]  # saved before they were part of the identity
    assert identity_differences(saved, current) == []
    assert unrecorded_fields(saved, current) == ["env.physics", "env.solver"]
    assert identity_differences({}, current) == ["the saved run identity is unreadable"]


def test_the_docs_list_every_field_left_out_of_the_run_identity_with_its_reason():
    import re

    from vlmrm_fast.training.config import IDENTITY_EXEMPT

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    section = text.split("## The run identity", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.+) \|$", section, flags=re.MULTILINE))
    assert {place: reason.replace("`", "") for place, reason in rows.items()} == IDENTITY_EXEMPT
