"""Named tasks: the paper's humanoid poses, CartPole and MountainCar, with their prompts.

The 600x400 classic-control frames are squashed to the encoder's square input, as
the paper's pipeline does; open_clip's centre crop would cut the flag and the
track's ends out of view.

``get_task(name)`` returns a :class:`TaskSpec`. MuJoCo tasks (``engine="mujoco"``)
run entirely in the compiled engine; the others go through gymnasium environments
(``env.render()`` frames) on the generic path. Any gymnasium id works as a task
too, with prompts given by the caller.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable

import gymnasium

from vlmrm_fast.envs import humanoid
from vlmrm_fast.envs.mountain_car import MountainCarContinuousTexturedEnv

HUMANOID_BASELINE = ("a humanoid robot",)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    name: str
    description: str
    make_env: Callable[..., gymnasium.Env]   # one gymnasium env: make_env(render_mode=..., width=..., height=...)
    target_prompts: tuple[str, ...] = ()
    baseline_prompts: tuple[str, ...] = ()
    episode_length: int | None = None         # None: the env's own time limit
    render_size: tuple[int, int] | None = None  # (height, width) the paper renders at
    engine: str = "gym"                        # "mujoco": batched physics and rendering in the core
    batch: Any = None                          # the batch engine's task glue (envs.humanoid.HumanoidBatch)
    resize_mode: str | None = None             # preprocess override; "squash" keeps a wide frame whole
    hard: bool = False                         # the paper found CLIP could not teach it


def _humanoid_env(render_mode: str | None = "rgb_array", width: int = humanoid.DEFAULT_RENDER_SIZE, height: int = humanoid.DEFAULT_RENDER_SIZE, **kwargs: Any) -> gymnasium.Env:
    return humanoid.HumanoidPoseEnv(render_mode=render_mode, width=width, height=height, **kwargs)


def _gym_env(env_id: str) -> Callable[..., gymnasium.Env]:
    def make(render_mode: str | None = "rgb_array", **kwargs: Any) -> gymnasium.Env:
        return gymnasium.make(env_id, render_mode=render_mode, **kwargs)

    return make


def _textured_mountain_car(render_mode: str | None = "rgb_array", **kwargs: Any) -> gymnasium.Env:
    return gymnasium.wrappers.TimeLimit(MountainCarContinuousTexturedEnv(render_mode=render_mode, **kwargs), 999)


# The paper's humanoid tasks (Rocamonde et al., Table 1): name, prompt, and whether it failed there.
_HUMANOID_POSES = [
    ("kneeling", "a humanoid robot kneeling", False),
    ("lotus", "a humanoid robot seated down, meditating in the lotus position", False),
    ("splits", "a humanoid robot practicing gymnastics, doing the side splits", False),
    ("arms-raised", "a humanoid robot standing up, with both arms raised", False),
    ("standing", "a humanoid robot standing up", False),
    ("one-leg", "a humanoid robot standing up on one leg", True),
    ("hands-on-hips", "a humanoid robot standing up with hands on hips", True),
    ("arms-crossed", "a humanoid robot standing up, with its arms crossed", True),
]

TASKS: dict[str, TaskSpec] = {
    f"humanoid-{pose}": TaskSpec(
        name=f"humanoid-{pose}",
        description=f"Humanoid, {pose.replace('-', ' ')}",
        make_env=_humanoid_env,
        target_prompts=(prompt,),
        baseline_prompts=HUMANOID_BASELINE,
        episode_length=humanoid.DEFAULT_EPISODE_LENGTH,
        render_size=(humanoid.DEFAULT_RENDER_SIZE, humanoid.DEFAULT_RENDER_SIZE),
        engine="mujoco",
        batch=humanoid.HumanoidBatch(),
        hard=hard,
    )
    for pose, prompt, hard in _HUMANOID_POSES
}
TASKS["cartpole"] = TaskSpec(
    name="cartpole",
    description="CartPole-v1, pole balanced upright",
    make_env=_gym_env("CartPole-v1"),
    target_prompts=("pole vertically upright on top of the cart",),
    baseline_prompts=("pole and cart",),
    episode_length=200,
    render_size=(400, 600),
    resize_mode="squash",
)
TASKS["mountain-car"] = TaskSpec(
    name="mountain-car",
    description="MountainCarContinuous-v0, car at the flag",
    make_env=_gym_env("MountainCarContinuous-v0"),
    target_prompts=("a car at the peak of the mountain, next to the yellow flag",),
    baseline_prompts=("a car in the mountain",),
    render_size=(400, 600),
    resize_mode="squash",
)
TASKS["mountain-car-textured"] = dataclasses.replace(
    TASKS["mountain-car"],
    name="mountain-car-textured",
    description="MountainCarContinuous-v0 drawn with realistic textures",
    make_env=_textured_mountain_car,
)

gymnasium.register(id="vlmrm_fast/HumanoidPose-v0", entry_point=_humanoid_env, max_episode_steps=humanoid.DEFAULT_EPISODE_LENGTH)
gymnasium.register(id="vlmrm_fast/MountainCarContinuousTextured-v0", entry_point=MountainCarContinuousTexturedEnv, max_episode_steps=999)


def get_task(name: str) -> TaskSpec:
    """A built-in task by name, or a task wrapping any registered gymnasium id."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"task must be a task name or a gymnasium id, got {name!r}")
    if name in TASKS:
        return TASKS[name]
    if name in gymnasium.registry:
        spec = gymnasium.registry[name]
        return TaskSpec(name=name, description=f"gymnasium {name}", make_env=_gym_env(name), episode_length=spec.max_episode_steps)
    close = difflib.get_close_matches(name, list(TASKS) + list(gymnasium.registry), n=4, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown task {name!r}.{hint} Built-in tasks: {', '.join(TASKS)}; or any gymnasium id.")


__all__ = ["TASKS", "TaskSpec", "get_task"]
