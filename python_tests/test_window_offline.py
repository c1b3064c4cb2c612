"""Window models offline: the paper code's window_size / window_step windows inside an episode, in frames
scored in memory (``score_frames``) and in `vlmrm-fast evaluate` on a dataset of whole episodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tolerances import assert_rewards_close

from vlmrm_fast import load_reward_model
from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.envs import get_task
from vlmrm_fast.evaluation.dataset import StateDataset
from vlmrm_fast.evaluation.epic import state_epic_distance
from vlmrm_fast.evaluation.evaluate import evaluate_models
from vlmrm_fast.evaluation.scoring import alpha_criteria

TASK = "cartpole"

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


def prompts() -> dict:
    spec = get_task(TASK)
    return {"target_prompts": spec.target_prompts, "baseline_prompts": spec.baseline_prompts}


@pytest.fixture(scope="module")
def viclip():
    return load_reward_model("viclip-tiny", window={"frames": 8}, device="cpu", alpha=0.5, **prompts())


def test_frames_in_memory_score_the_paper_windows(viclip):
    """Windows of 4 frames starting every 3 frames of each episode, the reward on each one's last frame and NaN
    on the others (an episode shorter than a window: NaN throughout), each window as the model scores it alone."""
    rng = np.random.default_rng(0)
    lengths = (11, 3, 7)
    frames = rng.integers(0, 256, (sum(lengths), 40, 48, 3), dtype=np.uint8)
    episodes = np.split(np.arange(sum(lengths)), np.cumsum(lengths)[:-1])
    rewards = viclip.score_frames(frames, episodes, window_size=4, window_step=3).numpy()
    assert rewards.shape == (sum(lengths), 1)
    ends = [3, 6, 9] + [14 + 3, 14 + 6]
    assert np.flatnonzero(~np.isnan(rewards[:, 0])).tolist() == ends
    for end in ends:
        assert_rewards_close(rewards[end, 0], viclip(frames[None, end - 3 : end + 1]).numpy()[0])


def episode_dataset(lengths=(9, 12), seed: int = 0) -> StateDataset:
    """A dataset of whole episodes (random frames), every state labelled."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    return StateDataset(
        TASK,
        rng.normal(size=(n, 4)),
        rng.integers(0, 256, (n, 32, 48, 3), dtype=np.uint8),
        ("cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"),
        labels=rng.random(n),
        episodes=np.repeat(np.arange(len(lengths)), lengths),
    )


def test_evaluate_scores_windows_of_each_episode(viclip):
    """EPIC over the labelled states that end a window, each the window of its episode's frames."""
    ds = episode_dataset()
    result = evaluate_models(ds, [viclip], alphas=(0.0, 0.5), window_size=4, window_step=2)
    rewards = result.models[0].rewards
    ends = [3, 5, 7] + [9 + e for e in (3, 5, 7, 9, 11)]
    assert np.flatnonzero(~np.isnan(rewards[:, 0])).tolist() == ends
    tasks = alpha_criteria(prompts()["target_prompts"], prompts()["baseline_prompts"], (0.0, 0.5))
    windows = [np.arange(e - 3, e + 1)[viclip.reads(4)] for e in ends]  # each window's 8 frames, read in order
    pixels = torch.stack([viclip.preprocessor(ds.frames[w]) for w in windows])
    expected = viclip.head_for(tasks)(viclip.video.encode_video(pixels)).numpy()
    assert_rewards_close(rewards[ends], expected)
    labels = np.where(np.isin(np.arange(len(ds)), ends), ds.labels, np.nan)
    np.testing.assert_allclose(result.models[0].epic, state_epic_distance(rewards, labels))
    assert result.models[0].model == "viclip-tiny (window 4)"


def test_window_models_need_a_dataset_of_episodes(viclip):
    ds = episode_dataset()
    ds.episodes = None
    with pytest.raises(ValueError, match=r"holds states drawn at random, not whole episodes: sample one with"):
        evaluate_models(ds, [viclip], alphas=(0.0,))


def test_cli_samples_episodes_and_evaluates_windows(tmp_path, capsys):
    data = tmp_path / "episodes.npz"
    assert cli_main(["dataset", "sample", TASK, "--episodes", "1", "--size", "32", "48", "-o", str(data)]) == 0
    ds = StateDataset.load(data)
    assert ds.episodes is not None and (ds.episodes == 0).all() and len(ds) == get_task(TASK).episode_length
    ds.with_labels(np.linspace(0, 1, len(ds))).save(data)
    out = tmp_path / "eval"
    args = ["evaluate", str(data), "--models", "viclip-tiny", "vlmrm-tiny", "--window-size", "8", "--device", "cpu"]
    assert cli_main([*args, "--window-step", "4", "--alphas", "0", "1", "-o", str(out)]) == 0
    assert (out / "epic.csv").is_file()
    text = (out / "epic.csv").read_text()
    assert "viclip-tiny (window 8)" in text and "vlmrm-tiny (window 8)" in text
