"""``vlmrm-fast best`` and ``vlmrm-fast rollout`` on a short quickstart run (tiny CLIP, CPU), and the
rollouts' returns and the paper's success against what they are made of."""

from __future__ import annotations

import copy
import csv
import pathlib

import imageio
import numpy as np
import pytest
import yaml
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv
from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.policy_rollouts import load_policy, roll_out, rollout_env, run_config
from vlmrm_fast.training.run_folder import RANKING_FILE

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),  # see conftest.py
    pytest.mark.slow,  # training runs, then rollouts of every checkpoint: left out of the quick subset (-m "not slow")
]

QUICKSTART = pathlib.Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
EPISODE_LENGTH = 10


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory) -> pathlib.Path:
    """configs/quickstart.yaml made short: 2 envs of 10 steps at 48 px, 60 steps, a checkpoint every 20."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("quickstart")
    cfg = copy.deepcopy(yaml.safe_load(QUICKSTART.read_text()))
    cfg["output_dir"] = str(folder / "run")
    cfg["reward"]["device"] = "cpu"
    cfg["env"].update(n_envs=2, episode_length=EPISODE_LENGTH, render_size=48)
    cfg["rl"].update(total_timesteps=60, device="cpu")
    cfg["rl"]["kwargs"].update(learning_starts=20, buffer_size=1000, batch_size=16, train_freq=10)
    cfg["logging"] = {"checkpoint_every": 20, "video_every": 0}
    path = folder / "quickstart.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["train", str(path)]) == 0
    torch.set_num_threads(threads)
    return folder / "run"


def test_best_ranks_every_checkpoint_by_its_rollouts_vlm_return(quickstart_run, capsys):
    assert cli_main(["best", str(quickstart_run), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    with open(quickstart_run / RANKING_FILE) as f:
        rows = list(csv.DictReader(f))
    saved = checkpoints.scan(quickstart_run / "checkpoints").complete
    assert sorted(row["checkpoint"] for row in rows) == sorted(c.model.name for c in saved)
    assert [row["rank"] for row in rows] == [str(i) for i in range(1, len(rows) + 1)]
    means = [float(row["mean_vlm_return"]) for row in rows]
    assert means == sorted(means, reverse=True)
    assert f"best: {quickstart_run / 'checkpoints' / rows[0]['checkpoint']}" in out
    # Each row is that checkpoint's own rollout: the same seeds, played again here.
    cfg = run_config(quickstart_run)
    venv = rollout_env(cfg, 2, device="cpu")
    try:
        for row in rows:
            rollout = roll_out(load_policy(cfg, quickstart_run / "checkpoints" / row["checkpoint"]), venv)
            assert rollout.mean_vlm_return == float(row["mean_vlm_return"])
            assert rollout.mean_gt_return == float(row["mean_gt_return"])
            assert row["success_rate"] == "", "the humanoid poses define no success"
    finally:
        venv.close()


def test_rollout_reports_returns_and_films_the_first_episodes(quickstart_run, tmp_path, capsys):
    checkpoint = quickstart_run / "checkpoints" / "model_40_steps.zip"
    args = ["rollout", str(checkpoint), "--episodes", "3", "--film", "2", "--out", str(tmp_path)]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "3 episodes of humanoid-kneeling: VLM return" in out and "ground-truth return" in out
    with open(tmp_path / "model_40_steps.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and all(int(row["length"]) == EPISODE_LENGTH for row in rows)
    video = imageio.mimread(tmp_path / "model_40_steps.mp4", memtest=False)
    assert len(video) == 2 * EPISODE_LENGTH and video[0].shape == (48, 48, 3)


def test_rollout_returns_are_the_reward_models_and_the_envs(quickstart_run):
    """The VLM return of a filmed episode is the reward model's score of its frames, summed; the
    ground-truth return is the env's own reward (info['gt_reward']) summed."""
    cfg = run_config(quickstart_run)
    policy = load_policy(cfg, quickstart_run / "final_model.zip")
    venv = rollout_env(cfg, 2, device="cpu")
    try:
        rollout = roll_out(policy, venv, film=2)
        assert [len(frames) for frames in rollout.frames] == [EPISODE_LENGTH] * 2
        for episode, frames in zip(rollout.episodes, rollout.frames):
            per_step = venv.reward_model(frames).numpy()
            assert_rewards_close(episode.vlm_return / EPISODE_LENGTH, per_step.astype(np.float64).mean())
        venv.seed(10_000)
        obs, gt = venv.reset(), np.zeros(2)
        for _ in range(EPISODE_LENGTH):
            obs, _, _, infos = venv.step(policy.predict(obs, deterministic=True)[0])
            gt += [info["gt_reward"] for info in infos]
        np.testing.assert_array_equal([e.gt_return for e in rollout.episodes], gt)
    finally:
        venv.close()


class _Policy:
    """A hand-written policy with SB3's predict()."""

    def __init__(self, act):
        self.act = act

    def predict(self, obs, deterministic=True):
        return np.stack([self.act(o) for o in obs]), None


@pytest.mark.parametrize(
    "task, act, success",
    [
        ("cartpole", lambda o: int(o[2] + 0.5 * o[3] > 0), 1.0),  # balances: upright on every step
        ("cartpole", lambda o: 1, 0.0),  # pushes one way: the pole falls
        ("mountain-car", lambda o: np.array([1.0 if o[1] >= 0 else -1.0], np.float32), 1.0),  # pumps to the flag
        ("mountain-car", lambda o: np.zeros(1, np.float32), 0.0),  # waits in the valley
    ],
)
def test_rollouts_report_the_papers_success(task, act, success):
    venv = FastVLMRewardVecEnv(task, 2, model="vlmrm-tiny", device="cpu", episode_length=200)
    try:
        rollout = roll_out(_Policy(act), venv)
    finally:
        venv.close()
    assert rollout.success_rate == success
    assert all(e.length == 200 for e in rollout.episodes)


def test_a_gpu_precision_is_refused_on_the_cpu_naming_the_fix(quickstart_run, tmp_path, capsys):
    """A run of configs/paper scores in fp16 (the paper's autocast), which the CPU cannot: rollout and
    best say so and name --precision, which then lets them run there."""
    cfg = yaml.safe_load((quickstart_run / "config.yaml").read_text())
    cfg["reward"]["precision"] = "fp16"
    config = tmp_path / "fp16.yaml"
    config.write_text(yaml.safe_dump(cfg))
    checkpoint = quickstart_run / "final_model.zip"
    rollout = ["rollout", str(checkpoint), "--episodes", "1", "--film", "0", "--out", str(tmp_path)]
    assert cli_main([*rollout, "--config", str(config)]) == 2
    assert "scored its frames in fp16, which the CPU does not run; pass --precision fp32" in capsys.readouterr().err
    assert cli_main(["best", str(quickstart_run), "--episodes", "1", "--config", str(config)]) == 2
    assert "pass --precision fp32" in capsys.readouterr().err
    assert cli_main([*rollout, "--config", str(config), "--precision", "fp32"]) == 0
    assert "1 episodes of humanoid-kneeling" in capsys.readouterr().out
    assert cli_main([*rollout, "--precision", "fp12"]) == 2
    assert "--precision must be one of auto, fp32, fp16, bf16, fp8, got 'fp12'" in capsys.readouterr().err


def test_best_and_rollout_refuse_what_they_cannot_use(tmp_path, capsys):
    assert cli_main(["best", str(tmp_path), "--episodes", "2"]) == 2
    assert "holds no checkpoints/ folder" in capsys.readouterr().err
    (tmp_path / "checkpoints").mkdir()
    assert cli_main(["best", str(tmp_path), "--episodes", "2"]) == 2
    assert "holds no complete checkpoint" in capsys.readouterr().err
    assert cli_main(["rollout", str(tmp_path / "checkpoints" / "model_5_steps.zip")]) == 2
    assert "model_5_steps.zip does not exist" in capsys.readouterr().err


def test_a_damaged_checkpoint_is_named_by_rollout_and_skipped_by_best(quickstart_run, tmp_path, capsys):
    """One checkpoint of three damaged (bits flipped, the size kept): rollout says it is damaged and where to
    look instead; best ranks the others and says which it skipped."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(quickstart_run, run)
    damaged = run / "checkpoints" / "model_40_steps.zip"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = bytes(16)
    damaged.write_bytes(bytes(data))
    assert cli_main(["rollout", str(damaged), "--episodes", "1", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"vlmrm-fast rollout: error: {damaged} is damaged (its sha256 differs from its manifest's, "
        "model_40_steps.json); roll out another checkpoint (vlmrm-fast best RUN_DIR ranks the whole ones)"
    )
    assert cli_main(["best", str(run), "--episodes", "1"]) == 0
    captured = capsys.readouterr()
    assert "skipped model_40_steps.zip (40 steps): model_40_steps.zip: its sha256 differs" in captured.out
    assert "not ranked (damaged, see above): model_40_steps.zip" in captured.out
    with open(run / RANKING_FILE) as f:
        ranked = [row["checkpoint"] for row in csv.DictReader(f)]
    assert sorted(ranked) == ["model_20_steps.zip", "model_60_steps.zip"]
