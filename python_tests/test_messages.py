"""One line for each mistake a user makes, naming the field and the fix; the defaults that decide
a run's cost printed before it starts."""

from __future__ import annotations

import copy
import errno
import os
import pathlib
import signal
import time

import pytest
import yaml
from child_process import PreloadedChild

from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training.config import ConfigError, load_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

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


@pytest.mark.slow  # a start in a child process
def test_sigterm_while_starting_says_what_happened(tmp_path):
    import vlmrm_fast

    config = _config(tmp_path)
    package_root = str(pathlib.Path(vlmrm_fast.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": package_root, "VLMRM_TEST_SLOW_SETUP": "1", "OMP_NUM_THREADS": "1"}
    # training_child.py's main() forked with the training stack imported (seconds saved)
    child = PreloadedChild(["train", str(config)], env, tmp_path / "child")
    try:
        seen = ""
        while not seen.endswith("making the envs\n"):
            assert child.poll() is None, f"the child ended first: {child.communicate()[1]}"
            time.sleep(0.01)
            seen = child.stderr_path.read_text() if child.stderr_path.is_file() else ""
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
        err = err[len(seen) :]  # what it wrote after the signal
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
    # a run prints it first, before the envs are made; then the stack's plan in its one line, before anything loads
    assert cli_main(["train", str(_config(tmp_path))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "vlmrm-fast train: humanoid-kneeling, 2 envs; from scratch", out
    assert "  rl.total_timesteps  8" in out and "  reward.model        vlmrm-tiny" in out
    from vlmrm_fast.training.train import plan_run

    plan = plan_run(load_config(str(_config(tmp_path))))
    assert f"  stack               {plan.describe()}" in out, out
    assert plan.describe().startswith("humanoid-kneeling, 2 envs scored on cpu: physics batch, renderer ")
    assert [line for line in out if "renderer" in line or "scored on" in line] == [
        f"  stack               {plan.describe()}"
    ]
    assert out[-1].startswith("done: 8 steps")


# ---------------------------------------------------------------- a newcomer's slips, each answered in one line
def test_a_folder_as_the_config_path_is_named_a_folder(tmp_path, capsys):
    folder = tmp_path / "adir.yaml"
    folder.mkdir()
    (folder / "train.yaml").write_text("env: {task: humanoid-kneeling}\n")
    assert cli_main(["train", str(folder)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast train: config error: config file {str(folder)!r} is a folder (it holds train.yaml); "
        "give the path of a YAML file"
    )


def test_a_config_that_is_not_utf8_is_named_with_the_fix(tmp_path, capsys):
    config = tmp_path / "latin1.yaml"
    config.write_bytes("env: {task: humanoid-kneeling}  # café\n".encode("latin-1"))
    assert cli_main(["train", str(config)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast train: config error: config file {str(config)!r} is not UTF-8 text (byte 0xe9 at offset 37); "
        "save it as UTF-8"
    )


def test_a_key_given_twice_in_a_config_is_refused(tmp_path, capsys):
    """PyYAML keeps the last of two equal keys silently: a second env: would train another task."""
    config = tmp_path / "twice.yaml"
    config.write_text("env: {task: humanoid-kneeling}\nrl: {algorithm: SAC}\nenv: {task: cartpole}\n")
    assert cli_main(["train", str(config)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast train: config error: {config}:3:1: 'env' is given twice in one mapping (first at line 1; "
        "YAML would keep the last silently); keep one"
    )
    nested = tmp_path / "nested.yaml"
    nested.write_text("env: {task: humanoid-kneeling}\nrl:\n  kwargs:\n    batch_size: 4\n    batch_size: 8\n")
    with pytest.raises(
        ConfigError, match=rf"^{nested}:5:5: 'batch_size' is given twice in one mapping \(first at line 4"
    ):
        load_config(nested)
    merged = tmp_path / "merged.yaml"  # a YAML merge key may be overridden: that is no duplicate
    merged.write_text("env: &env {task: humanoid-kneeling, n_envs: 2}\nreward:\n  model: vlmrm-tiny\n")
    assert load_config(merged).env.n_envs == 2
    from vlmrm_fast.training.config import read_yaml

    merged.write_text("base: &base {a: 1, b: 2}\nderived:\n  <<: *base\n  a: 3\n")
    assert read_yaml(merged) == {"base": {"a": 1, "b": 2}, "derived": {"a": 3, "b": 2}}


def test_rl_device_cuda_without_a_gpu_is_refused_as_reward_device_is(tmp_path, monkeypatch, capsys):
    import torch

    from vlmrm_fast.runtime.device import no_gpu_reason

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU, whatever this one has
    config = _config(tmp_path, rl={**CONFIG["rl"], "device": "cuda"})
    assert cli_main(["train", str(config)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast train: config error: rl.device: 'cuda' asks for a GPU, but {no_gpu_reason()}; set it to cpu or auto"
    )
    assert not (tmp_path / "run").exists()


def test_the_summary_marks_only_the_fields_the_config_left_out(tmp_path, capsys):
    from vlmrm_fast.training.train import startup_summary

    given = {"env": {"task": "humanoid-kneeling"}, "rl": {"algorithm": "SAC", "total_timesteps": 100_000}}
    summary = startup_summary(load_config(given), None).splitlines()
    assert "  rl.algorithm        SAC" in summary and "  rl.total_timesteps  100,000" in summary
    assert "  reward.model        ViT-bigG-14/laion2b_s39b_b160k (the default)" in summary
    # a command-line override counts as given
    config = _config(tmp_path)
    assert cli_main(["train", str(config), "--output-dir", str(tmp_path / "other"), "--total-timesteps", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"  output_dir          {tmp_path / 'other'}" in out and "  rl.total_timesteps  4" in out, out


def _space_failure(monkeypatch, failing_save: int) -> None:
    """The ``failing_save``-th checkpoint save (1 = the first) meets a full disk while writing its model."""
    from vlmrm_fast.training import checkpoints

    real, saves = checkpoints.write_atomically, []

    def write_atomically(path, write, **kwargs):
        if path.name.endswith("_steps.zip"):
            saves.append(path)
            if len(saves) == failing_save:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, write, **kwargs)

    monkeypatch.setattr(checkpoints, "write_atomically", write_atomically)


@pytest.mark.parametrize(("failing_save", "then"), [(1, "--overwrite"), (2, "--resume")])
def test_a_full_disk_names_the_command_that_works(tmp_path, monkeypatch, capsys, failing_save, then):
    """Before the first checkpoint --resume has nothing to continue: the advice is --overwrite; after one, --resume.
    The command the line names is run as printed, and finishes the run."""
    import shlex

    from stable_baselines3 import SAC

    config = _config(tmp_path, logging={**CONFIG["logging"], "checkpoint_every": 4})
    with monkeypatch.context() as patch:
        _space_failure(patch, failing_save)
        assert cli_main(["train", str(config)]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert line.startswith(f"vlmrm-fast train: no space left on the disk of {tmp_path / 'run' / 'checkpoints'}"), line
    command = f"vlmrm-fast train {config} {then}"
    assert line.endswith(f"; then run: {command}"), line
    assert cli_main(shlex.split(command)[1:]) == 0
    assert SAC.load(tmp_path / "run" / "final_model.zip").num_timesteps == 8


def test_a_read_only_checkpoint_folder_is_refused_before_anything_loads(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    real_open = os.open

    def open_(path, *args, **kwargs):  # as on a read-only mount (root ignores permission bits)
        if pathlib.Path(path).parent == folder:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    assert cli_main(["train", str(_config(tmp_path))]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast train: error: {folder} cannot be written (Read-only file system): the run saves its checkpoints "
        "there; make it writable (a read-only mount, or chmod u+w), or choose another folder (--output-dir)"
    )
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoints"]


def test_resuming_a_finished_run_answers_without_building_envs(tmp_path, monkeypatch, capsys):
    from stable_baselines3 import SAC

    from vlmrm_fast.training import train

    config = _config(tmp_path)
    assert cli_main(["train", str(config)]) == 0
    final = tmp_path / "run" / "final_model.zip"
    final.unlink()
    capsys.readouterr()

    def no_envs(cfg, plan=None):
        raise AssertionError("a finished run needs no envs")

    monkeypatch.setattr(train, "make_env", no_envs)
    assert cli_main(["train", str(config), "--resume"]) == 0
    assert _one_line(capsys.readouterr().out) == (
        "nothing to train: the run is at 8 of 8 steps (rl.total_timesteps; raise it, or pass --total-timesteps, to "
        f"train on); {final} is model_8_steps.zip"
    )
    assert SAC.load(final).num_timesteps == 8


def test_missing_weights_offline_fail_before_the_envs_are_built(tmp_path, monkeypatch, capsys):
    import time

    from vlmrm_fast.models import hub
    from vlmrm_fast.training import train

    def no_envs(cfg):
        raise AssertionError("the weights are checked first")

    monkeypatch.setattr(train, "make_env", no_envs)
    reward = {"model": "ViT-B-32/openai", "device": "cpu", "cache_dir": str(tmp_path / "empty-cache")}
    config = _config(tmp_path, reward=reward)
    for offline, reason in ((True, "HF_HUB_OFFLINE is set"), (False, "https://huggingface.co is unreachable")):
        with monkeypatch.context() as patch:
            if offline:
                patch.setenv("HF_HUB_OFFLINE", "1")
            else:
                patch.setattr(hub, "network_reachable", lambda url, timeout=None: False)
            start = time.monotonic()
            assert cli_main(["train", str(config)]) == 2
            took = time.monotonic() - start
        line = _one_line(capsys.readouterr().err)
        assert f"the ViT-B-32/openai weights: not in the local cache ({tmp_path / 'empty-cache'}) and {reason}" in line
        assert took < 5, took  # the imports done: the cache looked up, no network waited for
    assert not (tmp_path / "run").exists()


def test_a_string_for_reward_model_names_the_fix(humanoid_tiny_rm):
    import gymnasium
    from stable_baselines3.common.vec_env import DummyVecEnv

    from vlmrm_fast import FastVLMRewardVecEnv, VLMRewardVecEnvWrapper

    with pytest.raises(TypeError) as info:
        FastVLMRewardVecEnv("humanoid-kneeling", 2, reward_model="notamodel")
    assert _one_line(str(info.value)) == (
        "reward_model: expects a loaded reward model, got the string 'notamodel'; to name a model, pass "
        "model='notamodel' (or load one: vlmrm_fast.load_reward_model('notamodel'))"
    )
    with pytest.raises(
        TypeError, match=r"^reward_model: expects a reward model .* got int, which lacks device, criteria"
    ):
        VLMRewardVecEnvWrapper(DummyVecEnv([lambda: gymnasium.make("CartPole-v1")]), 3)  # type: ignore[arg-type]


def test_a_closed_reward_model_says_it_is_closed():
    import numpy as np

    from vlmrm_fast import load_reward_model

    rm = load_reward_model("vlmrm-tiny", target_prompts="a humanoid robot", device="cpu")
    frames = np.zeros((2, 32, 32, 3), np.uint8)
    pixels = rm.preprocessor(frames)
    rm.close()
    expected = (
        r"^this reward model \(vlmrm-tiny\) was closed: close\(\) released its weights, so it scores no more frames; "
        r"load it again \(vlmrm_fast.load_reward_model\) to score$"
    )
    for score in (lambda: rm(frames), lambda: rm.score_pixels(pixels), lambda: rm.embed_text("a robot")):
        with pytest.raises(RuntimeError, match=expected):
            score()


@pytest.mark.parametrize(
    ("shape", "fix", "advice"),
    [
        ((4, 32, 32), lambda f: f[..., None].repeat(3, axis=-1), "grayscale frames (N, H, W): repeat them into RGB, frames[..., None].repeat(3, axis=-1) (torch: .expand(-1, -1, -1, 3))"),
        ((3, 32, 32), lambda f: f.transpose(1, 2, 0)[None], "one channels-first frame (3, H, W): use frames.permute(1, 2, 0)[None] (numpy: frames.transpose(1, 2, 0)[None])"),
        ((32, 32, 3), lambda f: f[None], "one frame (H, W, 3): use frames[None]"),
        ((2, 3, 32, 32), lambda f: f.transpose(0, 2, 3, 1), "channels-first frames (N, 3, H, W): use frames.permute(0, 2, 3, 1) (numpy: frames.transpose(0, 2, 3, 1))"),
        ((2, 32, 32, 4), lambda f: f[..., :3], "RGBA frames: drop the alpha channel, frames[..., :3]"),
    ],
)  # fmt: skip
def test_frames_of_a_wrong_shape_get_a_fix_that_works(humanoid_tiny_rm, shape, fix, advice):
    import numpy as np

    frames = np.zeros(shape, np.uint8)
    with pytest.raises(ValueError) as info:
        humanoid_tiny_rm(frames)
    assert _one_line(str(info.value)) == (
        f"frames must be a batch (N, H, W, 3) of RGB frames, got shape {shape}; {advice}"
    )
    assert humanoid_tiny_rm(fix(frames)).ndim == 1


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_nan_frames_get_a_fix_that_removes_the_nan(humanoid_tiny_rm, library):
    import numpy as np
    import torch

    frames = np.full((2, 16, 16, 3), 0.5, np.float32)
    frames[0, 3, 4, 1], frames[1, 0, 0, 0] = np.nan, np.inf
    module = np if library == "numpy" else torch
    if library == "torch":
        frames = torch.from_numpy(frames)
    with pytest.raises(TypeError) as info:
        humanoid_tiny_rm(frames)
    short = "np" if library == "numpy" else "torch"
    assert _one_line(str(info.value)).endswith(
        f"holding NaN or infinite values; find where they come from, or replace them first: "
        f"{short}.nan_to_num(frames, nan=0.0, posinf=255.0, neginf=0.0), then round, clip and cast to uint8"
    )
    fixed = module.nan_to_num(frames, nan=0.0, posinf=255.0, neginf=0.0).round().clip(0, 255)
    fixed = fixed.astype(np.uint8) if library == "numpy" else fixed.to(torch.uint8)
    assert humanoid_tiny_rm(fixed).shape == (2,)


def test_more_envs_than_the_memory_holds_are_refused_before_allocating(humanoid_tiny_rm, monkeypatch):
    import mujoco

    from vlmrm_fast import FastVLMRewardVecEnv
    from vlmrm_fast.envs import get_task
    from vlmrm_fast.runtime import memory

    with pytest.raises(MemoryError) as info:  # about 90 TiB: more than any machine has
        FastVLMRewardVecEnv("humanoid-kneeling", 10**9, reward_model=humanoid_tiny_rm, render_size=128)
    assert _one_line(str(info.value)).startswith("n_envs=1,000,000,000: the envs need at least 93,"), str(info.value)
    model = get_task("humanoid-kneeling").vector_task.build_model(128)
    each = memory.env_bytes(model, (128, 128))
    data = mujoco.MjData(model)
    assert each >= data.qpos.nbytes + data.qvel.nbytes + 128 * 128 * 4
    monkeypatch.setattr(memory, "available_bytes", lambda: 2**30)
    with pytest.raises(MemoryError) as info:
        FastVLMRewardVecEnv("humanoid-kneeling", 10**6, reward_model=humanoid_tiny_rm, render_size=128)
    assert _one_line(str(info.value)) == (
        f"n_envs=1,000,000: the envs need at least {10**6 * each / 2**30:,.1f} GiB of memory ({each / 1024:,.0f} KiB "
        f"each: MuJoCo's data and a 128x128 RGBA frame), and 1.0 GiB are available; use at most {2**30 // each:,} "
        "envs here"
    )


def test_models_names_a_misspelt_architecture_and_keeps_the_unmeasured_to_one_line(capsys):
    assert cli_main(["models", "ViT-L-41"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "vlmrm-fast models: error: 'ViT-L-41' is not an open_clip architecture known here; did you mean ViT-L-16, "
        "ViT-L-14, ViT-g-14?"
    )
    assert cli_main(["models"]) == 0
    out = capsys.readouterr().out
    assert "OSError" not in out and "couldn't connect" not in out
    (line,) = [line for line in out.splitlines() if line.startswith("not measured")]
    assert "roberta-ViT-B-32" in line and "their text tower's config comes from the Hugging Face hub" in line


# ------------------------------------------------- what a run costs, and the faults that were tracebacks
def test_the_replay_buffer_said_at_start_up_is_what_sb3_allocates():
    """The start-up line's size is SB3's ReplayBuffer's arrays, byte for byte (and with optimize_memory_usage)."""
    import gymnasium
    import numpy as np
    from stable_baselines3.common.buffers import ReplayBuffer

    from vlmrm_fast.training.train import replay_buffer_size, startup_summary

    class Envs:  # what replay_buffer_size reads of the run's VecEnv
        num_envs = 4
        observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (376,), np.float64)
        action_space = gymnasium.spaces.Box(-0.4, 0.4, (17,), np.float32)

    for optimize in (False, True):
        buffer_kwargs = {"handle_timeout_termination": not optimize}  # SB3 takes them together only so
        kwargs = {"buffer_size": 1002, "optimize_memory_usage": optimize, "replay_buffer_kwargs": buffer_kwargs}
        cfg = load_config({"env": {"task": "humanoid-kneeling", "n_envs": 4}, "rl": {"kwargs": kwargs}})
        size = replay_buffer_size(cfg, Envs())
        buffer = ReplayBuffer(
            1002, Envs.observation_space, Envs.action_space, n_envs=4, optimize_memory_usage=optimize, **buffer_kwargs
        )
        arrays = [v for v in vars(buffer).values() if isinstance(v, np.ndarray)]
        assert size.transitions == 1000 and size.bytes == sum(a.nbytes for a in arrays), optimize
    default = replay_buffer_size(load_config({"env": {"task": "humanoid-kneeling", "n_envs": 4}}), Envs())
    assert default.transitions == 1_000_000 and not default.given
    assert replay_buffer_size(load_config({"env": {"task": "cartpole"}, "rl": {"algorithm": "PPO"}}), Envs()) is None
    # before the envs are built, the summary names the checkpoint interval's default too
    assert "  checkpoints         every 10,000 steps (the default), the newest 1 with the replay buffer" in (
        startup_summary(load_config({"env": {"task": "humanoid-kneeling"}}), None)
    )


def test_a_replay_buffer_beyond_memory_is_one_line_before_it_is_allocated(tmp_path, monkeypatch, capsys):
    from vlmrm_fast.runtime import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 2**30)
    rl = {**CONFIG["rl"], "kwargs": {k: v for k, v in CONFIG["rl"]["kwargs"].items() if k != "buffer_size"}}
    assert cli_main(["train", str(_config(tmp_path, rl=rl))]) == 2
    captured = capsys.readouterr()
    checkpoints = (tmp_path / "run" / "checkpoints").resolve()
    assert (
        "  replay buffer       1,000,000 transitions (rl.kwargs.buffer_size, the default): 5.26 GiB in memory, and as "
        f"much on disk in the newest checkpoint (logging.keep_replay_buffers), in {checkpoints}"
    ) in captured.out.splitlines(), captured.out
    assert _one_line(captured.err) == (
        "vlmrm-fast train: error: rl.kwargs.buffer_size: a replay buffer of 1,000,000 transitions needs 5.3 GiB of "
        "memory (5,648 bytes each: humanoid-kneeling's observations and actions), and 1.0 GiB are available; set "
        f"rl.kwargs.buffer_size to at most {2**30 // 5648:,}"
    )


def test_envs_beyond_memory_are_refused_before_building_for_gymnasium_tasks(humanoid_tiny_rm):
    from vlmrm_fast import FastVLMRewardVecEnv

    with pytest.raises(MemoryError) as info:  # before a list of a billion env factories is made
        FastVLMRewardVecEnv("cartpole", 10**9, reward_model=humanoid_tiny_rm)
    assert _one_line(str(info.value)).startswith("n_envs=1,000,000,000: the envs need at least 670,552.3 GiB of memory")
    assert "(703 KiB each: a recorded 400x600 RGB frame)" in str(info.value) and "use at most " in str(info.value)


@pytest.mark.warp
def test_mujoco_warp_envs_beyond_memory_are_refused_before_warp_allocates(humanoid_tiny_rm):
    from vlmrm_fast import FastVLMRewardVecEnv
    from vlmrm_fast.envs import get_task
    from vlmrm_fast.physics.warp import world_bytes

    with pytest.raises(MemoryError) as info:
        FastVLMRewardVecEnv("humanoid-kneeling", 10**8, reward_model=humanoid_tiny_rm, physics="warp")
    line = _one_line(str(info.value))
    assert line.startswith("n_envs=100,000,000: the envs need at least ") and "use at most " in line, line
    assert "each: MuJoCo Warp's data of one world and its 480x480 RGB frame)" in line, line
    model = get_task("humanoid-kneeling").vector_task.build_model(480)
    assert world_bytes(model) >= 4 * (model.nq + model.nv) * 2  # at least qpos and qvel, float32, twice over


def test_make_vec_refuses_as_the_vec_env_does_and_names_the_fix():
    import gymnasium

    from vlmrm_fast import FastVLMRewardVecEnv

    with pytest.raises(ValueError) as vec_env:
        FastVLMRewardVecEnv("cartpole", 2, model="vlmrm-tiny", device="cpu", physics="warp")
    with pytest.raises(ValueError) as make_vec:  # was a SyncVectorEnv of gymnasium's physics, silently
        gymnasium.make_vec("vlmrm_fast.envs:vlmrm_fast/cartpole", 2, model="vlmrm-tiny", device="cpu", physics="warp")
    assert (
        str(make_vec.value)
        == str(vec_env.value)
        == ("task 'cartpole' has no simulator-env version; use physics='gym' (or 'auto')")
    )
    for text in ("yes", "no"):  # bool("no") is True
        with pytest.raises(TypeError, match=rf"^torch_outputs: must be true or false, got '{text}'$"):
            gymnasium.make_vec("vlmrm_fast/humanoid-kneeling", 2, model="vlmrm-tiny", torch_outputs=text)
    with pytest.raises(TypeError) as sync:
        gymnasium.make_vec("vlmrm_fast/cartpole", 2, vectorization_mode="sync", model="vlmrm-tiny")
    assert str(sync.value).startswith(
        "model=: a reward model's argument, but gymnasium.make and make_vec(vectorization_mode='sync' or 'async') "
        "make the task's plain envs, without VLM rewards; for VLM rewards use gymnasium.make_vec('vlmrm_fast/cartpole'"
    ), str(sync.value)


def test_a_learners_actions_on_the_meta_device_are_named_and_bf16_ones_step(humanoid_tiny_rm):
    import gymnasium
    import torch

    env = gymnasium.make_vec("vlmrm_fast/humanoid-kneeling", 2, reward_model=humanoid_tiny_rm, render_size=32)
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"^actions are on the meta device, which holds no values .*; pass"):
            env.step(torch.zeros(2, 17, device="meta"))
        obs, rewards, *_ = env.step(torch.zeros(2, 17, dtype=torch.bfloat16))
        assert rewards.shape == (2,)
    finally:
        env.close()
    with pytest.raises(RuntimeError, match=r"^the env was closed \(close\(\) was called\): make a new one"):
        env.reset()


def test_a_closed_vec_env_says_it_was_closed(humanoid_tiny_rm):
    import numpy as np

    from vlmrm_fast import FastVLMRewardVecEnv

    env = FastVLMRewardVecEnv("humanoid-kneeling", 2, reward_model=humanoid_tiny_rm, render_size=32)
    env.reset()
    env.close()
    for call in (env.reset, lambda: env.step(np.zeros((2, 17), np.float32))):
        with pytest.raises(RuntimeError, match=r"^the env was closed \(close\(\) was called\): make a new one"):
            call()


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "data.npz", "--models", "vlmrm-tiny"],
        ["landscape", "cartpole", "--variable", "pole_angle", "--model", "vlmrm-tiny"],
        ["check-precision", "vlmrm-tiny"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_gpu_asked_for_where_there_is_none_is_one_line_before_any_work(argv, monkeypatch, capsys):
    import torch

    from vlmrm_fast.evaluation import check_precision

    monkeypatch.setattr(check_precision, "render_task_frames", lambda *a, **k: pytest.fail("rendered first"))
    assert cli_main([*argv, "--device", "cuda:7"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"vlmrm-fast {argv[0]}: error: --device cuda:7: "), line
    if not torch.cuda.is_available():
        assert "asks for a GPU, but " in line and line.endswith("; use --device cpu (or auto)"), line


def test_a_number_yaml_reads_as_text_is_named_with_the_number_to_write(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: {task: cartpole}\nrl: {total_timesteps: 1e12}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        "rl.total_timesteps: must be a positive integer, got '1e12' (YAML read it as text: its e-notation needs a dot "
        "and a signed exponent, 1.0e+12); write 1000000000000"
    )


def test_an_output_dir_that_is_a_file_is_named_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("a file")
    for output in ("taken", "taken/run"):
        assert cli_main(["train", str(_config(tmp_path, output_dir=str(tmp_path / output)))]) == 2
        assert _one_line(capsys.readouterr().err) == (
            f"vlmrm-fast train: error: output_dir: {tmp_path / 'taken'} is a file, not a folder"
            + ("" if output == "taken" else f" (in {tmp_path / output})")
            + "; choose a folder for the run (output_dir in the config, or --output-dir)"
        )


def test_best_and_rollout_name_what_is_missing(tmp_path, capsys):
    assert cli_main(["best", str(tmp_path / "nope")]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast best: error: run folder {tmp_path / 'nope'} does not exist; give a training run's folder "
        "(its output_dir)"
    )
    assert cli_main(["best", str(tmp_path)]) == 2
    assert "holds no checkpoints/ folder: give a training run's folder" in _one_line(capsys.readouterr().err)
    assert cli_main(["rollout", str(tmp_path / "nope" / "final_model.zip")]) == 2  # not the config it blamed
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast rollout: error: checkpoint {tmp_path / 'nope' / 'final_model.zip'} does not exist"
    )
    (tmp_path / "empty").mkdir()
    assert cli_main(["rollout", str(tmp_path / "empty")]) == 2  # not a look in the folder above
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast rollout: error: {tmp_path / 'empty'} is a folder; give a model zip: "
        "RUN_DIR/checkpoints/model_N_steps.zip or RUN_DIR/final_model.zip"
    )


def test_an_onnx_export_to_a_read_only_folder_is_one_line_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from vlmrm_fast.models import clip as models

    read_only = tmp_path / "read-only"
    read_only.mkdir()
    real_open = os.open

    def open_(path, *args, **kwargs):  # as on a read-only mount (root ignores permission bits)
        if pathlib.Path(path).parent == read_only:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(models, "load_clip", lambda *a, **k: pytest.fail("loaded the model first"))
    assert cli_main(["export", "vlmrm-tiny", "--onnx-only", str(read_only / "tower.onnx")]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast export: error: --onnx-only {read_only / 'tower.onnx'}: cannot write there (Read-only file "
        "system); choose a writable folder"
    )


@pytest.mark.parametrize("content", [b"hello, no arrays here", b"\x80\x04\x95"], ids=["text", "pickle"])
def test_a_dataset_that_is_no_npz_never_gets_unpickling_advice(tmp_path, content, capsys):
    path = tmp_path / "data.npz"
    path.write_bytes(content)
    assert cli_main(["evaluate", str(path), "--models", "vlmrm-tiny", "--device", "cpu"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (
        f"vlmrm-fast evaluate: error: {path} is not a vlmrm-fast dataset: not an .npz file (a zip of arrays); make one "
        "with `vlmrm-fast dataset sample`"
    )
    assert "pickle" not in line


def test_a_long_prompt_is_warned_of_in_a_line_a_terminal_shows():
    from vlmrm_fast import PromptTruncatedWarning, load_reward_model

    long = "a humanoid robot " + "very " * 2000 + "kneeling"
    with pytest.warns(PromptTruncatedWarning) as caught:
        load_reward_model("vlmrm-tiny", target_prompts=long, device="cpu")
    (warning,) = [w for w in caught if issubclass(w.category, PromptTruncatedWarning)]
    text = str(warning.message)
    assert len(text) < 300 and "(10,025 characters)" in text and "the last 1931 are dropped" in text, text


def test_a_resume_where_auto_would_choose_another_renderer_is_refused_in_a_line(tmp_path, monkeypatch, capsys):
    """renderer auto resolves by the machine (EGL on a GPU, Warp on a CPU): each checkpoint records what it chose,
    and a resume where it would choose otherwise is refused before anything loads, naming both and the value to
    pin; pinned, the run resumes. (A row of the renderer double stands for the other machine's choice.)"""
    from double_renderer import ROW as FLAT

    from vlmrm_fast import rendering
    from vlmrm_fast.training import checkpoints

    monkeypatch.setitem(rendering.AUTO_ORDER, "cpu", ("egl",))  # the machine the run starts on
    config = _config(tmp_path)
    assert cli_main(["train", str(config)]) == 0
    newest = checkpoints.scan(tmp_path / "run" / "checkpoints").newest()
    assert newest.manifest["plan"] == {"env.physics": "batch", "env.renderer": "egl"}
    capsys.readouterr()

    monkeypatch.setitem(rendering.RENDERERS, FLAT.name, FLAT)
    monkeypatch.setitem(rendering.AUTO_ORDER, "cpu", ("flat", "egl"))  # another machine: auto chooses otherwise
    assert cli_main(["train", str(config), "--resume", "--total-timesteps", "12"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "vlmrm-fast train: error: --resume: the run's renderer was 'egl' where it started, and env.renderer: auto "
        "chooses 'flat' here; to resume the run as it ran, set env.renderer: egl in the config (the frames or the "
        "dynamics would change otherwise), or start a new run (--output-dir, or --overwrite)"
    )
    assert checkpoints.scan(tmp_path / "run" / "checkpoints").newest().steps == 8  # nothing changed

    pinned = yaml.safe_load(config.read_text())
    pinned["env"]["renderer"] = "egl"
    config.write_text(yaml.safe_dump(pinned))
    assert cli_main(["train", str(config), "--resume", "--total-timesteps", "12"]) == 0
    assert checkpoints.scan(tmp_path / "run" / "checkpoints").newest().manifest["plan"]["env.renderer"] == "egl"


def test_a_resume_where_auto_would_choose_another_physics_names_the_physics_to_pin():
    from vlmrm_fast import RewardModelSpec
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.stack.plan import plan_stack
    from vlmrm_fast.training.run_folder import RunFolderError, check_resumed_choices

    plan = plan_stack(
        EnvSpec("humanoid-kneeling", 1, physics="gym", renderer=None), RewardModelSpec(model="vlmrm-tiny", device="cpu")
    )
    check_resumed_choices({"env.physics": "gym", "env.renderer": None}, plan)  # as the run ran: no word
    check_resumed_choices(None, plan)  # a checkpoint from before the choices were recorded: not compared
    with pytest.raises(RunFolderError) as refused:
        check_resumed_choices({"env.physics": "batch", "env.renderer": "egl"}, plan)
    assert str(refused.value) == (
        "--resume: the run's physics was 'batch' where it started, and env.physics: auto chooses 'gym' here; the run's "
        "renderer was 'egl' where it started, and env.renderer: auto chooses none (its gymnasium envs drew their "
        "frames) here; to resume the run as it ran, set env.physics: batch and env.renderer: egl in the config (the "
        "frames or the dynamics would change otherwise), or start a new run (--output-dir, or --overwrite)"
    )


# ------------------------------------------------------------------ the run folder, named as a user names it
def test_an_output_dir_under_the_home_folder_is_read_as_a_shell_reads_it(tmp_path, monkeypatch, capsys):
    """``output_dir: ~/runs/x`` (and ``--output-dir=~/runs/y``, which a shell leaves alone) is the home folder's
    runs/x, never a folder named ``~`` in the working directory."""
    home = tmp_path / "home"
    for name in ("x", "y"):
        (home / "runs" / name).mkdir(parents=True)
        (home / "runs" / name / "config.yaml").write_text("mine\n")  # in the way: the start is refused there
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert cli_main(["train", str(_config(tmp_path, output_dir="~/runs/x"))]) == 2
    assert f"{home / 'runs' / 'x'} holds config.yaml where the run writes" in _one_line(capsys.readouterr().err)
    assert cli_main(["train", str(_config(tmp_path)), "--output-dir=~/runs/y"]) == 2
    assert f"{home / 'runs' / 'y'} holds config.yaml where the run writes" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("output", ["~", "HOME", "/"])
def test_the_home_folder_or_the_filesystem_root_is_no_run_folder(tmp_path, monkeypatch, capsys, output):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)  # (a "~" taken literally would be a folder here)
    output = str(home) if output == "HOME" else output
    assert cli_main(["train", str(_config(tmp_path)), "--output-dir", output]) == 2
    what = "the filesystem's root" if output == "/" else f"your home folder itself ({home})"
    shown = "/" if output == "/" else home
    assert _one_line(capsys.readouterr().err) == (
        f"vlmrm-fast train: error: output_dir: {shown} is {what}, which holds much more than a run; give the run a "
        f"folder of its own (output_dir in the config, or --output-dir), e.g. {home / 'runs' / 'NAME'}"
    )
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]


def test_score_every_longer_than_the_episode_is_refused_naming_both(tmp_path, capsys):
    config = _config(tmp_path, reward={**CONFIG["reward"], "score_every": 12})
    assert cli_main(["train", str(config)]) == 2
    assert "score_every: 12 steps is longer than an episode's 10 steps (env.episode_length)" in _one_line(
        capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()


def test_a_folder_holding_only_someone_elses_checkpoints_is_named_as_such(tmp_path, capsys):
    """SB3's CheckpointCallback with the prefix "model" names its files as this program does: no manifest vouches
    for them, so they are no run of this program's; the line says what --overwrite would do with them (set them
    aside) instead of "deletes those 0 files"."""
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "model_100_steps.zip").write_bytes(b"someone's model")
    (folder / "model_replay_buffer_100_steps.pkl").write_bytes(b"someone's buffer")
    assert cli_main(["train", str(_config(tmp_path))]) == 2
    line = _one_line(capsys.readouterr().err)
    assert (
        f"{tmp_path / 'run'} holds checkpoints/model_100_steps.zip, checkpoints/model_replay_buffer_100_steps.pkl, "
        "named as this program names its checkpoints but vouched for by no manifest" in line
    ), line
    assert "deletes those 0 files" not in line and "moves them into" in line and "and deletes nothing" in line, line
    assert sorted(p.name for p in folder.iterdir()) == ["model_100_steps.zip", "model_replay_buffer_100_steps.pkl"]


def test_a_resume_of_gymnasium_envs_takes_their_batched_drawing_or_their_own_render_alike():
    """The batched drawing draws each env's render() picture exactly: a run of gymnasium envs that drew
    themselves resumes drawn by a renderer (and back) without a word; one that names null where auto
    chooses another renderer is told to pin null, not an empty value."""
    from vlmrm_fast import RewardModelSpec
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.stack.plan import plan_stack
    from vlmrm_fast.training.run_folder import RunFolderError, check_resumed_choices

    drawn = plan_stack(
        EnvSpec("humanoid-kneeling", 1, physics="gym"), RewardModelSpec(model="vlmrm-tiny", device="cpu")
    )
    assert drawn.path == "batched drawing"
    check_resumed_choices({"env.physics": "gym", "env.renderer": None}, drawn)
    batch = plan_stack(EnvSpec("humanoid-kneeling", 1), RewardModelSpec(model="vlmrm-tiny", device="cpu"))
    with pytest.raises(RunFolderError, match=r"set env.physics: gym and env.renderer: null in the config"):
        check_resumed_choices({"env.physics": "gym", "env.renderer": None}, batch)
