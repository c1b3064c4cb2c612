"""Rewards from windows of frames: the windows streamed on the device against the same episodes'
frames windowed offline (``reward/window.py``'s plain index rules and ``score_windows``), across
episode boundaries, auto-reset, pipeline ranges, both timings and both autoreset modes, and the
one-line refusals."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model
from vlmrm_fast.checks import FieldError
from vlmrm_fast.envs import get_task
from vlmrm_fast.reward.protocol import RewardModel
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.reward.window import episode_end_frames, paper_window_ends, streamed_window
from vlmrm_fast.reward.window_model import MeanOfFramesModel, VideoWindowModel
from vlmrm_fast.stack.wrappers import RecordFrame, VLMRewardVecEnvWrapper
from vlmrm_fast.training.config import ConfigError, load_config

HUMANOID = "humanoid-kneeling"
SMALL = {"render_size": 48, "renderer": "egl"}
MEAN = {"model": "vlmrm-tiny", "window": {"frames": 4, "embedding": "mean_of_frames"}}
VICLIP = {"model": "viclip-tiny", "window": {"frames": 4}}

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


def prompts(task: str = HUMANOID) -> dict:
    spec = get_task(task)
    return {"target_prompts": spec.target_prompts, "baseline_prompts": spec.baseline_prompts, "alpha": 0.5}


def rollout(env, steps: int, actions):
    """Each step's frames (copied), rewards and dones."""
    frames, rewards, dones = [], [], []
    for t in range(steps):
        _, r, d, _ = env.step(actions(t))
        frames.append(env.last_frames().clone().numpy())
        rewards.append(r)
        dones.append(d)
    return np.stack(frames), np.stack(rewards), np.stack(dones)


def episodes_of(dones: np.ndarray, env: int) -> list[np.ndarray]:
    """The step indices of env ``env``'s episodes (the last one may be unfinished)."""
    ends = np.flatnonzero(dones[:, env])
    starts = np.concatenate([[0], ends + 1])
    stops = np.concatenate([ends + 1, [len(dones)]])
    return [np.arange(a, b) for a, b in zip(starts, stops) if b > a]


def offline_streamed(model, frames, dones, every: int) -> np.ndarray:
    """Each env's episodes windowed offline: the window of K frames ending at each scored step (its
    episode's first frame repeated before it), scored by ``score_windows``; 0 on the other steps."""
    k = model.window.frames
    out = np.zeros(dones.shape, dtype=np.float32)
    for env in range(dones.shape[1]):
        for steps in episodes_of(dones, env):
            finished = bool(dones[steps[-1], env])
            scored = [i for i in range(len(steps)) if (i + 1) % every == 0 or (finished and i == len(steps) - 1)]
            windows = np.stack([streamed_window(i, k) for i in scored])
            out[steps[scored], env] = model.score_windows(frames[steps, env], windows).numpy()
    return out


@pytest.mark.parametrize("kind", [MEAN, VICLIP], ids=["mean_of_frames", "viclip"])
def test_streamed_windows_equal_offline_windows(kind):
    """The simulator env, 3 envs in 2 pipeline ranges, windows of 4 frames scored every 2 steps through
    two 7-step episodes: each reward equals the same frames windowed offline."""
    env = FastVLMRewardVecEnv(
        HUMANOID, 3, device="cpu", episode_length=7, pipeline_chunks=2, score_every=2, **SMALL, **kind, **prompts()
    )
    env.seed(2)
    env.reset()
    rng = np.random.default_rng(0)
    frames, rewards, dones = rollout(env, 16, lambda t: rng.uniform(-0.4, 0.4, (3, 17)).astype(np.float32))
    assert dones[6].all() and dones[13].all()
    expected = offline_streamed(env.reward_model, frames, dones, every=2)
    assert_rewards_close(rewards, expected)
    assert (rewards[[0, 2, 4, 7, 9, 11, 14]] == 0).all() and (rewards[[1, 3, 5, 6, 8, 15]] != 0).all()
    env.close()


def cartpoles(lengths, seed: int = 5) -> DummyVecEnv:
    """gymnasium CartPoles whose episodes end at different steps (time limits of their own), auto-reset."""
    spec = get_task("cartpole")

    def make(length):
        return lambda: RecordFrame(gymnasium.wrappers.TimeLimit(spec.make_env(), length))

    venv = DummyVecEnv([make(length) for length in lengths])
    venv.seed(seed)
    return venv


def test_no_window_mixes_episodes():
    """Envs resetting at different steps (SB3's auto-reset): every streamed window equals its own
    episode's frames windowed offline, so none holds a frame of another episode."""
    lengths = [3, 4, 6, 7]
    model = load_reward_model("viclip-tiny", window={"frames": 5}, device="cpu", **prompts("cartpole"))
    env = VLMRewardVecEnvWrapper(cartpoles(lengths), model)
    env.reset()
    frames, rewards, dones = rollout(env, 15, lambda t: np.array([(t * 7 + i) % 2 for i in range(len(lengths))]))
    assert [int(dones[:, i].sum()) for i in range(4)] == [5, 3, 2, 2]
    assert_rewards_close(rewards, offline_streamed(model, frames, dones, every=1))
    env.close()


def offline_episode_end(model, frames, dones, length: int) -> np.ndarray:
    """One window per finished episode: its frames at ``episode_end_frames`` (a shorter episode's last
    frame standing in for those it did not reach), its reward on the last step."""
    out = np.zeros(dones.shape, dtype=np.float32)
    for env in range(dones.shape[1]):
        for steps in episodes_of(dones, env):
            if dones[steps[-1], env]:
                window = np.minimum(episode_end_frames(length, model.window.frames), len(steps) - 1)
                out[steps[-1], env] = model.score_windows(frames[steps, env], window[None]).numpy()[0]
    return out


@pytest.mark.parametrize("name", ["s3d-tiny", pytest.param("xclip-tiny", marks=pytest.mark.slow)])
def test_episode_end_windows_in_sb3_and_gymnasium(name):
    """An episode-end window: one reward per episode, on its last step, from frames evenly spread over the
    episode; the SB3 stack (same-step autoreset) and gymnasium's make_vec (next-step autoreset, whose
    reset steps hold no frame of an episode) give the same rewards on the same episodes."""
    common = dict(model=name, window={"frames": 4, "timing": "episode_end"}, device="cpu", **SMALL, **prompts())
    sb3 = FastVLMRewardVecEnv(HUMANOID, 2, episode_length=6, **common)
    sb3.seed(1)
    sb3.reset()
    zero = np.zeros((2, 17), np.float32)
    frames, rewards, dones = rollout(sb3, 12, lambda t: zero)
    expected = offline_episode_end(sb3.reward_model, frames, dones, 6)
    assert_rewards_close(rewards, expected)
    assert (rewards[[5, 11]] != 0).all() and np.count_nonzero(rewards) == 4
    gym_env = gymnasium.make_vec(
        f"vlmrm_fast/{HUMANOID}", num_envs=2, vectorization_mode="vector_entry_point", max_episode_steps=6, **common
    )
    gym_env.reset(seed=1)
    gym_rewards = [gym_env.step(zero)[1] for _ in range(13)]  # 6 steps, a reset step, 6 steps
    assert_rewards_close(np.stack(gym_rewards[:6] + gym_rewards[7:]), rewards)
    gym_env.close()
    sb3.close()


def test_episode_end_window_of_an_episode_that_ends_early():
    """gymnasium envs ending before the time limit: the window keeps the frames it reached, the last
    one standing in for the rest."""
    lengths = [5, 8]
    model = load_reward_model(
        "vlmrm-tiny",
        window={"frames": 4, "timing": "episode_end", "embedding": "mean_of_frames"},
        device="cpu",
        **prompts("cartpole"),
    )
    env = VLMRewardVecEnvWrapper(cartpoles(lengths), model, episode_length=8)
    env.reset()
    frames, rewards, dones = rollout(env, 16, lambda t: np.array([t % 2, (t + 1) % 2]))
    assert_rewards_close(rewards, offline_episode_end(model, frames, dones, 8))
    assert np.count_nonzero(rewards[:, 0]) == 3 and np.count_nonzero(rewards[:, 1]) == 2
    env.close()


def test_episode_end_window_over_a_tasks_gymnasium_envs():
    """The stack over a task's gymnasium envs spreads an episode-end window over the time limit the plan gives
    them (it was refused there: the wrapper looked for the time limit on SB3's DummyVecEnv)."""
    env = FastVLMRewardVecEnv(
        "cartpole",
        2,
        model="vlmrm-tiny",
        window={"frames": 3, "timing": "episode_end", "embedding": "mean_of_frames"},
        episode_length=5,
        render_size=(24, 32),
        device="cpu",
        seed=3,
        **prompts("cartpole"),
    )
    try:
        assert env.plan.physics == "gym"
        frames, rewards, dones = rollout(env, 10, lambda t: np.array([t % 2, (t + 1) % 2]))
        assert dones[4].all() and dones[9].all()
        assert_rewards_close(rewards, offline_episode_end(env.reward_model, frames, dones, 5))
        assert np.count_nonzero(rewards) == 4
    finally:
        env.close()


def test_mean_of_frames_is_the_paper_codes_avg_frame():
    """The window's embedding: each frame's embedding normalised, their mean, then the reward (which
    normalises again), written plainly against the frame model."""
    model = load_reward_model(
        "vlmrm-tiny", window={"frames": 3, "embedding": "mean_of_frames"}, device="cpu", **prompts()
    )
    assert isinstance(model, MeanOfFramesModel)
    windows = np.random.default_rng(0).integers(0, 256, (5, 3, 40, 40, 3), dtype=np.uint8)
    frames = model.frames
    embeddings = frames.embed_images(windows.reshape(15, 40, 40, 3)).view(5, 3, -1)
    expected = frames.reward_from_embeddings(embeddings.mean(dim=1))
    assert_rewards_close(model(windows).numpy(), expected.numpy())


def test_video_window_reads_the_newest_frames_subsampled():
    """A video model of 8 frames given a window of 16: it reads every second frame up to the newest."""
    model = load_reward_model("viclip-tiny", window={"frames": 16}, device="cpu", **prompts())
    assert isinstance(model, VideoWindowModel) and model.reads(16) == [1, 3, 5, 7, 9, 11, 13, 15]
    windows = np.random.default_rng(1).integers(0, 256, (2, 16, 50, 70, 3), dtype=np.uint8)
    pixels = torch.stack([model.preprocessor(w[1::2]) for w in windows])
    expected = model.rewards_of(model.head(model.video.encode_video(pixels)))
    assert_rewards_close(model(windows).numpy(), expected.numpy())


def test_the_ring_keeps_each_frames_features_where_no_larger_than_the_frame():
    """ViCLIP's frames are embedded once, when drawn (the ring keeps their patch embeddings) where those
    are no larger than the preprocessed frame; windows of them score as encode_video of the frames."""
    from vlmrm_fast.models.video import video_model_info
    from vlmrm_fast.reward.window_model import ring_item_shape

    assert ring_item_shape(video_model_info("viclip-b16")) == (196, 768)  # as many values as 3 x 224 x 224
    assert ring_item_shape(video_model_info("viclip-l14")) == (3, 224, 224)  # its 256 x 1,024 would be larger
    assert ring_item_shape(video_model_info("xclip-base-patch32")) == (3, 224, 224)  # reads the window whole
    model = load_reward_model("viclip-tiny", window={"frames": 8}, device="cpu", **prompts())
    assert isinstance(model, VideoWindowModel) and model.item_shape == (16, 32) and model.keeps_features
    with torch.inference_mode():
        pixels = model.preprocessor(np.random.default_rng(2).integers(0, 256, (5, 50, 70, 3), dtype=np.uint8))
        items = model.frame_items(pixels)
        windows = torch.tensor([[0, 1, 2, 3, 4, 4, 4, 4], [0, 0, 0, 0, 0, 1, 2, 3]])
        expected = model.head(model.video.encode_video(pixels[windows]))
        assert_rewards_close(model.window_rewards(items[windows]).numpy(), expected.numpy())


def test_paper_windows_inside_an_episode():
    assert paper_window_ends(10, 4, 3).tolist() == [3, 6, 9]
    assert paper_window_ends(10, 4, 4).tolist() == [3, 7]
    assert streamed_window(1, 4).tolist() == [0, 0, 0, 1]
    assert episode_end_frames(32, 8).tolist() == [3, 7, 11, 15, 19, 23, 27, 31]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"model": "vlmrm-tiny", "window": {"frames": 0}}, r"^window.frames: must be a positive integer, got 0$"),
        ({"model": "vlmrm-tiny", "window": {"frames": 8}}, r"^window.embedding: 'video' needs a video model, and "),
        ({"model": "viclip-tiny"}, r"^window: model 'viclip-tiny' scores windows of frames, not single frames; add "),
        (
            {"model": "viclip-tiny", "window": {"frames": 8}, "backend": "tensorrt"},
            r"^backend: 'tensorrt' builds CLIP image towers; video model 'viclip-tiny' runs on 'torch' or 'compile'",
        ),
        (
            {"model": "viclip-tiny", "window": {"frames": 8}, "precision": "fp8"},
            r"^precision: 'fp8': video model 'viclip-tiny' runs in auto, fp32, fp16, bf16$",
        ),
        (
            {"model": "viclip-tiny", "window": {"frames": 8, "timing": "episode_end"}, "score_every": 4},
            r"^score_every: window.timing: episode_end scores each episode once, on its last step; leave score_every",
        ),
        (
            {"model": "viclip-tiny", "window": {"frames": 8, "embedding": "mean_of_frames"}},
            r"^window.embedding: mean_of_frames averages a frame model's embeddings, and 'viclip-tiny' embeds",
        ),
    ],
)
def test_bad_window_is_one_line(fields, message):
    with pytest.raises(FieldError, match=message):
        RewardModelSpec(**fields)


def test_bad_window_in_a_config_names_its_place():
    with pytest.raises(ConfigError, match=r"^reward.window.frames: must be a positive integer, got -1$"):
        load_config({"env": {"task": HUMANOID}, "reward": {"model": "viclip-tiny", "window": {"frames": -1}}})
    with pytest.raises(
        ConfigError,
        match=r"^reward.window.size: unknown field; fields are frames, timing, embedding, pixel_values, reads$",
    ):
        load_config({"env": {"task": HUMANOID}, "reward": {"model": "viclip-tiny", "window": {"size": 8}}})


def test_window_the_episodes_cannot_fill_is_refused():
    with pytest.raises(FieldError, match=r"^window.frames: 9 frames is more than an episode's 6 steps, so no window"):
        FastVLMRewardVecEnv(HUMANOID, 1, model="viclip-tiny", window={"frames": 9}, episode_length=6, **SMALL)
    model = load_reward_model(
        "viclip-tiny", window={"frames": 4, "timing": "episode_end"}, device="cpu", **prompts("cartpole")
    )
    with pytest.raises(ValueError, match=r"^window.timing: episode_end spreads a window over an episode's time limit"):
        VLMRewardVecEnvWrapper(cartpoles([5]), model)


def test_video_model_given_single_frames_is_one_line():
    model = load_reward_model("viclip-tiny", window={"frames": 4}, device="cpu", **prompts())
    frames = np.zeros((2, 32, 32, 3), np.uint8)
    with pytest.raises(ValueError, match=r"^viclip-tiny scores windows of frames \(N, K, H, W, 3\), got shape"):
        model(frames)
    assert isinstance(model, RewardModel) and not hasattr(
        model, "score_pixels"
    )  # it keeps the protocol it is passed under
    with pytest.raises(ValueError, match=r"defer_rewards \(rl.episode_batch\) scores single frames after the rollout"):
        FastVLMRewardVecEnv(HUMANOID, 1, reward_model=model, defer_rewards=True, episode_length=6, **SMALL)


def test_missing_extra_names_the_pip_command(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install 'vlmrm-fast\[video\]'"):
        load_reward_model("xclip-tiny", window={"frames": 8}, device="cpu", **prompts())


@pytest.mark.slow  # torch.compile of the tiny ViCLIP on the CPU
def test_compiled_video_model_scores_as_the_eager_one():
    """backend compile: one fixed batch of windows (4), a batch of 2 padded to it; the rewards of the
    eager model."""
    common = dict(window={"frames": 8}, device="cpu", batch_size=4, **prompts())
    eager = load_reward_model("viclip-tiny", backend="torch", **common)
    compiled = load_reward_model("viclip-tiny", backend="compile", **common)
    assert compiled.compiled and not eager.compiled
    windows = np.random.default_rng(2).integers(0, 256, (6, 8, 40, 40, 3), dtype=np.uint8)
    assert_rewards_close(compiled(windows).numpy(), eager(windows).numpy())


def test_xclip_scores_each_window_against_its_own_prompts():
    """X-CLIP's text is made for each window: each reward is the formulas' (reward/formulas.py) with that
    window's own prompt embeddings, for a goal-baseline and a binary task at once."""
    from vlmrm_fast.reward.head import RewardHead
    from vlmrm_fast.reward.kinds import BinaryCriterion, GoalBaselineCriterion

    tasks = [
        GoalBaselineCriterion(("a robot walking",), ("a robot",), 0.5, name="walk"),
        BinaryCriterion("a robot walking", ("a robot falling", "a robot"), probability=True, name="binary"),
    ]
    model = load_reward_model("xclip-tiny", window={"frames": 8}, criteria=tasks, device="cpu")
    windows = np.random.default_rng(3).integers(0, 256, (3, 8, 48, 48, 3), dtype=np.uint8)
    pixels = torch.stack([model.preprocessor(w) for w in windows])
    prompts = ["a robot walking", "a robot", "a robot falling"]
    video, text = model.video.encode_video_and_text(pixels, prompts)
    expected = [
        RewardHead(tasks, dict(zip(prompts, text[n])).__getitem__, model.video.logit_scale, torch.device("cpu"))
        .reference(video[n : n + 1])
        .numpy()[0]
        for n in range(3)
    ]
    assert_rewards_close(model(windows).numpy(), np.stack(expected))
