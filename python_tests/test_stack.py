"""The SB3 shape: a simulating VecEnv under one reward VecEnvWrapper; a RewardModelSpec passed whole."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper, VecMonitor

from vlmrm_fast import (
    FastVLMRewardVecEnv,
    FramePreprocessor,
    GoalBaselineCriterion,
    PreprocessSpec,
    RewardModel,
    RewardModelSpec,
    load_reward_model,
)
from vlmrm_fast.envs import get_task
from vlmrm_fast.frames.views import SteppedFrameSource
from vlmrm_fast.reward.frame_model import FrameRewardModel
from vlmrm_fast.stack.simulator_env import SimulatorVecEnv
from vlmrm_fast.stack.wrappers import VLMRewardVecEnvWrapper, find_reward_wrapper

HUMANOID = "humanoid-kneeling"
SMALL = {"render_size": 32, "episode_length": 6}


@pytest.fixture(scope="module")
def spec() -> RewardModelSpec:
    task = get_task(HUMANOID)
    return RewardModelSpec(
        model="vlmrm-tiny",
        target_prompts=task.target_prompts,
        baseline_prompts=task.baseline_prompts,
        alpha=0.5,
        device="cpu",
    )


def test_the_stack(spec):
    humanoid = FastVLMRewardVecEnv(HUMANOID, 2, reward_spec=spec, **SMALL)
    cartpole = FastVLMRewardVecEnv("cartpole", 2, model="vlmrm-tiny", device="cpu")
    assert isinstance(humanoid, VLMRewardVecEnvWrapper) and isinstance(humanoid, VecEnvWrapper)
    assert isinstance(humanoid.venv, SimulatorVecEnv) and isinstance(humanoid.venv, SteppedFrameSource)
    assert isinstance(cartpole.venv, DummyVecEnv) and not isinstance(cartpole.venv, SteppedFrameSource)
    assert find_reward_wrapper(VecMonitor(humanoid)) is humanoid
    assert humanoid.get_attr("episode_length") == [6, 6]  # SB3's forwarding to the envs
    for env in (humanoid, cartpole):
        env.close()


def test_simulator_env_alone_is_a_plain_vec_env_with_the_task_reward(spec):
    """Under the wrapper, gt_reward is exactly what the bare batch VecEnv returns as its reward."""
    task = get_task(HUMANOID)
    bare = SimulatorVecEnv(task.vector_task, 2, render_size=(32, 32), episode_length=6)
    wrapped = VLMRewardVecEnvWrapper(
        SimulatorVecEnv(task.vector_task, 2, render_size=(32, 32), episode_length=6),
        load_reward_model(spec),
        pipeline_chunks=2,
    )
    for env in (bare, wrapped):
        env.seed(3)
    np.testing.assert_array_equal(bare.reset(), wrapped.reset())
    rng = np.random.default_rng(0)
    for _ in range(8):
        actions = rng.uniform(-0.4, 0.4, (2, 17)).astype(np.float32)
        obs_b, rew_b, done_b, _ = bare.step(actions)
        obs_w, _, done_w, infos = wrapped.step(actions)
        np.testing.assert_array_equal(obs_b, obs_w)
        np.testing.assert_array_equal(done_b, done_w)
        np.testing.assert_array_equal(rew_b, [info["gt_reward"] for info in infos])
    assert bare.last_frames().shape == (2, 32, 32, 3)
    for env in (bare, wrapped):
        env.close()


def test_spec_passed_whole_equals_its_fields(spec):
    frames = np.random.default_rng(1).integers(0, 255, (3, 40, 40, 3), dtype=np.uint8)
    whole = load_reward_model(spec)
    fields = load_reward_model(
        "vlmrm-tiny",
        target_prompts=spec.target_prompts,
        baseline_prompts=spec.baseline_prompts,
        alpha=0.5,
        device="cpu",
    )
    assert torch.equal(whole(frames), fields(frames))


def test_spec_refusals(spec):
    with pytest.raises(ValueError, match="not both"):
        RewardModelSpec(model="vlmrm-tiny", target_prompts="a", criteria=[{"target_prompts": "b"}])
    with pytest.raises(ValueError, match="batch_size: must be a positive integer"):
        RewardModelSpec(model="vlmrm-tiny", target_prompts="a", batch_size=True)
    with pytest.raises(ValueError, match="model: must be a model name"):
        RewardModelSpec(model="", target_prompts="a")
    with pytest.raises(ValueError, match="alone"):
        load_reward_model(spec, device="cpu")
    with pytest.raises(ValueError, match="already loaded"):
        FastVLMRewardVecEnv(HUMANOID, 1, reward_model=load_reward_model(spec), alpha=0.1, **SMALL)
    with pytest.raises(ValueError, match="alone, or its fields"):
        FastVLMRewardVecEnv(HUMANOID, 1, reward_spec=spec, alpha=0.1, **SMALL)
    assert spec.replace(alpha=0.2).alpha == 0.2 and spec.alpha == 0.5  # frozen: replace gives a new spec
    with pytest.raises(AttributeError):
        spec.alpha = 0.3


class MeanBrightness(FrameRewardModel):
    """A reward model of one's own, written against the RewardModel protocol with the half every frame model
    shares (``reward.frame_model.FrameRewardModel``: its needs, its per-step scorer): the mean brightness of a
    frame squashed to 16 x 16, in [0, 1], in the two halves a step uses."""

    name = "mean-brightness"
    random_init = False
    criterion_kinds = ()
    device = torch.device("cpu")
    criteria = (GoalBaselineCriterion("a bright frame", name="brightness"),)
    multi_criteria = False
    chunk_size = 64

    def __init__(self):
        spec = PreprocessSpec(size=16, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resize_mode="squash")
        self.preprocessor = FramePreprocessor(spec, self.device)

    def parameter_count(self):
        return 0

    def pixel_buffer(self, num_frames):
        return torch.empty((num_frames, 3, 16, 16))

    def preprocess(self, view, out=None, timer=None):
        return self.preprocessor.run(view, out)

    def score_pixels(self, pixels, out=None, timer=None):
        rewards = pixels.mean(dim=(1, 2, 3))
        return rewards if out is None else out.copy_(rewards)

    def _frame_rewards(self, frames, criteria, progress):
        assert criteria is None, "it scores its own criterion alone"
        return self.score_pixels(self.preprocessor(frames))[:, None]

    def __call__(self, frames):
        return self.score_pixels(self.preprocessor(frames))


@pytest.mark.parametrize("task", [HUMANOID, "cartpole"])
def test_a_reward_model_of_ones_own_through_the_protocol(task):
    model = MeanBrightness()
    assert isinstance(model, RewardModel)
    env = FastVLMRewardVecEnv(task, 3, reward_model=model, seed=0, **(SMALL if task == HUMANOID else {}))
    try:
        env.reset()
        for _ in range(2):
            _, rewards, _, _ = env.step(np.stack([env.action_space.sample() for _ in range(3)]))
            assert rewards.dtype == np.float32 and np.all((0 < rewards) & (rewards < 1))
            np.testing.assert_array_equal(rewards, model(env.last_frames()).numpy())
        assert env.reward_criteria == ("brightness",)
    finally:
        env.close()
