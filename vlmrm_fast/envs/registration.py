"""The package's envs under gymnasium's registry: the built-in tasks as ``vlmrm_fast/<task>``
(``gymnasium.make`` gives one env, ``gymnasium.make_vec`` a vector env with VLM rewards,
docs/gymnasium.md), and the envs the tasks are made of under their own ids. Importing
``vlmrm_fast.envs`` registers them (``gymnasium.make_vec("vlmrm_fast.envs:vlmrm_fast/...")``).
"""

from __future__ import annotations

from typing import Any

import gymnasium

from vlmrm_fast.envs import humanoid
from vlmrm_fast.envs.classic_control import PAPER_EPISODE_LENGTH, PaperCartPoleEnv, PaperMountainCarContinuousEnv
from vlmrm_fast.envs.mountain_car import MountainCarContinuousTexturedEnv, PaperMountainCarContinuousTexturedEnv
from vlmrm_fast.envs.tasks import GYM_NAMESPACE, TASKS, humanoid_env

gymnasium.register(
    id="vlmrm_fast/HumanoidPose-v0", entry_point=humanoid_env, max_episode_steps=humanoid.DEFAULT_EPISODE_LENGTH
)
gymnasium.register(
    id="vlmrm_fast/MountainCarContinuousTextured-v0",
    entry_point=MountainCarContinuousTexturedEnv,
    max_episode_steps=999,
)
gymnasium.register(
    id="vlmrm_fast/PaperCartPole-v0", entry_point=PaperCartPoleEnv, max_episode_steps=PAPER_EPISODE_LENGTH
)
gymnasium.register(
    id="vlmrm_fast/PaperMountainCarContinuous-v0",
    entry_point=PaperMountainCarContinuousEnv,
    max_episode_steps=PAPER_EPISODE_LENGTH,
)
gymnasium.register(
    id="vlmrm_fast/PaperMountainCarContinuousTextured-v0",
    entry_point=PaperMountainCarContinuousTexturedEnv,
    max_episode_steps=PAPER_EPISODE_LENGTH,
)


def make_task_env(task: str, **kwargs: Any) -> gymnasium.Env:
    """``gymnasium.make``'s entry point of the built-in task ``task`` (registered as vlmrm_fast/<task>): one
    plain env, without VLM rewards (a reward model's argument is refused, naming where it belongs)."""
    from vlmrm_fast.encoders import BACKEND_OPTIONS
    from vlmrm_fast.reward.spec import spec_fields

    reward_arguments = (
        spec_fields() | {"reward_model", "reward_spec"} | {o for v in BACKEND_OPTIONS.values() for o in v}
    )
    given = sorted(set(kwargs) & reward_arguments)
    if given:
        raise TypeError(
            f"{given[0]}=: a reward model's argument, but gymnasium.make and make_vec(vectorization_mode='sync' or "
            f"'async') make the task's plain envs, without VLM rewards; for VLM rewards use "
            f"gymnasium.make_vec('vlmrm_fast/{task}', ...) with its default vectorization_mode "
            f"('vector_entry_point'), or wrap the vector env in vlmrm_fast.VLMRewardVectorWrapper"
        )
    return TASKS[task].make_env(**kwargs)


# Every built-in task under gymnasium's registry as vlmrm_fast/<task>: gymnasium.make gives one env,
# gymnasium.make_vec a vector env with VLM rewards (docs/gymnasium.md). The entry points are named,
# not imported: the vector one lives above this package (stack/gym_vector.py builds on the reward stack).
# A task named by another namespace's id (dm_control/walker-walk-v0) goes in as vlmrm_fast/dm_control-walker-walk-v0.
for _name, _spec in TASKS.items():
    gymnasium.register(
        id=f"{GYM_NAMESPACE}/{_name.replace('/', '-')}",
        entry_point=f"{__name__}:make_task_env",
        vector_entry_point="vlmrm_fast.stack.gym_vector:make_vector_env",
        max_episode_steps=_spec.episode_length,
        kwargs={"task": _name},
    )
