"""env.time_limit: an episode that reaches its length is truncated (SB3 bootstraps) or terminated
(the paper's code: done=1, no bootstrap), on the simulator env and on gymnasium envs."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback

from vlmrm_fast import FastVLMRewardVecEnv
from vlmrm_fast.checks import FieldError
from vlmrm_fast.envs import get_task
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.envs.time_limits import TerminalTimeLimit, with_time_limit

LENGTH = 3
N_ENVS = 2
# A continuous-action task on each path: gymnasium envs (MountainCar) and the simulator env (the humanoid).
TASKS = {"mountain-car": {}, "humanoid-kneeling": {"render_size": 32}}


def _venv(task: str, time_limit: str) -> FastVLMRewardVecEnv:
    return FastVLMRewardVecEnv(
        task,
        N_ENVS,
        model="vlmrm-tiny",
        device="cpu",
        episode_length=LENGTH,
        time_limit=time_limit,
        seed=0,
        **TASKS[task],
    )


def test_terminal_wrapper_ends_the_episode_as_a_termination():
    env = TerminalTimeLimit(get_task("cartpole").make_env(render_mode=None), 4)
    for _ in range(2):  # and again after a reset
        env.reset(seed=0)
        ends = [env.step(0)[2:4] for _ in range(4)]
        assert ends == [(False, False)] * 3 + [(True, False)]
    truncating = with_time_limit(get_task("cartpole").make_env(render_mode=None), 4)
    assert isinstance(truncating, gymnasium.wrappers.TimeLimit)
    truncating.reset(seed=0)
    assert [truncating.step(0)[2:4] for _ in range(4)][-1] == (False, True)
    with pytest.raises(ValueError, match="time_limit: 'soon' is not one of truncate, terminal"):
        with_time_limit(env, 4, "soon")


def test_time_limit_is_checked_by_the_env_spec():
    assert EnvSpec("cartpole").time_limit == "truncate"
    with pytest.raises(FieldError, match="time_limit: 'terminate' is not one of truncate, terminal"):
        EnvSpec("cartpole", time_limit="terminate")


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("time_limit", ["truncate", "terminal"])
def test_sac_replay_buffer_bootstraps_only_a_truncation(task, time_limit, one_torch_thread):
    venv = _venv(task, time_limit)
    try:
        model = SAC("MlpPolicy", venv, learning_starts=1000, buffer_size=50, seed=0, device="cpu")
        model.learn(total_timesteps=2 * LENGTH * N_ENVS)
        buffer = model.replay_buffer
        last = np.arange(2 * LENGTH) % LENGTH == LENGTH - 1  # the rows of the steps that end episodes
        rows = np.arange(2 * LENGTH)
        np.testing.assert_array_equal(buffer.dones[rows], np.repeat(last[:, None], N_ENVS, axis=1))
        np.testing.assert_array_equal(buffer.timeouts[rows], (time_limit == "truncate") * buffer.dones[rows])
        # What SAC's target uses: done=1 (no bootstrap) only for a terminal step.
        sampled = buffer._get_samples(np.flatnonzero(last))
        expected = 1.0 if time_limit == "terminal" else 0.0
        np.testing.assert_array_equal(sampled.dones.numpy(), np.full((2, 1), expected, np.float32))
    finally:
        venv.close()


class _RolloutRecorder(BaseCallback):
    """The rewards the env returned, its terminal observations, and what the rollout buffer stored,
    taken before PPO's update changes the value function."""

    def __init__(self):
        super().__init__()
        self.returned, self.terminal_obs = [], []

    def _on_step(self) -> bool:
        self.returned.append(np.array(self.locals["rewards"], np.float32))
        self.terminal_obs.append([info.get("terminal_observation") for info in self.locals["infos"]])
        return True

    def _on_rollout_end(self) -> None:
        self.stored = self.model.rollout_buffer.rewards.copy()
        obs = np.stack(self.terminal_obs[-1])
        with torch.no_grad():
            tensor = self.model.policy.obs_to_tensor(obs)[0]
            self.terminal_values = self.model.policy.predict_values(tensor).numpy().ravel()


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("time_limit", ["truncate", "terminal"])
def test_ppo_rollout_buffer_bootstraps_only_a_truncation(task, time_limit, one_torch_thread):
    venv = _venv(task, time_limit)
    try:
        model = PPO("MlpPolicy", venv, n_steps=LENGTH, batch_size=LENGTH * N_ENVS, n_epochs=1, seed=0, device="cpu")
        recorder = _RolloutRecorder()
        model.learn(total_timesteps=LENGTH * N_ENVS, callback=recorder)
        returned = np.stack(recorder.returned)
        assert all(obs is not None for obs in recorder.terminal_obs[-1]), "the last step ended every episode"
        np.testing.assert_array_equal(recorder.stored[:-1], returned[:-1])
        if time_limit == "terminal":
            np.testing.assert_array_equal(recorder.stored[-1], returned[-1])
        else:
            assert np.all(np.abs(recorder.terminal_values) > 1e-6), "a bootstrap that shows"
            np.testing.assert_allclose(
                recorder.stored[-1], returned[-1] + model.gamma * recorder.terminal_values, rtol=1e-5, atol=1e-6
            )
    finally:
        venv.close()
