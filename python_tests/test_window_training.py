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


class _Policy:
    """What PolicyVideo asks of an SB3 model: a deterministic action, no normalisation, a logger."""

    def __init__(self):
        self.logger = _Logger()
        self.num_timesteps = 1

    def predict(self, obs, deterministic=False):
        return 0, None

    def get_vec_normalize_env(self):
        return None


class _Logger:
    def __init__(self):
        self.values: dict = {}

    def record(self, key, value, exclude=None):
        self.values[key] = value


def test_a_run_video_scores_its_episode_with_a_window_model(tmp_path):
    """A run's video of the policy logs the episode's VLM return as the window model scores the whole episode:
    its windows of 2 frames, each reward on a window's last frame (the first frame ends none)."""
    import gymnasium
    import numpy as np
    from tolerances import assert_rewards_close

    from vlmrm_fast import load_reward_model
    from vlmrm_fast.envs import get_task
    from vlmrm_fast.training.callbacks import PolicyVideo

    task = get_task("cartpole")
    model = load_reward_model(
        "vlmrm-tiny",
        window={"frames": 2, "embedding": "mean_of_frames"},
        device="cpu",
        target_prompts=task.target_prompts,
    )
    make = lambda: gymnasium.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=5)  # noqa: E731
    video = PolicyVideo(make, model, tmp_path, every=1)
    video.init_callback(_Policy())
    assert video.record().is_file()
    frames = video.model.logger.values["video/policy_gif"].frames
    assert len(frames) == 5
    windows = np.stack([frames[end - 1 : end + 1] for end in range(1, 5)])
    assert_rewards_close(video.model.logger.values["video/ep_vlm_reward"], float(model(windows).sum()))
