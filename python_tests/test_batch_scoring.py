"""Episode-batch scoring: frames of many steps scored in batches of a size of their own, larger or
smaller than num_envs, give exactly the per-step rewards; the default batch sizes; the training
path (SAC's replay buffer gets the rewards of the frames its transitions reached)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from tolerances import assert_rewards_close

from vlmrm_fast import load_reward_model
from vlmrm_fast.envs import get_task
from vlmrm_fast.reward import batch_scoring
from vlmrm_fast.reward.batch_scoring import FrameBatchScorer, even_batch, fill_batch_size, tower_gflops, tower_shape
from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv
from vlmrm_fast.stack.wrappers import find_reward_wrapper
from vlmrm_fast.training.callbacks import EpisodeBatchRewards, EpisodeStats
from vlmrm_fast.training.config import ConfigError, load_config

NUM_ENVS, STEPS = 3, 7


@pytest.fixture(scope="module")
def rm(humanoid_tiny_rm):
    return humanoid_tiny_rm  # backend "auto": eager torch on the CPU


@pytest.fixture(scope="module")
def stepped(rm):
    """Per-step rewards of STEPS steps of NUM_ENVS envs, and the frames each step reached."""
    env = FastVLMRewardVecEnv("humanoid-kneeling", NUM_ENVS, reward_model=rm, render_size=64, episode_length=4, seed=3)
    env.reset()
    rng = np.random.default_rng(0)
    rewards, frames = [], []
    for _ in range(STEPS):
        _, r, _, _ = env.step(rng.uniform(-0.4, 0.4, size=(NUM_ENVS,) + env.action_space.shape).astype(np.float32))
        rewards.append(r)
        frames.append(env.last_frames().clone())
    env.close()
    return np.stack(rewards), frames


@pytest.mark.parametrize("batch_size", [1, 2, NUM_ENVS, 5, 64])  # smaller than, equal to, larger than num_envs
def test_batches_of_any_size_give_the_per_step_rewards(rm, stepped, batch_size):
    per_step, frames = stepped
    scorer = FrameBatchScorer(rm, batch_size)
    for step_frames in frames:
        scorer.add(step_frames)
    assert scorer.batches_scored == (STEPS * NUM_ENVS) // batch_size  # full batches scored while adding
    assert scorer.pending == (STEPS * NUM_ENVS) % batch_size
    rewards = scorer.finish()
    assert rewards.shape == (STEPS * NUM_ENVS,) and scorer.pending == 0
    assert_rewards_close(rewards.reshape(STEPS, NUM_ENVS), per_step)
    assert scorer.finish().shape == (0,)  # nothing left


@pytest.mark.slow  # torch.compile
def test_compiled_encoder_batches_match_too(stepped):
    """A fixed-batch (compiled) encoder: partial batches are padded and their padding ignored."""
    per_step, frames = stepped
    spec = get_task("humanoid-kneeling")
    compiled = load_reward_model(
        "vlmrm-tiny",
        target_prompts=spec.target_prompts,
        baseline_prompts=spec.baseline_prompts,
        alpha=0.5,
        device="cpu",
        backend="compile",
        batch_size=4,
        progress=False,
    )
    scorer = FrameBatchScorer(compiled, compiled.chunk_size)
    for step_frames in frames:
        scorer.add(step_frames)
    np.testing.assert_allclose(scorer.finish().reshape(STEPS, NUM_ENVS), per_step, rtol=1e-4, atol=1e-5)


def test_scorer_checks_its_input(rm):
    with pytest.raises(ValueError, match="positive integer"):
        FrameBatchScorer(rm, 0)
    scorer = FrameBatchScorer(rm, 4)
    with pytest.raises(ValueError, match="uint8"):
        scorer.add(torch.zeros(2, 8, 8, 3))
    scorer.add(torch.zeros(2, 8, 8, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="after frames of shape"):
        scorer.add(torch.zeros(2, 9, 8, 3, dtype=torch.uint8))


def test_default_batch_sizes(monkeypatch):
    assert fill_batch_size("ViT-L-14", "cpu") == batch_scoring.CPU_BATCH
    shapes = {m: tower_shape(m) for m in ("ViT-B-32", "ViT-L-14", "ViT-bigG-14/laion2b_s39b_b160k")}
    assert shapes["ViT-L-14"] == {"width": 1024, "layers": 24, "mlp": 4096, "tokens": 257, "image_size": 224}
    # within 1 % of open_clip's published profile (image GMACs x 2), which also counts the patch embedding
    for model, published in (("ViT-B-32", 8.8), ("ViT-L-14", 162.0), ("ViT-bigG-14/laion2b_s39b_b160k", 968.0)):
        assert tower_gflops(shapes[model]) == pytest.approx(published, rel=0.03)
    assert tower_shape("hf-hub:someone/something") is None
    # On an (imagined) 80 GB GPU: compute fills first.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 << 30, 80 << 30))
    cuda = torch.device("cuda", 0)
    assert [fill_batch_size(m, cuda) for m in shapes] == [4096, 256, 64]
    # With little free memory, memory bounds it.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 30, 80 << 30))
    assert fill_batch_size("ViT-L-14", cuda) < 256
    assert even_batch(6400, 4096) == 3200 and even_batch(100, 256) == 100 and even_batch(1000, 256) == 250


class _RecordFrames(BaseCallback):
    """Keeps each step's frames and replay-buffer position (runs before EpisodeBatchRewards stores nothing)."""

    def __init__(self):
        super().__init__()
        self.steps: list[tuple[int, torch.Tensor]] = []

    def _on_step(self) -> bool:
        self.steps.append((self.model.replay_buffer.pos, find_reward_wrapper(self.training_env).last_frames().clone()))
        return True


@pytest.mark.parametrize("batch_size", [2, 7])
def test_sac_replay_buffer_gets_the_rewards_of_its_frames(rm, batch_size):
    env = FastVLMRewardVecEnv(
        "humanoid-kneeling", NUM_ENVS, reward_model=rm, render_size=64, episode_length=5, seed=1, defer_rewards=True
    )
    model = SAC("MlpPolicy", env, learning_starts=1000, train_freq=4, buffer_size=500, seed=0, device="cpu")
    record = _RecordFrames()
    scoring = EpisodeBatchRewards(EpisodeStats(NUM_ENVS), FrameBatchScorer(rm, batch_size))
    model.learn(9 * NUM_ENVS, callback=CallbackList([record, scoring]))
    stored = model.replay_buffer.rewards
    for position, frames in record.steps:
        assert_rewards_close(stored[position], rm(frames).numpy())
    assert len(record.steps) >= 9 and np.all(stored[: len(record.steps)] != 0)  # whole rollouts of 4 steps
    env.close()


def test_config_score_batch_size():
    base = {
        "reward": {"model": "vlmrm-tiny", "device": "cpu"},
        "rl": {"algorithm": "SAC", "kwargs": {"train_freq": [20, "step"]}, "episode_batch": True},
        "env": {"task": "humanoid-kneeling", "n_envs": 4, "render_size": 64},
    }
    from vlmrm_fast.training.train import plan_run

    plan = plan_run(load_config(copy.deepcopy(base)))
    assert plan.encoder_batch == 80 and plan.defer_rewards  # one rollout of 20 steps x 4 envs, on the CPU
    assert "encoder batch 80, rewards left to episode batches" in plan.describe()
    given = copy.deepcopy(base)
    given["reward"]["batch_size"] = 37
    assert plan_run(load_config(given)).encoder_batch == 37
    wrong = copy.deepcopy(base)
    wrong["reward"].update(batch_size=0)
    with pytest.raises(ConfigError, match="reward.batch_size: must be a positive integer or null, got 0"):
        load_config(wrong)
    moved = copy.deepcopy(base)
    moved["reward"].update(score_batch_size=8)
    with pytest.raises(ConfigError, match="reward.score_batch_size: moved; write reward.batch_size"):
        load_config(moved)


@pytest.mark.gpu
@pytest.mark.egl
def test_cuda_frames_wait_on_the_gpu_and_give_the_per_step_rewards():
    spec = get_task("humanoid-kneeling")
    gpu_rm = load_reward_model(
        "vlmrm-tiny",
        target_prompts=spec.target_prompts,
        baseline_prompts=spec.baseline_prompts,
        alpha=0.5,
        device="cuda",
        backend="torch",
        precision="bf16",
    )
    env = FastVLMRewardVecEnv(
        "humanoid-kneeling", NUM_ENVS, reward_model=gpu_rm, render_size=64, episode_length=4, seed=3
    )
    env.reset()
    scorer = FrameBatchScorer(gpu_rm, 5)
    rng = np.random.default_rng(0)
    per_step = []
    for _ in range(STEPS):
        _, r, _, _ = env.step(rng.uniform(-0.4, 0.4, size=(NUM_ENVS,) + env.action_space.shape).astype(np.float32))
        per_step.append(r)
        scorer.add(env.last_frames())
    assert scorer._staging.device.type == "cuda"
    np.testing.assert_allclose(scorer.finish().reshape(STEPS, NUM_ENVS), np.stack(per_step), rtol=0, atol=2e-3)
    env.close()
