"""How an episode that reaches its length ends: a truncation or a termination.

``time_limit="truncate"`` (the default) ends it as gymnasium's ``TimeLimit`` does: the last step
is *truncated*, SB3 stores it with ``TimeLimit.truncated=True`` and bootstraps from the value of
the state it reached, because the task itself would have gone on. That is the correct practice
for a limit that only bounds the episodes.

``time_limit="terminal"`` ends it as the paper's code did (Rocamonde et al.'s envs set
``terminated = num_steps >= episode_length``): the last step is *terminal*, SB3 stores done=1
and does not bootstrap, so the agent values the states near the end as if nothing came after
them. It matters most with a long horizon (MountainCar's gamma 0.9999). Use it to reproduce
the paper's runs.

Which frame the last step of an episode is scored on (``score_terminal_on``): ``"terminal_state"``
(the default), the state that ended the episode, what the step reached; ``"reset_frame"``, the next
episode's first state, as the paper's code scored it by accident of its vector env (SB3's
``SubprocVecEnv`` resets a finished env inside its step, and the code's ``get_images()`` came after):
about 1% of the humanoid's transitions and 0.5% of the classic-control ones were scored on a pose
the agent did not reach. Only for reproducing those rewards exactly (docs/paper.md).
"""

from __future__ import annotations

import gymnasium

from vlmrm_fast.checks import one_of

#: The ways an episode can end at its length (see the module docstring).
TIME_LIMITS = ("truncate", "terminal")
#: The frames an episode's last step can be scored on (see the module docstring).
SCORE_TERMINAL_ON = ("terminal_state", "reset_frame")


class TerminalTimeLimit(gymnasium.Wrapper):
    """Ends an episode after ``max_episode_steps`` steps as a termination (``terminated=True``,
    ``truncated=False``), as the paper's envs did; an earlier end of the env passes through."""

    def __init__(self, env: gymnasium.Env, max_episode_steps: int):
        super().__init__(env)
        self.max_episode_steps = int(max_episode_steps)
        self._elapsed = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed += 1
        if self._elapsed >= self.max_episode_steps:
            terminated, truncated = True, False
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        self._elapsed = 0
        return self.env.reset(**kwargs)


def with_time_limit(env: gymnasium.Env, max_episode_steps: int, time_limit: str = "truncate") -> gymnasium.Env:
    """``env`` ending its episodes after ``max_episode_steps`` steps, as ``time_limit`` says."""
    if one_of(time_limit, "time_limit", TIME_LIMITS) == "terminal":
        return TerminalTimeLimit(env, max_episode_steps)
    return gymnasium.wrappers.TimeLimit(env, max_episode_steps)
