"""What the package relies on in Stable-Baselines3 beyond its documented API, one test per reach.

pyproject.toml bounds the version (``stable-baselines3>=2.6,<3``: ``dump_logs`` is public from 2.6);
each test here fails on an SB3 that changes what the package assumes, naming the code that
assumes it.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from stable_baselines3 import DQN, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger, TensorBoardOutputFormat
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper


def test_tensorboard_writer_state_is_what_the_resume_writer_sets(tmp_path):
    """training/tensorboard.py `TensorBoardWriter` builds SB3's TensorBoard writer with a purge step, setting the
    state SB3's own __init__ sets instead of calling it."""
    from vlmrm_fast.training.tensorboard import TensorBoardWriter

    stock = TensorBoardOutputFormat(str(tmp_path / "stock"))
    ours = TensorBoardWriter(str(tmp_path / "ours"), purge_step=5)
    try:
        assert set(vars(stock)) == set(vars(ours)) == {"writer", "_is_closed"}
        ours.write({"x": 1.0}, {"x": None}, step=7)  # SB3's write() runs on that state
    finally:
        stock.close()
        ours.close()


class _CountResets(VecEnvWrapper):
    def __init__(self, venv):
        super().__init__(venv)
        self.resets = 0

    def reset(self):
        self.resets += 1
        return self.venv.reset()

    def step_wait(self):
        return self.venv.step_wait()


def test_a_model_without_last_obs_starts_new_episodes():
    """training/train.py `_prepare_resumed`: a resumed model with ``_last_obs = None`` resets its env
    on learn(reset_num_timesteps=False); a loaded model otherwise continues from the saved obs."""
    env = _CountResets(DummyVecEnv([lambda: gymnasium.make("CartPole-v1")]))
    model = DQN("MlpPolicy", env, learning_starts=100, buffer_size=200, device="cpu", seed=0)
    model.learn(8)
    resets = env.resets
    model.learn(8, reset_num_timesteps=False)
    assert env.resets == resets, "SB3 continues from _last_obs"
    model._last_obs = None
    model.learn(8, reset_num_timesteps=False)
    assert env.resets == resets + 1, "SB3 resets when _last_obs is None"
    env.close()


class _Positions(BaseCallback):
    def __init__(self):
        super().__init__()
        self.positions: list[int] = []

    def _on_step(self) -> bool:
        self.positions.append(int(self.model.replay_buffer.pos))
        return True


def test_the_replay_buffer_row_of_a_step_is_its_position_at_on_step():
    """training/callbacks.py `EpisodeBatchRewards`: SB3 calls on_step before it stores the step, so
    ``replay_buffer.pos`` then is the step's row of ``replay_buffer.rewards`` (buffer_size // n_envs rows, n_envs)."""
    env = DummyVecEnv([lambda: gymnasium.make("Pendulum-v1")] * 2)
    model = SAC("MlpPolicy", env, learning_starts=100, buffer_size=50, device="cpu", seed=0)
    record = _Positions()
    model.learn(12, callback=record)
    assert record.positions == list(range(6))
    buffer = model.replay_buffer
    assert buffer.buffer_size == 25 and buffer.rewards.shape == (25, 2) and buffer.pos == 6  # 50 transitions, 2 envs
    assert np.all(buffer.rewards[:6] != 0) and np.all(buffer.rewards[6:] == 0)
    env.close()


def test_off_policy_dump_logs_reads_the_episode_returns_it_keeps():
    """training/callbacks.py `EpisodeBatchLogs`: ``rollout/ep_rew_mean`` is the mean of the ``"r"``
    entries of ``model.ep_info_buffer``, written by the public ``dump_logs()``."""
    env = DummyVecEnv([lambda: gymnasium.make("Pendulum-v1")])
    model = SAC("MlpPolicy", env, learning_starts=100, buffer_size=50, device="cpu", seed=0)
    model.learn(2)
    logger = Logger(None, [])
    recorded: dict = {}
    logger.dump = lambda step=0: recorded.update(logger.name_to_value)  # type: ignore[method-assign]
    model.set_logger(logger)
    model.ep_info_buffer.clear()
    model.ep_info_buffer.extend([{"r": 3.0, "l": 5, "t": 0.1}, {"r": 5.0, "l": 5, "t": 0.2}])
    model.dump_logs()
    assert recorded["rollout/ep_rew_mean"] == 4.0
    env.close()
