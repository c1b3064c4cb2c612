"""One line for each mistake a user makes, naming the field and the fix; the defaults that decide
a run's cost printed before it starts."""

from __future__ import annotations

import copy
import errno
import os
import pathlib
import signal
import subprocess
import sys

import pytest
import yaml

from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training.config import ConfigError, load_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

CHILD = pathlib.Path(__file__).with_name("training_child.py")
CONFIG = {
    "reward": {"model": "vlmrm-tiny", "device": "cpu"},
    "env": {"task": "humanoid-kneeling", "n_envs": 2, "episode_length": 10, "render_size": 32},
    "rl": {
        "algorithm": "SAC",
        "total_timesteps": 8,
        "device": "cpu",
        "kwargs": {"learning_starts": 4, "batch_size": 4, "buffer_size": 100, "policy_kwargs": {"net_arch": [8]}},
    },
    "logging": {"checkpoint_every": 100, "video_every": 0, "tensorboard": False},
}


def _config(tmp_path: pathlib.Path, **fields) -> pathlib.Path:
    cfg = {**copy.deepcopy(CONFIG), "output_dir": str(tmp_path / "run"), **fields}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_a_seed_that_is_no_integer_names_the_field(tmp_path):
    from vlmrm_fast import FastVLMRewardVecEnv

    with pytest.raises(TypeError, match=r"^seed: must be a non-negative integer, got 'abc'$"):
        FastVLMRewardVecEnv("humanoid-kneeling", 2, model="vlmrm-tiny", device="cpu", seed="abc")
    with pytest.raises(TypeError, match=r"^seed: must be a non-negative integer, got '7'; remove the quotes$"):
        FastVLMRewardVecEnv("humanoid-kneeling", 2, model="vlmrm-tiny", device="cpu", seed="7")
    with pytest.raises(ConfigError, match=r"^seed: must be a non-negative integer, got 'abc'$"):
        load_config(_config(tmp_path, seed="abc"))


def test_a_negative_seed_is_refused_alike_everywhere(tmp_path):
    from vlmrm_fast import FastVLMRewardVecEnv, RewardModelSpec, load_reward_model

    message = r"^seed: must be a non-negative integer, got -1$"
    with pytest.raises(ValueError, match=message):
        FastVLMRewardVecEnv("humanoid-kneeling", 2, model="vlmrm-tiny", device="cpu", seed=-1)
    with pytest.raises(ValueError, match=message):
        load_reward_model("vlmrm-tiny", target_prompts="a humanoid robot", device="cpu", seed=-1)
    with pytest.raises(ValueError, match=message):
        RewardModelSpec("vlmrm-tiny", target_prompts="a humanoid robot", seed=-1)
    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, seed=-1))


def test_a_misspelt_env_argument_is_named_with_the_closest_one(humanoid_tiny_rm):
    from vlmrm_fast import FastVLMRewardVecEnv

    expected = r"^FastVLMRewardVecEnv got an unknown argument 'renderr'; did you mean 'renderer'\?$"
    with pytest.raises(TypeError, match=expected):
        FastVLMRewardVecEnv("humanoid-kneeling", 2, model="vlmrm-tiny", device="cpu", renderr="egl")
    with pytest.raises(TypeError, match=expected):  # beside a loaded model too
        FastVLMRewardVecEnv("humanoid-kneeling", 2, reward_model=humanoid_tiny_rm, renderr="egl")


def test_a_read_only_output_dir_is_named_with_the_fix(tmp_path, monkeypatch, capsys):
    read_only = tmp_path / "read-only"
    real_mkdir = pathlib.Path.mkdir

    def mkdir(path, *args, **kwargs):  # as on a read-only filesystem (root ignores permission bits)
        if path == read_only or read_only in path.parents:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    config = _config(tmp_path, output_dir=str(read_only / "run"))
    assert cli_main(["train", str(config)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (
        f"vlmrm-fast train: error: output_dir: cannot write in {read_only / 'run'} (Read-only file system); "
        "choose a writable folder (output_dir in the config, or --output-dir)"
    )


def test_bad_yaml_is_one_line_with_file_and_line(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("task: humanoid-kneeling\nreward:\n  model: vlmrm-tiny\n   alpha: 0.5\n")
    assert cli_main(["train", str(config)]) == 2
    line = _one_line(capsys.readouterr().err)
    expected = f"vlmrm-fast train: config error: {config}:4:9: not valid YAML: mapping values are not allowed here"
    assert line.startswith(expected), line
    assert "fix that line" in line


@pytest.mark.parametrize("content", [b".", b"\x80\x02.", b"hello, this is not a weights file\n"])
def test_a_garbage_weights_file_is_named_as_not_weights(tmp_path, content):
    from vlmrm_fast import load_reward_model

    garbage = tmp_path / "weights.pt"
    garbage.write_bytes(content)
    with pytest.raises(ValueError) as info:
        load_reward_model("vlmrm-tiny", target_prompts="a", checkpoint=str(garbage), device="cpu")
    message = _one_line(str(info.value))
    assert f"checkpoint {str(garbage)!r} could not be loaded into vlmrm-tiny: it is not a readable weights file" in (
        message
    )
    assert "download or copy it again" in message


def test_sigterm_while_starting_says_what_happened(tmp_path):
    import vlmrm_fast

    config = _config(tmp_path)
    package_root = str(pathlib.Path(vlmrm_fast.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": package_root, "VLMRM_TEST_SLOW_SETUP": "1", "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(
        [sys.executable, "-P", str(CHILD), "train", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        seen = []
        while not seen or seen[-1] != "making the envs\n":
            line = child.stderr.readline()
            assert line, f"the child ended first: {''.join(seen)}"
            seen.append(line)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 128 + signal.SIGTERM
    assert _one_line(err) == "vlmrm-fast train: stopped by SIGTERM before training started; nothing was written"
    assert not (tmp_path / "run").exists()


def test_the_defaults_that_decide_the_cost_are_printed_before_training(tmp_path, capsys):
    from vlmrm_fast.training.train import startup_summary

    summary = startup_summary(load_config({"env": {"task": "humanoid-kneeling"}}), None)
    assert "rl.algorithm        SAC (the default)" in summary
    assert "rl.total_timesteps  100,000 (the default)" in summary
    assert "reward.model        ViT-bigG-14/laion2b_s39b_b160k (the default)" in summary
    assert f"output_dir          {pathlib.Path('runs/train').resolve()} (the default)" in summary
    # a run prints it first, before the envs are made
    assert cli_main(["train", str(_config(tmp_path))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "vlmrm-fast train: humanoid-kneeling, 2 envs; from scratch", out
    assert "  rl.total_timesteps  8" in out and "  reward.model        vlmrm-tiny on cpu" in out
    assert out[-1].startswith("done: 8 steps")
