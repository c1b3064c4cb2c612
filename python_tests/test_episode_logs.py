"""What training logs per episode beyond the reward: success rates and every scored prompt set."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import assert_rewards_close

from vlmrm_fast.envs import get_task
from vlmrm_fast.envs.classic_control import PaperCartPoleEnv
from vlmrm_fast.envs.success import episode_success
from vlmrm_fast.training.callbacks import EpisodeStats
from vlmrm_fast.training.config import ConfigError, load_config
from vlmrm_fast.training.train import make_env


class RecordingLogger:
    def __init__(self):
        self.values: dict[str, float] = {}

    def record(self, key, value, exclude=None):
        self.values[key] = value


def test_success_rate_and_per_task_returns_by_hand():
    stats = EpisodeStats(2)
    steps = [  # (vlm, gt, dones, infos) for 2 envs
        (
            [0.5, 0.1],
            [1, 1],
            [False, False],
            [
                {"success": False, "vlm_rewards": {"a": 0.5, "b": 1.0}},
                {"success": True, "vlm_rewards": {"a": 0.1, "b": 2.0}},
            ],
        ),
        (
            [0.5, 0.2],
            [1, 0],
            [False, True],
            [
                {"success": True, "vlm_rewards": {"a": 0.5, "b": 1.0}},
                {"success": False, "vlm_rewards": {"a": 0.2, "b": 2.0}},
            ],
        ),
        (
            [0.4, 0.3],
            [1, 1],
            [True, False],
            [
                {"success": True, "vlm_rewards": {"a": 0.4, "b": 1.0}},
                {"success": True, "vlm_rewards": {"a": 0.3, "b": 2.0}},
            ],
        ),
    ]
    for vlm, gt, dones, infos in steps:
        stats.add(np.array(vlm), np.array(gt, float), np.array(dones), infos)
    logger = RecordingLogger()
    stats.record(logger)
    # env 1 ends at step 2 (last step failed: 1 of 2 steps succeeded); env 0 at step 3 (success, 2 of 3).
    assert logger.values["rollout/ep_vlm_reward_mean"] == pytest.approx(np.mean([0.3, 1.4]))
    assert logger.values["rollout/ep_gt_reward_mean"] == pytest.approx(np.mean([1, 3]))
    assert logger.values["rollout/success_at_last_step_rate"] == pytest.approx(0.5)
    assert logger.values["rollout/ep_success_fraction"] == pytest.approx(np.mean([1 / 2, 2 / 3]))
    assert logger.values["rollout/ep_vlm_reward_mean/a"] == pytest.approx(np.mean([0.3, 1.4]))
    assert logger.values["rollout/ep_vlm_reward_mean/b"] == pytest.approx(np.mean([4.0, 3.0]))
    restored = EpisodeStats(2)
    restored.restore(stats.state())
    again = RecordingLogger()
    restored.record(again)
    assert again.values == logger.values


def test_tasks_without_success_log_no_success_rate():
    stats = EpisodeStats(1)
    stats.add(np.array([1.0]), np.array([1.0]), np.array([True]), [{}])
    logger = RecordingLogger()
    stats.record(logger)
    assert not any("success" in key for key in logger.values) and "rollout/ep_vlm_reward_mean" in logger.values


def _run_episodes(stats: EpisodeStats, episodes: list[list[bool]]) -> RecordingLogger:
    """Feeds one env's episodes of per-step info["success"] through ``stats``."""
    for successes in episodes:
        for t, success in enumerate(successes):
            done = t == len(successes) - 1
            stats.add(np.zeros(1), np.zeros(1), np.array([done]), [{"success": success}])
    logger = RecordingLogger()
    stats.record(logger)
    return logger


def test_the_papers_success_per_episode_by_hand():
    """CartPole: upright on every step (a pole that falls and swings back up has failed, though its
    last step succeeds); MountainCar: at the flag at any step (even if it rolls back down)."""
    cartpole = [[True, True, True], [True, False, True], [False, False, True], [True, True, False]]
    values = _run_episodes(EpisodeStats(1, success_rule="every_step"), cartpole)
    assert values.values["rollout/success_every_step_rate"] == pytest.approx(1 / 4)
    assert values.values["rollout/success_at_last_step_rate"] == pytest.approx(3 / 4)
    assert values.values["rollout/ep_success_fraction"] == pytest.approx(np.mean([1, 2 / 3, 1 / 3, 2 / 3]))
    assert "rollout/success_any_step_rate" not in values.values
    mountain_car = [[False, False, False], [False, True, True], [False, True, False], [True, False, False]]
    stats = EpisodeStats(1, success_rule="any_step")
    values = _run_episodes(stats, mountain_car)
    assert values.values["rollout/success_any_step_rate"] == pytest.approx(3 / 4)
    assert values.values["rollout/success_at_last_step_rate"] == pytest.approx(1 / 4)
    for successes, rule in [*((e, "every_step") for e in cartpole), *((e, "any_step") for e in mountain_car)]:
        assert episode_success(successes, rule) == (all(successes) if rule == "every_step" else any(successes))
    restored = EpisodeStats(1, success_rule="any_step")
    restored.restore(stats.state())
    again = RecordingLogger()
    restored.record(again)
    assert again.values == values.values
    with pytest.raises(ValueError, match="success rule 'most_steps' is not one of every_step, any_step"):
        EpisodeStats(1, success_rule="most_steps")


def test_a_pole_that_falls_and_swings_back_up_fails_the_episode():
    """The paper's CartPole, stepped through hand-set states: upright, fallen past 12 degrees, upright again."""
    env = PaperCartPoleEnv()
    env.reset(seed=0)
    infos = []
    for angle in (0.0, 0.5, 0.0):
        env.state = np.array([0.0, 0.0, angle, 0.0])
        infos.append(env.step(0)[4])
    assert [info["success"] for info in infos] == [True, False, True]
    stats = EpisodeStats(1, success_rule=get_task("cartpole").success_rule)
    for t, info in enumerate(infos):
        stats.add(np.zeros(1), np.zeros(1), np.array([t == 2]), [info])
    logger = RecordingLogger()
    stats.record(logger)
    assert logger.values["rollout/success_every_step_rate"] == 0.0
    assert logger.values["rollout/success_at_last_step_rate"] == 1.0
    assert get_task("mountain-car").success_rule == get_task("mountain-car-textured").success_rule == "any_step"
    assert get_task("humanoid-kneeling").success_rule is None


def config(**reward):
    return {
        "output_dir": "unused",
        "seed": 0,
        "reward": {"model": "vlmrm-tiny", "device": "cpu", "alpha": 0.5, **reward},
        "env": {"task": "cartpole", "n_envs": 2, "episode_length": 5, "pipeline_chunks": 2},
        "rl": {"algorithm": "DQN", "total_timesteps": 10},
    }


def test_also_score_builds_one_env_scoring_every_prompt_set():
    cfg = load_config(config(also_score={"falling": "a pole falling over", "cart": ["a cart", "a black cart"]}))
    env = make_env(cfg)
    assert env.reward_criteria == ("target", "falling", "cart") and len(env._scorer.chunks) == 2
    env.reset()
    _, rewards, _, infos = env.step(np.array([0, 1]))
    assert set(infos[0]["vlm_rewards"]) == {"target", "falling", "cart"}
    assert_rewards_close(rewards, np.float32([info["vlm_rewards"]["target"] for info in infos]))
    assert all("success" in info for info in infos)
    env.close()


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"reward": {"also_score": {"target": "x"}}}, "the name 'target'"),
        ({"reward": {"also_score": {"x": "a pole"}}, "rl": {"episode_batch": True}}, "not with rl.episode_batch"),
        ({"env": {"renderer": "vulkan"}}, "env.renderer: 'vulkan'"),
        ({"env": {"env_reward_weight": "0.1"}}, "env.env_reward_weight: must be a finite number, got '0.1'"),
        ({"env": {"pipeline_chunks": 0}}, "env.pipeline_chunks"),
    ],
)
def test_bad_fields_are_named(fields, message):
    data = config()
    for key, value in fields.items():
        data[key] = {**data[key], **value}
    with pytest.raises(ConfigError, match=message):
        load_config(data)
