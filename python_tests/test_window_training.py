"""PPO and SAC train on the humanoid with each windowed reward of configs/ (the tiny models, a CPU)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from vlmrm_fast.training.config import load_config
from vlmrm_fast.training.train import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


def shortened(name: str, output_dir: pathlib.Path) -> dict:
    """The config, as shipped but for a few dozen steps of 2 small envs, no videos or checkpoints."""
    data = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    data["output_dir"] = str(output_dir)
    data["env"].update(n_envs=2, render_size=64, episode_length=16)
    data["reward"]["device"] = data["rl"]["device"] = "cpu"
    data["rl"]["total_timesteps"] = 64
    if data["rl"]["algorithm"] == "SAC":
        data["rl"]["kwargs"].update(learning_starts=32, buffer_size=64, batch_size=16)
    else:
        data["rl"]["kwargs"].update(n_steps=32, batch_size=16, n_epochs=1)
    data["logging"] = {"checkpoint_every": 1000, "video_every": 0}
    return data


@pytest.mark.parametrize(
    "name, algorithm",
    [
        ("windows-viclip", "PPO"),
        pytest.param("windows-mean-of-frames", "SAC", marks=pytest.mark.slow),
        pytest.param("windows-xclip", "SAC", marks=pytest.mark.slow),
        pytest.param("windows-episode-end", "PPO", marks=pytest.mark.slow),
    ],
)
def test_windowed_config_trains(tmp_path, name, algorithm):
    cfg = load_config(shortened(name, tmp_path / "run"))
    assert cfg.rl.algorithm == algorithm and cfg.reward.window is not None
    assert train(cfg) == 0
    assert (tmp_path / "run" / "final_model.zip").is_file()
