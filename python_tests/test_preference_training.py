"""The learned preference reward (RL-VLM-F) as a reward family: loaded from a spec, in the env stack (its per-step
scorer feeding the replay and giving the network's reward), trained with PPO and SAC from a config on the CPU with a
tiny random judge, its learned state saved with each checkpoint and restored by a resume, and the refusals of what it
cannot do (episode batches, torchrun, an answer word of several tokens, a judge of one image per prompt), each in one
line naming the fix."""

from __future__ import annotations

import copy
import dataclasses
import pathlib

import numpy as np
import pytest
import torch
import yaml
from tolerances import REWARD_ATOL, REWARD_RTOL

from vlmrm_fast.checks import FieldError

ROOT = pathlib.Path(__file__).resolve().parents[1]
JUDGE = "vlmrm-tiny-qwen2-vl"
#: A schedule that labels and trains every other step, small enough for the CPU.
QUICK = {"label_every": 2, "pairs": 4, "updates": 2, "batch_size": 4, "replay": 32, "labels": 16, "net_size": 16}


def spec_fields(**preference):
    return {
        "model": JUDGE,
        "device": "cpu",
        "image_size": 32,
        "target_prompts": ["a pole upright"],
        "preference": {**QUICK, **preference},
    }


def load(**preference):
    from vlmrm_fast import load_reward_model

    return load_reward_model(**spec_fields(**preference))


# ----------------------------------------------------------------------------- the family
def test_a_preference_on_a_judges_spec_is_the_preference_family():
    from vlmrm_fast.reward.preference_model import PREFERENCE_NEEDS, PreferenceRewardModel
    from vlmrm_fast.reward.protocol import LearnsOnline, RewardModel
    from vlmrm_fast.reward.spec import RewardModelSpec

    spec = RewardModelSpec(**spec_fields())
    assert spec.family.name == "preference" and spec.needs == PREFERENCE_NEEDS
    model = load()
    assert isinstance(model, PreferenceRewardModel) and isinstance(model, RewardModel)
    assert isinstance(model, LearnsOnline)
    assert model.labeler.question == (
        "The goal is: a pole upright. Does the first image show more progress toward the goal than the second image? "
        "Answer yes or no."
    )
    assert [c.name for c in model.criteria] == ["preference"] and not model.multi_criteria
    net = sum(p.numel() for p in model.learner.net.parameters())
    assert model.parameter_count() == model.labeler.prompts.parameter_count() + net
    frames = np.random.default_rng(0).integers(0, 256, (5, 40, 48, 3), dtype=np.uint8)
    scored = model.score_frames(frames, None, [model.criteria[0]])
    assert scored.shape == (5, 1) and scored.dtype == torch.float32
    torch.testing.assert_close(scored[:, 0], model.learner.rewards_of(frames), rtol=0, atol=0)


def test_the_stack_feeds_the_replay_and_gives_the_networks_rewards():
    """Each step's frames join the replay (every env's, on every step, whatever score_every says), the due envs
    get the network's reward of their frame, and a round of labels and training follows every label_every steps
    of the stack (not of its ranges): two pipeline ranges give the same learned state as one, and the same rewards
    to float precision (the network's batches differ)."""
    from vlmrm_fast import FastVLMRewardVecEnv

    def run(chunks: int, score_every: int = 1):
        model = load()
        env = FastVLMRewardVecEnv(
            "humanoid-kneeling",
            3,
            reward_spec=None,
            reward_model=model,
            render_size=(32, 32),
            episode_length=8,
            pipeline_chunks=chunks,
            seed=0,
        )
        env.reset()
        rng = np.random.default_rng(0)
        rewards = []
        for _ in range(5):
            _, reward, _, _ = env.step(rng.uniform(-0.4, 0.4, (3, *env.action_space.shape)).astype(np.float32))
            rewards.append(reward)
        env.close()
        return model.learner, np.array(rewards)

    one, rewards = run(1)
    assert one.steps == 5 and one.replayed == 15 and one.labelled == 2 * QUICK["pairs"]
    # The step's rewards are the network's as it was before the step's round: the last step's, of its frames (the
    # replay's copy lies in another memory layout, which the convolutions may round otherwise: a few ulps).
    frames = one.replay[[12, 13, 14]]  # the last step's three frames, at the judge's input size
    torch.testing.assert_close(
        torch.as_tensor(rewards[-1]),
        one.rewards_of_images(frames.permute(0, 3, 1, 2)),
        rtol=REWARD_RTOL,
        atol=REWARD_ATOL,
    )
    two, rewards_two = run(2)
    np.testing.assert_allclose(rewards, rewards_two, rtol=REWARD_RTOL, atol=REWARD_ATOL)  # batches of 2 + 1 and 3
    assert two.steps == one.steps and torch.equal(two.labels, one.labels) and torch.equal(two.replay, one.replay)
    for p, q in zip(one.net.parameters(), two.net.parameters()):
        assert torch.equal(p, q)


def test_a_learned_state_round_trips_bit_for_bit(tmp_path):
    model = load()
    rng = np.random.default_rng(1)
    for _ in range(4):
        model.learner.step(rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8))
    path = tmp_path / "state.pt"
    with open(path, "wb") as f:
        model.save_learned(f)
    other = load()
    with open(path, "rb") as f:
        other.load_learned(f)
    frames = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    assert torch.equal(model.score_frames(frames), other.score_frames(frames))
    assert other.learner.steps == 4 and torch.equal(other.learner.labels, model.learner.labels)


def test_score_every_leaves_the_network_to_the_due_envs_and_every_frame_to_the_replay():
    """score_every: 2, between_scores: hold: the learner sees every env's frame on every step (its replay, its round
    every label_every steps), the envs get the network's reward on their due steps and hold it between."""
    from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model

    model = load_reward_model(**spec_fields(), score_every=2, between_scores="hold")
    env = FastVLMRewardVecEnv("cartpole", 2, reward_model=model, episode_length=50, seed=0)
    env.reset()
    rewards = [env.step(np.zeros(2, dtype=np.int64))[1] for _ in range(4)]
    env.close()
    assert model.learner.steps == 4 and model.learner.replayed == 8 and model.learner.labelled == 2 * QUICK["pairs"]
    np.testing.assert_array_equal(rewards[2], rewards[1])  # step 3 holds step 2's score
    assert not np.array_equal(rewards[3], rewards[1])  # step 4 is scored by the network trained after step 2


def test_make_vec_and_evaluate_take_the_learned_reward():
    """gymnasium's vector API builds the same stack; evaluation scores the network's rewards of the frames (one
    column, about the first target prompt as a judge's)."""
    import gymnasium

    from vlmrm_fast.evaluation.dataset import StateDataset
    from vlmrm_fast.evaluation.evaluate import evaluate_models

    fields = spec_fields()
    env = gymnasium.make_vec(
        "vlmrm_fast/humanoid-kneeling",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        render_size=32,
        max_episode_steps=4,
        **{k: v for k, v in fields.items() if k != "device"},
    )
    try:
        env.reset(seed=0)
        for _ in range(3):
            _, rewards, _, _, _ = env.step(np.zeros(env.action_space.shape, np.float32))
        model = env.reward_model
        assert model.learner.steps == 3 and model.learner.labelled == QUICK["pairs"]
        frames = np.stack(env.render())
        np.testing.assert_allclose(
            rewards, model.learner.rewards_of(frames).numpy(), rtol=REWARD_RTOL, atol=REWARD_ATOL
        )
    finally:
        env.close()
    ds = StateDataset.sample("cartpole", 8, seed=0, size=(40, 60))
    ds = ds.with_labels((np.abs(ds.states[:, 2]) < 0.05).astype(float))
    (evaluated,) = evaluate_models(ds, [model], (0.0, 0.5)).models
    assert evaluated.alphas == (0.0,)
    np.testing.assert_array_equal(evaluated.rewards[:, 0], model.learner.rewards_of(ds.frames).numpy())


# ----------------------------------------------------------------------------- training from a config
def shrunk(tmp_path: pathlib.Path, **env) -> dict:
    """configs/preference-humanoid-kneeling.yaml with the tiny random judge, two envs, short episodes and the quick
    schedule."""
    config = yaml.safe_load((ROOT / "configs" / "preference-humanoid-kneeling.yaml").read_text())
    assert config["reward"]["preference"]["goal"] and config["rl"]["algorithm"] == "SAC"
    config["output_dir"] = str(tmp_path / "run")
    config["reward"].update(model=JUDGE, device="cpu", image_size=32, batch_size=8)
    config["reward"]["preference"].update(QUICK)
    config["env"] = {"task": "humanoid-kneeling", "n_envs": 2, "episode_length": 8, "render_size": 32, **env}
    config["rl"].update(total_timesteps=32, device="cpu")
    config["rl"]["kwargs"] = {"learning_starts": 8, "batch_size": 8, "buffer_size": 64, "train_freq": 2}
    config["logging"] = {"checkpoint_every": 16, "video_every": 0}
    return config


@pytest.mark.usefixtures("one_torch_thread")
def test_sac_trains_with_the_preference_reward_from_the_shipped_config(tmp_path):
    """SAC from the example config, shrunk: each checkpoint holds the learned reward's state, named by its
    manifest, and the state's counts are the run's; the run's video is scored by the network."""
    from stable_baselines3 import SAC

    from vlmrm_fast.training.config import load_config
    from vlmrm_fast.training.train import train

    config = shrunk(tmp_path)
    config["logging"]["video_every"] = 32  # the run's video, its VLM return scored by the network (score_frames)
    assert train(load_config(config)) == 0
    run = tmp_path / "run"
    assert SAC.load(run / "final_model.zip").num_timesteps >= 32
    assert [p.name for p in (run / "videos").glob("*.mp4")] == ["policy_000000032_steps.mp4"]
    folder = run / "checkpoints"
    for steps in (16, 32):
        state = torch.load(folder / f"model_reward_state_{steps}_steps.pt", weights_only=True)
        assert state["counts"]["steps"] == steps // 2 and state["counts"]["replayed"] == steps
        assert state["counts"]["labelled"] == (steps // 2 // QUICK["label_every"]) * QUICK["pairs"]
        manifest = yaml.safe_load((folder / f"model_{steps}_steps.json").read_text())
        assert manifest["files"]["reward_state"]["name"] == f"model_reward_state_{steps}_steps.pt"
        assert manifest["identity"]["reward"]["preference"]["label_every"] == QUICK["label_every"]


@pytest.mark.usefixtures("one_torch_thread")
def test_ppo_trains_with_the_preference_reward_and_a_resume_continues_its_learning(tmp_path, capsys):
    """PPO on CartPole: a run to 32 steps, resumed to 64: the resumed run's learned reward continues the saved one
    (its counts go on from the checkpoint's, its labels keep the first run's), and a resume that changes a
    preference setting is refused naming it."""
    from vlmrm_fast.cli import main as cli_main

    config = shrunk(tmp_path)
    config["env"] = {"task": "cartpole", "n_envs": 2, "episode_length": 16}
    config["rl"] = {
        "algorithm": "PPO",
        "total_timesteps": 32,
        "device": "cpu",
        "kwargs": {"n_steps": 8, "batch_size": 8, "n_epochs": 1},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["train", str(path)]) == 0
    folder = tmp_path / "run" / "checkpoints"
    saved = torch.load(folder / "model_reward_state_32_steps.pt", weights_only=True)
    assert saved["counts"] == {"replayed": 32, "labelled": 8 * QUICK["pairs"], "steps": 16}

    changed = copy.deepcopy(config)
    changed["reward"]["preference"]["pairs"] = 8
    changed["rl"]["total_timesteps"] = 64
    path.write_text(yaml.safe_dump(changed))
    capsys.readouterr()
    assert cli_main(["train", str(path), "--resume"]) == 2
    assert "reward.preference.pairs: 4 then, 8 now" in capsys.readouterr().err

    config["rl"]["total_timesteps"] = 64
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["train", str(path), "--resume"]) == 0
    resumed = torch.load(folder / "model_reward_state_64_steps.pt", weights_only=True)
    # 32 steps of 2 envs in all, a round every 2 steps: a learner started afresh at the resume would count 16.
    assert resumed["counts"] == {"replayed": 64, "labelled": 16 * QUICK["pairs"], "steps": 32}


# ----------------------------------------------------------------------------- refusals
def test_episode_batches_are_refused_naming_the_fix():
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.reward.spec import RewardModelSpec
    from vlmrm_fast.stack.plan import plan_stack

    env = EnvSpec(task="cartpole", n_envs=2, episode_length=8)
    with pytest.raises(ValueError) as refused:
        plan_stack(env, RewardModelSpec(**spec_fields()), defer_rewards=True)
    assert str(refused.value) == (
        "defer_rewards (rl.episode_batch) scores single frames after the rollout; a learned preference reward learns "
        "from each step's frames as the envs step: leave defer_rewards off (rl.episode_batch: false)"
    )


def test_torchrun_is_refused_on_every_rank_naming_why(monkeypatch):
    from vlmrm_fast.distributed.jobs import check_launch
    from vlmrm_fast.reward.spec import RewardModelSpec

    spec = RewardModelSpec(**spec_fields())
    check_launch(spec)  # one process: fine
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(FieldError) as refused:
        check_launch(spec)
    assert str(refused.value) == (
        "reward.preference: torchrun splits the envs over ranks, and a learned preference reward trains one network on "
        "the frames of every env, and torchrun's ranks would each train one of their own envs' frames; not split: run "
        "it in one process (vlmrm-fast train without torchrun), with as many envs as the device holds"
    )
    check_launch(RewardModelSpec(model=JUDGE, device="cpu"))  # a judge of frames splits
    from vlmrm_fast.distributed.sharded import ShardedVecEnv
    from vlmrm_fast.envs.spec import EnvSpec

    monkeypatch.setenv("RANK", "0")
    with pytest.raises(FieldError, match=r"^reward\.preference: torchrun splits the envs over ranks"):
        ShardedVecEnv.from_specs(EnvSpec(task="cartpole", n_envs=4), spec)  # refused before any rank is joined


def test_an_answer_word_of_several_tokens_is_refused():
    with pytest.raises(FieldError) as refused:
        load(yes="11")
    assert str(refused.value).startswith("preference.yes: '11' is 2 tokens for this model's tokenizer ('1' + '1')")


def test_a_judge_of_one_image_per_prompt_is_refused(monkeypatch):
    from vlmrm_fast.models.judge import families

    row = families.JUDGE_FAMILIES["qwen2_vl"]
    monkeypatch.setitem(families.JUDGE_FAMILIES, "qwen2_vl", dataclasses.replace(row, window_input=None))
    with pytest.raises(FieldError) as refused:
        load()
    assert str(refused.value) == (
        "preference: vlmrm-tiny-qwen2-vl is a Qwen2-VL, whose template takes one image per prompt, and a preference "
        "shows the judge two frames in one prompt: use a judge family that takes several images (Qwen2-VL, "
        "Qwen2.5-VL, Qwen3-VL, SmolVLM, Idefics3)"
    )


def test_a_replay_smaller_than_a_step_is_refused():
    from vlmrm_fast import FastVLMRewardVecEnv

    with pytest.raises(FieldError) as refused:
        FastVLMRewardVecEnv("cartpole", 3, **spec_fields(replay=2))
    assert str(refused.value) == (
        "preference.replay: holds 2 frames, fewer than a step of 3 envs gives it: give at least 3"
    )


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        (
            {"criteria": [{"kind": "question", "question": "Up?"}], "target_prompts": None},
            "criteria: a learned preference reward asks its own question of two frames (preference.question, about "
            "preference.goal): leave criteria out and give preference.goal",
        ),
        (
            {"target_prompts": ["a pole upright", "a pole standing"]},
            "preference.goal: is left to the target prompt, and there are 2 ('a pole upright', 'a pole standing'): "
            "give preference.goal (what progress is toward), or one target prompt",
        ),
        ({"prompt_order": "question_first"}, "prompt_order: question_first is a single frame's cached question"),
        ({"window": {"frames": 4}}, "window: sets a window of each env's frames (docs/video-rewards.md)"),
        ({"preference": {"lable_every": 3}}, "preference.lable_every: unknown field; a preference has label_every"),
        ({"preference": {"replay": 1}}, "preference.replay: must hold at least 2 frames"),
        ({"preference": {"yes": "No"}}, "preference.no: equals yes ('No')"),
        ({"preference": {"yes": True}}, "preference.yes: YAML read the value as the boolean true"),
        ({"preference": {"goal": " "}}, "preference.goal: must say what progress is toward"),
    ],
)
def test_bad_preference_specs_are_refused_in_one_line(fields, line):
    from vlmrm_fast.reward.spec import RewardModelSpec

    with pytest.raises(FieldError) as refused:
        RewardModelSpec(**{**spec_fields(), **fields})
    assert str(refused.value).startswith(line), str(refused.value)
    assert "\n" not in str(refused.value)
