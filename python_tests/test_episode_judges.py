"""The judges that watch the episode (the window judge, the streamed prefix judge) through every surface a reward
model has: their spec and family rows, the plan's refusals, the VecEnv over envs that reset at different steps,
the scoring schedule, gymnasium's make_vec, evaluation, the run identity, and PPO from a config."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
import yaml
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv
from vlmrm_fast.checks import FieldError
from vlmrm_fast.envs import get_task
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.models.judge.judge_models import load_judge
from vlmrm_fast.reward import QuestionCriterion, load_reward_model
from vlmrm_fast.reward.prefix_judge import PrefixJudge
from vlmrm_fast.reward.schedule import ScheduleClock
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.reward.window_judge import WindowJudge
from vlmrm_fast.stack.plan import plan_stack

JUDGE = "vlmrm-tiny-qwen2-vl"
CPU = torch.device("cpu")
QUESTION = QuestionCriterion("Is the pole upright?", score="log_odds")
SIZE = 56  # the judge's input: 4 image tokens a frame for the tiny Qwen2-VL
CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
# InvertedPendulum, 3 envs that end their episodes at different steps (pushed hard one way, swayed, pushed the
# other way: episodes of 3, 12 and 4 steps), and the time limit.
TASK, LENGTH, STEPS = "InvertedPendulum-v5", 12, 22


def _actions(t: int) -> np.ndarray:
    return np.array([[3.0], [0.9 * (-1) ** t], [-1.0]], dtype=np.float32)


def _engine(kind: str, **options):
    judge = load_judge(JUDGE, device=CPU)
    if kind == "window":
        return WindowJudge(judge, [QUESTION], num_envs=3, window=4, device=CPU, image_size=(SIZE, SIZE), **options)
    return PrefixJudge(judge, [QUESTION], num_envs=3, max_frames=4, device=CPU, image_size=(SIZE, SIZE), **options)


FIELDS = {"window": {"window": {"frames": 4}}, "prefix": {"prefix": {"max_frames": 4}}}


def _rollout(kind: str, **reward):
    env = FastVLMRewardVecEnv(
        TASK,
        3,
        model=JUDGE,
        criteria=[QUESTION],
        image_size=SIZE,
        render_size=(24, 32),
        episode_length=LENGTH,
        env_reward_weight=0.0,
        device="cpu",
        seed=0,
        **FIELDS[kind],
        **reward,
    )
    try:
        env.reset()
        frames, rewards, dones = [], [], []
        for t in range(STEPS):
            _, r, d, _ = env.step(_actions(t))
            frames.append(env.last_frames().clone().numpy())
            rewards.append(r[:, 0] if r.ndim == 2 else r)
            dones.append(d)
        return env, np.stack(frames), np.stack(rewards), np.stack(dones)
    finally:
        env.close()


def test_a_judges_window_or_prefix_is_its_family():
    """``window:`` on a judge is the window judge, ``prefix:`` the prefix judge; what a family does not take is
    refused at the spec, naming the family."""
    assert RewardModelSpec(model=JUDGE, window={"frames": 4}).family.name == "window_judge"
    assert RewardModelSpec(model=JUDGE, prefix={"max_frames": 8}).family.name == "prefix_judge"
    assert RewardModelSpec(model=JUDGE, prefix={}).prefix.max_frames == 64
    assert RewardModelSpec(model=JUDGE).family.name == "judge"
    mean = {"frames": 4, "embedding": "mean_of_frames"}
    assert RewardModelSpec(model="vlmrm-tiny", window=mean).family.name == "mean_of_frames"
    with pytest.raises(FieldError, match=r"^prefix: sets the episode so far asked about at every step .*, a field "):
        RewardModelSpec(model="vlmrm-tiny", prefix={"max_frames": 8})
    with pytest.raises(FieldError, match=r"^prefix: .*the window_judge family\), which does not take it: leave it out"):
        RewardModelSpec(model=JUDGE, window={"frames": 4}, prefix={"max_frames": 8})
    with pytest.raises(FieldError, match=r"^prefix\.max_frames: must be at least 2"):
        RewardModelSpec(model=JUDGE, prefix={"max_frames": 1})
    with pytest.raises(FieldError, match=r"^prefix\.frames: unknown field; a prefix has max_frames$"):
        RewardModelSpec(model=JUDGE, prefix={"frames": 8})
    with pytest.raises(FieldError, match=r"^window\.timing: 'episode_end' is a video model's; .*prefix: "):
        RewardModelSpec(model=JUDGE, window={"frames": 4, "timing": "episode_end"})
    with pytest.raises(FieldError, match=r"^window\.reads: sets how many of a window's frames a generative VLM judge"):
        RewardModelSpec(model="vlmrm-tiny", window={"frames": 4, "reads": 2, "embedding": "mean_of_frames"})
    with pytest.raises(FieldError, match=r"^window\.reads: 5 is more than the window's 4 frames"):
        RewardModelSpec(model=JUDGE, window={"frames": 4, "reads": 5})


@pytest.mark.parametrize("kind", ["window", "prefix"])
def test_the_plan_refuses_what_a_judge_of_the_episode_cannot_be_given(kind):
    """Checked once, by the plan, from the spec before anything loads: the next episode's first frame scored
    with the ended one's (score_terminal_on: reset_frame), and episode batches."""
    spec = RewardModelSpec(model=JUDGE, **FIELDS[kind])
    with pytest.raises(FieldError, match=r"^score_terminal_on: reset_frame reproduces the paper's one-frame .* use "):
        plan_stack(EnvSpec("cartpole", 2, score_terminal_on="reset_frame"), spec)
    with pytest.raises(ValueError, match=r"^defer_rewards \(rl\.episode_batch\) scores single frames after the"):
        plan_stack(EnvSpec("cartpole", 2), spec, defer_rewards=True)


@pytest.mark.parametrize("kind", ["window", "prefix"])
def test_the_vec_env_feeds_each_episode_to_its_own_state(kind):
    """Envs that end their episodes at different steps (terminations, then the time limit) under
    auto-reset: the stack's rewards are the engine's fed the same frames with the episodes' starts (its
    window or prefix restarting with each episode, never holding two episodes' frames), the prefix past
    max_frames (its cache rebuilt at a stride of 2, 4)."""
    env, frames, rewards, dones = _rollout(kind)
    lengths = np.diff(np.flatnonzero(np.concatenate([[True], dones[:, 1]])))  # the swayed env
    assert len({tuple(np.flatnonzero(dones[:, i])) for i in range(3)}) == 3, "the envs reset at different steps"
    assert dones.any(axis=0).all() and (lengths > 4).any()
    engine = _engine(kind)
    starts = np.concatenate([np.ones((1, 3), bool), dones[:-1]])
    expected = np.stack([engine.step(frames[t], starts=starts[t]).numpy() for t in range(STEPS)])
    assert_rewards_close(rewards, expected)
    if kind == "prefix":
        assert "per env the keys and values of" in env.reward_model.describe()
        assert "for 3 envs on cpu" in env.reward_model.describe()


@pytest.mark.parametrize("kind", ["window", "prefix"])
def test_score_every_answers_on_the_due_steps_and_keeps_every_frame(kind):
    """score_every: 3 asks the question on steps 3, 6, ... of each episode and its last (the simulator env knows the
    time limit's last step ahead, not a termination's); every frame still enters the window or the prefix, so the
    due steps' rewards are those of score_every: 1, the others held."""
    _, _, every, dones = _rollout(kind)
    _, _, third, dones_third = _rollout(kind, score_every=3, between_scores="hold")
    np.testing.assert_array_equal(dones, dones_third)
    step = np.zeros(3, dtype=int)
    held = np.zeros(3)
    for t in range(STEPS):
        step += 1
        due = (step % 3 == 0) | (step == LENGTH)
        held = np.where(due, every[t], held)
        assert_rewards_close(third[t], held, err_msg=f"step {t}")
        step[dones[t]] = 0
        held[dones[t]] = 0.0


def test_the_prefix_judge_runs_no_question_off_schedule():
    """With score_every: 4 and max_frames 4, a step neither due nor kept by the cache runs nothing, not even the
    vision tower: fewer frames through the tower than steps."""
    model = load_reward_model(JUDGE, criteria=[QUESTION], prefix={"max_frames": 4}, image_size=SIZE, score_every=4)
    frames_in = []
    encode = model.frame_judge.adapter.encode
    model.frame_judge.adapter.encode = lambda pixels: frames_in.append(len(pixels)) or encode(pixels)
    scorer = model.step_scorer(1)
    clock = ScheduleClock(model.schedule, 1)
    images = model.pixel_buffer(1).zero_()
    out = np.zeros(1)
    for _ in range(16):
        plan = clock.plan()
        scorer.begin(plan)
        result = torch.zeros(1, 1)  # (envs, criteria): criteria= gives a column each
        scorer.submit(images, slice(0, 1), result)
        out = result.numpy()
        clock.end_step(plan, np.zeros(1, dtype=bool))
    # Frames 0..15 (prefix_frames): kept when drawn 0, 1, 2, 3 (stride 1), 4, 6 (stride 2), 8, 12 (stride 4; 16 at
    # stride 8); due 3, 7, 11, 15. The other five (5, 9, 10, 13, 14) run nothing.
    assert frames_in == [1] * 11 and np.isfinite(out).all()


@pytest.mark.parametrize("kind", ["window", "prefix"])
def test_make_vec_and_evaluate_score_a_judge_of_the_episode(kind):
    import gymnasium

    from vlmrm_fast.evaluation import StateDataset, evaluate_models

    env = gymnasium.make_vec(
        f"vlmrm_fast/{TASK}",
        num_envs=3,
        vectorization_mode="vector_entry_point",
        model=JUDGE,
        criteria=[QUESTION],
        image_size=SIZE,
        render_size=(24, 32),
        max_episode_steps=LENGTH,
        device="cpu",
        **FIELDS[kind],
    )
    try:
        env.reset(seed=0)
        rewards = np.stack([env.step(_actions(t))[1] for t in range(5)])
        assert rewards.shape == (5, 3) and np.isfinite(rewards).all()
    finally:
        env.close()

    rng = np.random.default_rng(0)
    lengths = (5, 7)
    frames = rng.integers(0, 256, (12, 24, 32, 3), dtype=np.uint8)
    dataset = StateDataset(
        "cartpole",
        rng.normal(size=(12, 4)),
        frames,
        ("cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"),
        labels=rng.random(12),
        episodes=np.repeat(np.arange(len(lengths)), lengths),
    )
    model = load_reward_model(JUDGE, criteria=[QUESTION], image_size=SIZE, device="cpu", **FIELDS[kind])
    (evaluated,) = evaluate_models(dataset, [model], alphas=(0.0,)).models
    assert evaluated.model == (f"{JUDGE} (window 4)" if kind == "window" else JUDGE)
    engine = _engine(kind)  # evaluated on the question about the task's first target prompt, each episode alone
    engine._ask([QuestionCriterion.about(get_task("cartpole").target_prompts[0])], False)
    expected = np.concatenate([engine.score_episode(frames[:5]).numpy(), engine.score_episode(frames[5:]).numpy()])
    assert_rewards_close(evaluated.rewards[:, 0], expected)


def test_a_resume_that_changes_a_judges_window_or_prefix_is_refused_naming_it():
    from vlmrm_fast.training.config import identity_differences, load_config, resolved, run_identity, upgraded_identity

    def identity(reward):
        config = {"env": {"task": "cartpole", "n_envs": 2}, "reward": {"model": JUDGE, **reward}}
        return run_identity(resolved(load_config(config)))

    prefix = identity({"prefix": {"max_frames": 16}})
    assert prefix["reward"]["prefix"] == {"max_frames": 16}
    assert identity_differences(prefix, identity({"prefix": {"max_frames": 32}})) == [
        "reward.prefix.max_frames: 16 then, 32 now"
    ]
    window = identity({"window": {"frames": 8, "reads": 4}})
    assert identity_differences(window, identity({"window": {"frames": 8}})) == [
        "reward.window.reads: 4 then, None now"
    ]
    older = identity({})
    del older["reward"]["prefix"]
    assert identity_differences(upgraded_identity(older), identity({})) == []
    assert identity_differences(upgraded_identity(older), prefix) == [
        "reward.prefix: None then, {'max_frames': 16} now"
    ]


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("config_name", ["window-judge-quickstart.yaml", "prefix-judge-quickstart.yaml"])
def test_ppo_trains_with_a_judge_of_the_episode_from_a_config(tmp_path, config_name, capsys):
    from stable_baselines3 import PPO

    from vlmrm_fast.training.config import load_config
    from vlmrm_fast.training.train import train

    config = yaml.safe_load((CONFIGS / config_name).read_text())
    assert config["reward"]["model"] == JUDGE and config["rl"]["algorithm"] == "PPO"
    config["output_dir"] = str(tmp_path / "run")
    config["env"].update(n_envs=2, episode_length=8, render_size=48)
    config["reward"]["image_size"] = SIZE
    config["rl"].update(total_timesteps=32, device="cpu", kwargs={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    config["logging"] = {"checkpoint_every": 32, "video_every": 0}
    assert train(load_config(config)) == 0
    assert PPO.load(tmp_path / "run" / "final_model.zip").num_timesteps >= 32
    if "prefix" in config_name:
        assert "  reward model        vlmrm-tiny-qwen2-vl: the episode so far as images" in capsys.readouterr().out
