"""The scoring schedule (score_every, between_scores) against a plain loop over each env, in the SB3
stack (simulator env and gymnasium envs), gymnasium's vector API and a fixed-batch encoder."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model
from vlmrm_fast.checks import FieldError
from vlmrm_fast.encoders.base import ImageEncoder
from vlmrm_fast.envs import get_task
from vlmrm_fast.reward.schedule import ScheduleClock, ScoreSchedule
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.stack.wrappers import RecordFrame, VLMRewardVecEnvWrapper
from vlmrm_fast.training.config import ConfigError, load_config

HUMANOID = "humanoid-kneeling"
SMALL = {"render_size": 48, "episode_length": 5, "renderer": "egl"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


def scheduled(scores: np.ndarray, dones: np.ndarray, every: int, between: str, resetting=None) -> np.ndarray:
    """The schedule written plainly, one env at a time: ``scores`` and ``dones`` (steps, envs)."""
    out = np.zeros_like(scores)
    for env in range(scores.shape[1]):
        step, held = 0, 0.0
        for t in range(scores.shape[0]):
            if resetting is not None and resetting[t, env]:
                out[t, env] = held if between == "hold" else 0.0  # not an episode step: not scored, not counted
                continue
            step += 1
            if step % every == 0 or dones[t, env]:
                out[t, env] = held = scores[t, env]
            else:
                out[t, env] = held if between == "hold" else 0.0
            if dones[t, env]:
                step, held = 0, 0.0
    return out


@pytest.mark.parametrize("between", ["zero", "hold"])
def test_clock_follows_each_envs_own_episode(between):
    rng = np.random.default_rng(0)
    steps, envs, every = 40, 5, 3
    scores = rng.normal(size=(steps, envs)).astype(np.float32)
    dones = rng.random((steps, envs)) < 0.15  # episodes of every length, ending at different steps
    resetting = np.zeros_like(dones)
    resetting[1:] = dones[:-1]  # next-step autoreset: the step after an end only resets the env
    for reset_steps in (None, resetting):
        clock = ScheduleClock(ScoreSchedule(every, between), envs)
        rewards = []
        for t in range(steps):
            plan = clock.plan(resetting=None if reset_steps is None else reset_steps[t], last=dones[t])
            rewards.append(clock.rewards(plan, scores[t].copy()))
            clock.end_step(plan, dones[t] & plan.stepping)
        expected = scheduled(scores, dones, every, between, reset_steps)
        np.testing.assert_array_equal(np.stack(rewards), expected)


def test_clock_scores_the_time_limits_last_step():
    """Before the envs report their ends (the simulator env), the last step is the time limit's."""
    clock = ScheduleClock(ScoreSchedule(3), 2, episode_length=5)
    due = []
    for _ in range(10):
        plan = clock.plan()
        due.append(plan.due.tolist())
        clock.end_step(plan, plan.last)
    assert [d[0] for d in due] == [False, False, True, False, True] * 2
    assert all(d[0] == d[1] for d in due)


@pytest.fixture(scope="module")
def prompts():
    spec = get_task(HUMANOID)
    return {"target_prompts": spec.target_prompts, "baseline_prompts": spec.baseline_prompts, "alpha": 0.5}


def test_simulator_env_scores_every_nth_step(prompts):
    """The humanoid simulator env with score_every=2: the due steps get the every-step env's rewards
    (the same model and states), the others zero or the held score; only the due frames are encoded."""
    common = dict(model="vlmrm-tiny", device="cpu", seed=0, **prompts, **SMALL)
    every = FastVLMRewardVecEnv(HUMANOID, 3, **common)
    sparse = {
        between: FastVLMRewardVecEnv(HUMANOID, 3, score_every=2, between_scores=between, **common)
        for between in ("zero", "hold")
    }
    encoded = []
    score_pixels = sparse["zero"].reward_model.score_pixels
    sparse["zero"].reward_model.score_pixels = lambda pixels, **kw: (
        encoded.append(len(pixels)) or score_pixels(pixels, **kw)
    )
    for env in (every, *sparse.values()):
        env.seed(3)
        env.reset()
    rng = np.random.default_rng(1)
    all_scores, all_dones, got = [], [], {between: [] for between in sparse}
    for _ in range(12):
        actions = rng.uniform(-0.4, 0.4, size=(3, 17)).astype(np.float32)
        _, scores, dones, _ = every.step(actions)
        all_scores.append(scores)
        all_dones.append(dones)
        for between, env in sparse.items():
            _, rewards, sparse_dones, _ = env.step(actions)
            np.testing.assert_array_equal(dones, sparse_dones)
            got[between].append(rewards)
    for between in sparse:
        expected = scheduled(np.stack(all_scores), np.stack(all_dones), 2, between)
        assert_rewards_close(np.stack(got[between]), expected, between)
    # steps 2, 4, 5 of each 5-step episode (the last is always scored): 7 of 12 steps, all envs at once
    assert encoded == [3] * 7
    for env in (every, *sparse.values()):
        env.close()


class FixedBatch(ImageEncoder):
    """A fixed-batch encoder (as the compile and TensorRT backends are): refuses any other batch."""

    def __init__(self, inner: ImageEncoder, batch_size: int):
        self.inner, self.batch_size = inner, batch_size
        self.backend, self.device, self.input_dtype = "fixed", inner.device, inner.input_dtype
        self.embed_dim, self.image_size = inner.embed_dim, inner.image_size
        self.batches = 0

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        assert pixels.shape[0] == self.batch_size
        self.batches += 1
        return self.inner.encode(pixels)


def test_envs_out_of_phase_are_scored_apart_by_a_fixed_batch_encoder(prompts):
    """gymnasium envs ending at different steps (auto-reset): each step scores a different subset of
    them, gathered and padded to the fixed batch; rewards as the plain schedule of every-step scores."""
    n, every_n = 4, 3
    lengths = [4, 5, 7, 9]
    spec = get_task("cartpole")

    def envs():
        def make(length):
            return lambda: RecordFrame(gymnasium.wrappers.TimeLimit(spec.make_env(), length))

        venv = DummyVecEnv([make(length) for length in lengths])
        venv.seed(7)
        return venv

    reference = load_reward_model("vlmrm-tiny", device="cpu", **prompts)
    model = load_reward_model("vlmrm-tiny", device="cpu", score_every=every_n, between_scores="hold", **prompts)
    model.encoder = FixedBatch(model.encoder, n)
    model.chunk_size = n
    whole = VLMRewardVecEnvWrapper(envs(), reference)
    sparse = VLMRewardVecEnvWrapper(envs(), model)
    encoded = []
    score_pixels = model.score_pixels
    model.score_pixels = lambda pixels, **kw: encoded.append(len(pixels)) or score_pixels(pixels, **kw)
    whole.reset(), sparse.reset()
    scores, dones, got = [], [], []
    for t in range(20):
        actions = np.array([(t + i) % 2 for i in range(n)])
        _, s, d, _ = whole.step(actions)
        _, r, d2, _ = sparse.step(actions)
        np.testing.assert_array_equal(d, d2)
        scores.append(s), dones.append(d), got.append(r)
    expected = scheduled(np.stack(scores), np.stack(dones), every_n, "hold")
    assert_rewards_close(np.stack(got), expected)
    assert set(encoded) - {n}, "some steps scored only some of the envs"
    assert model.encoder.batches == len(encoded)


def test_gymnasium_next_step_autoreset_is_no_episode_step(prompts):
    """make_vec's simulator env (next-step autoreset): the step that only resets an env is not counted,
    so each episode is scored on the same steps as in SB3's same-step autoreset."""
    small = {"render_size": 48, "renderer": "egl", "max_episode_steps": 5}
    common = dict(model="vlmrm-tiny", device="cpu", seed=0, score_every=2, **prompts, **small)
    gym_env = gymnasium.make_vec(
        f"vlmrm_fast/{HUMANOID}", num_envs=2, vectorization_mode="vector_entry_point", **common
    )
    gym_env.reset(seed=0)
    zero = np.zeros((2, 17), np.float32)
    scored = []
    for _ in range(13):  # two 5-step episodes and the reset step between them
        _, rewards, terminated, truncated, _ = gym_env.step(zero)
        scored.append(bool(rewards[0] != 0))
    assert scored == [False, True, False, True, True, False] + [False, True, False, True, True, False] + [False]
    gym_env.close()


def test_bad_schedule_is_one_line():
    with pytest.raises(FieldError, match=r"^score_every: must be a positive integer, got 0$"):
        RewardModelSpec(model="vlmrm-tiny", score_every=0)
    with pytest.raises(FieldError, match=r"^between_scores: 'keep' is not one of zero, hold$"):
        RewardModelSpec(model="vlmrm-tiny", between_scores="keep")
    with pytest.raises(ConfigError, match=r"^reward.score_every: must be a positive integer, got -2$"):
        load_config({"env": {"task": HUMANOID}, "reward": {"model": "vlmrm-tiny", "score_every": -2}})


def test_episode_batch_scoring_needs_every_step(prompts):
    model = load_reward_model("vlmrm-tiny", device="cpu", score_every=4, **prompts)
    with pytest.raises(ValueError, match="defer_rewards .* give it score_every=1, or leave defer_rewards off"):
        FastVLMRewardVecEnv(HUMANOID, 2, reward_model=model, defer_rewards=True, **SMALL)
