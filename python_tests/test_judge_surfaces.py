"""A generative VLM judge through every surface a CLIP reward model has: the VecEnv (gymnasium envs and the
simulator env's renderer buffer), the scoring schedule, gymnasium's make_vec, episode-batch scoring, the
training config, `vlmrm-fast evaluate` and `landscape`, `vlmrm-fast download`."""

from __future__ import annotations

import csv
import json
import pathlib
import warnings

import numpy as np
import pytest
import yaml
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv
from vlmrm_fast.reward import QuestionCriterion, load_reward_model

JUDGE = "vlmrm-tiny-qwen2-vl"


def test_vec_env_scores_the_frames_it_steps_to():
    """Gymnasium envs (CartPole) and the simulator env's frames where the renderer lends them: each step's
    reward is the judge's reward of the frames of the reached state."""
    for task, options in (("cartpole", {}), ("humanoid-kneeling", {"render_size": 64, "renderer": "egl"})):
        env = FastVLMRewardVecEnv(task, 3, model=JUDGE, image_size=112, env_reward_weight=0.0, seed=0, **options)
        try:
            env.reset()
            actions = np.stack([env.action_space.sample() for _ in range(3)])
            _, rewards, _, _ = env.step(actions)
            frames = env.venv.last_frames() if task != "cartpole" else np.stack(env.get_images())
            assert_rewards_close(rewards, env.reward_model(frames).numpy(), err_msg=task)
        finally:
            env.close()


def test_score_every_runs_the_judge_on_the_due_steps_only():
    env = FastVLMRewardVecEnv(
        "humanoid-kneeling",
        2,
        model=JUDGE,
        render_size=48,
        image_size=56,
        episode_length=6,
        score_every=3,
        between_scores="hold",
        env_reward_weight=0.0,
    )
    calls = []
    encode = env.reward_model.adapter.encode
    env.reward_model.adapter.encode = lambda pixels: calls.append(len(pixels)) or encode(pixels)
    try:
        env.reset()
        zero = np.zeros((2, *env.action_space.shape), np.float32)
        rewards = [env.step(zero)[1] for _ in range(6)]
    finally:
        env.close()
    assert calls == [2, 2], "steps 3 and 6 of the episode are scored, the others are not"
    assert np.all(rewards[0] == 0) and np.all(rewards[1] == 0)  # hold: 0 before the first score
    np.testing.assert_array_equal(rewards[3], rewards[2])
    np.testing.assert_array_equal(rewards[4], rewards[2])


def test_make_vec_and_episode_batch_scoring():
    import gymnasium

    from vlmrm_fast.reward.batch_scoring import FrameBatchScorer

    env = gymnasium.make_vec(
        "vlmrm_fast/humanoid-kneeling",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        model=JUDGE,
        image_size=56,
        render_size=48,
        max_episode_steps=4,
    )
    try:
        env.reset(seed=0)
        _, rewards, _, _, _ = env.step(np.zeros(env.action_space.shape, np.float32))
        frames = np.stack(env.render())
        model = env.reward_model
        assert_rewards_close(rewards, model(frames).numpy())
        frames = np.random.default_rng(0).integers(0, 256, (10, 40, 60, 3), dtype=np.uint8)
        scorer = FrameBatchScorer(model, 4)
        for start in range(0, 10, 3):
            scorer.add(frames[start : start + 3])
        assert_rewards_close(scorer.finish(), model(frames).numpy())
    finally:
        env.close()


def test_evaluate_and_landscape_score_a_judge(tmp_path):
    from vlmrm_fast.cli import main as cli_main
    from vlmrm_fast.evaluation.dataset import StateDataset
    from vlmrm_fast.evaluation.evaluate import evaluate_models
    from vlmrm_fast.evaluation.landscape import reward_landscape

    ds = StateDataset.sample("cartpole", 12, seed=0, size=(40, 60))
    ds = ds.with_labels((np.abs(ds.states[:, 2]) < 0.05).astype(float))
    model = load_reward_model(JUDGE, target_prompts="a pole", device="cpu", image_size=56)
    (m,) = evaluate_models(ds, [model], (0.0, 0.5)).models
    question = QuestionCriterion.about("pole vertically upright on top of the cart")
    model.set_criteria([question], multi_criteria=True)
    assert m.model == JUDGE and m.alphas == (0.0,) and m.epic.shape == (1,)
    assert_rewards_close(m.rewards, model(ds.frames).numpy())
    land = reward_landscape(model, "cartpole", "pole_angle", n_points=3, size=(40, 60))
    assert land.questions == (question.name,) and land.rewards.shape == (3, 1)

    data, out = tmp_path / "cp.npz", tmp_path / "eval"
    ds.save(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli_main(["evaluate", str(data), "--models", JUDGE, "--device", "cpu", "-o", str(out)]) == 0
        argv = ["landscape", "cartpole", "--variable", "pole_angle", "--model", JUDGE, "--points", "3"]
        assert cli_main([*argv, "--size", "40", "60", "--device", "cpu", "-o", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "epic.csv")))
    assert [r["model"] for r in rows] == [JUDGE]
    header = next(csv.reader(open(out / "landscape_cartpole_pole_angle.csv")))
    assert header == ["pole_angle", f"reward_{question.name}"]


CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("task", ["humanoid-kneeling", "cartpole"])
def test_ppo_trains_with_the_judge_from_a_config(tmp_path, task):
    from stable_baselines3 import PPO

    from vlmrm_fast.training.config import load_config
    from vlmrm_fast.training.train import train

    config = yaml.safe_load((CONFIGS / "judge-quickstart.yaml").read_text())
    assert config["reward"]["model"] == JUDGE and config["rl"]["algorithm"] == "PPO"
    config["output_dir"] = str(tmp_path / "run")
    config["env"] = {
        "task": task,
        "n_envs": 2,
        "episode_length": 16,
        **({"render_size": 64} if task != "cartpole" else {}),
    }
    config["rl"].update(total_timesteps=64, device="cpu", kwargs={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    config["logging"] = {"checkpoint_every": 64, "video_every": 0}
    assert train(load_config(config)) == 0
    assert PPO.load(tmp_path / "run" / "final_model.zip").num_timesteps >= 64


def test_download_of_a_judge(tmp_path, monkeypatch, capsys):
    from vlmrm_fast.cli import main as cli_main

    assert cli_main(["download", JUDGE]) == 2
    assert "is built in (random weights): nothing to download" in capsys.readouterr().err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli_main(["download", "Qwen/Qwen2-VL-2B-Instruct", "--cache-dir", str(tmp_path)]) == 2
    assert "`vlmrm-fast download Qwen/Qwen2-VL-2B-Instruct --cache-dir" in capsys.readouterr().err


def judge_config(tmp_path, criteria_yaml: str) -> pathlib.Path:
    """A training config of the tiny judge whose reward.criteria is the YAML text given, written as a user would."""
    path = tmp_path / "judge.yaml"
    path.write_text(
        "env: {task: cartpole, n_envs: 2}\n"
        "reward:\n"
        f"  model: {JUDGE}\n"
        "  criteria:\n" + "".join(f"    {line}\n" for line in criteria_yaml.strip().splitlines())
    )
    return path


@pytest.mark.parametrize(
    ("criteria_yaml", "line"),
    [
        (  # as the docs wrote it: the keys yes and no unquoted are YAML booleans, so are the words
            "- kind: question\n  question: Is the pole upright?\n  yes: Yes\n  no: No",
            "reward.criteria[0].yes: YAML read the value as the boolean true (unquoted yes, no, true, false, on and off "
            "are booleans in YAML), and the answer word's spelling with it (the token of 'Yes' is not that of 'yes'); "
            "quote the word: yes: 'Yes'",
        ),
        (
            "- kind: question\n  question: Up?\n  scroe: log_odds",
            "reward.criteria[0].scroe: unknown field of a question criterion; did you mean 'score'?",
        ),
        (
            "- kind: question\n  score: log_odds",
            "reward.criteria[0].question: required field is missing (a question criterion needs question)",
        ),
        (
            "- question: Up?\n- question: ''",
            "reward.criteria[1].question: is empty; ask about the frame, e.g. 'Is the pole upright?'",
        ),
        (
            "- question: Up?\n  score: p",
            "reward.criteria[0].score: 'p' is unknown; use one of 'yes_vs_no', 'log_p_yes', 'log_odds'",
        ),
        (
            "- question: Up?\n  no: ''",
            "reward.criteria[0].no: must be one answer word without spaces around it, got ''",
        ),
        (
            "- question: Up?\n  score: yes",
            "reward.criteria[0].score: YAML read the value as the boolean true (unquoted yes, no, true, false, on and off "
            "are booleans in YAML); use one of 'yes_vs_no', 'log_p_yes', 'log_odds'",
        ),
        (
            "kind: question\nquestion: Up?",
            "reward.criteria: must be a list of criteria, got a mapping with keys kind, question: write each criterion as one item "
            "of a list ('- kind: question' in YAML, the criterion's other fields under it)",
        ),
        (
            "- kind: questions\n  question: Up?",
            "reward.criteria[0].kind: 'questions' is unknown; use one of 'goal_baseline', 'binary', 'question'",
        ),
    ],
)
def test_a_judges_config_lines_are_refused_at_their_place(tmp_path, criteria_yaml, line):
    from vlmrm_fast.training.config import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config(judge_config(tmp_path, criteria_yaml))
    assert str(info.value) == line


def test_the_answer_words_quoted_under_unquoted_keys_are_read():
    """yes: 'Yes' with the key unquoted: YAML makes the key the boolean true, which can only mean the field yes."""
    from vlmrm_fast.reward.kinds import as_criteria

    config = yaml.safe_load("- question: Up?\n  yes: 'True'\n  no: 'False'\n  score: log_odds")
    (task,) = as_criteria(config)
    assert (task.yes, task.no, task.score) == ("True", "False", "log_odds")


def test_the_docs_judge_configs_load():
    """Every YAML block of docs/judge.md that configures a reward loads as it is written."""
    from vlmrm_fast.reward.spec import RewardModelSpec

    docs = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "judge.md").read_text()
    blocks = [block.split("```", 1)[0] for block in docs.split("```yaml\n")[1:]]
    assert blocks
    for block in blocks:
        reward = yaml.safe_load(block)["reward"]
        RewardModelSpec(**reward)


def test_a_judge_run_records_its_prompt_order_and_an_older_one_resumes_only_in_its_own():
    """The run identity holds the order a judge asks in (image first when the config leaves it out); a checkpoint
    written before the order was a field asked question first, so resuming it with the new default is refused
    naming the field, and resumes with prompt_order: question_first."""
    from vlmrm_fast.training.config import identity_differences, load_config, resolved, run_identity, upgraded_identity

    config = {"env": {"task": "cartpole", "n_envs": 2}, "reward": {"model": JUDGE, "criteria": [{"question": "Up?"}]}}
    identity = run_identity(resolved(load_config(config)))
    assert identity["reward"]["prompt_order"] == "image_first"
    older = json.loads(json.dumps(identity))
    for field in ("prompt_order", "do_image_splitting", "longest_edge"):
        del older["reward"][field]
    assert identity_differences(upgraded_identity(older), identity) == [
        "reward.prompt_order: 'question_first' then, 'image_first' now"
    ]
    config["reward"]["prompt_order"] = "question_first"
    assert identity_differences(upgraded_identity(older), run_identity(resolved(load_config(config)))) == []
    clip = {"env": {"task": "cartpole", "n_envs": 2}, "reward": {"model": "vlmrm-tiny"}}
    clip_identity = run_identity(resolved(load_config(clip)))
    assert clip_identity["reward"]["prompt_order"] is None
    for field in ("prompt_order", "do_image_splitting", "longest_edge"):
        del clip_identity["reward"][field]
    assert identity_differences(upgraded_identity(clip_identity), run_identity(resolved(load_config(clip)))) == []


def test_a_config_that_still_writes_tasks_is_told_where_they_went():
    """A reward's criteria were its tasks: the old key is refused in one line naming the new one."""
    from vlmrm_fast.training.config import ConfigError, load_config

    config = {"env": {"task": "cartpole", "n_envs": 2}, "reward": {"model": JUDGE, "tasks": [{"question": "Up?"}]}}
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value) == "reward.tasks: moved; write reward.criteria (the same list: each one's kind and fields)"
