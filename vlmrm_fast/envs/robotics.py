"""gymnasium-robotics' manipulation tasks (Franka Kitchen, Fetch, the Adroit and Shadow hands) as tasks, with
prompts for their goals, drawn by the batch renderers (``envs.mujoco_drawing``'s ``gymnasium`` family).

    FastVLMRewardVecEnv("kitchen-microwave", 8)      # Franka Kitchen, the microwave task alone
    FastVLMRewardVecEnv("FetchPush-v4", 8)

Each row makes gymnasium-robotics' env by its gymnasium id, its dictionary observation flattened
(gymnasium's ``FlattenObservation``, for SB3's ``MlpPolicy``; the goal-conditioned parts stay in it);
rewards, terminations and resets are the env's own. Franka Kitchen's rows set ``tasks_to_complete``
to one sub-task each, whose prompt says what the finished sub-task looks like; ``FrankaKitchen-v1``
keeps all seven.

MuJoCo 4.0.0 and gymnasium-robotics 1.4.2: its joint helpers (``utils.mujoco_utils``'s ``get_joint_qpos``,
``get_joint_qvel``, ``set_joint_qpos``, ``set_joint_qvel``) check ``joint_type in (mjJNT_HINGE,
mjJNT_SLIDE)``; MuJoCo 4's enums no longer compare equal to the numpy integers ``model.jnt_type`` holds
when they stand on the left, so the check fails for every hinge and slide joint and Fetch, Kitchen and
the Shadow hands fail at construction. :func:`fit_to_mujoco` gives those four helpers the joint type as
an int (the same values, written here; nothing else of the module is touched).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np

from vlmrm_fast.envs.extras import require

DEFAULT_RENDER_SIZE = 224


@dataclasses.dataclass(frozen=True)
class RoboticsTask:
    name: str
    env_id: str
    target: str
    baseline: str
    episode_length: int
    kwargs: tuple[tuple[str, Any], ...] = ()


_KITCHEN = "a robot arm in a kitchen"
_KITCHEN_TASKS = {
    "microwave": "a robot arm in a kitchen, the microwave door open",
    "kettle": "a robot arm in a kitchen, the kettle moved onto the back burner",
    "light-switch": "a robot arm in a kitchen, the light switched on",
    "slide-cabinet": "a robot arm in a kitchen, the sliding cabinet door open",
    "hinge-cabinet": "a robot arm in a kitchen, the hinged cabinet door open",
    "bottom-burner": "a robot arm in a kitchen, the bottom burner knob turned on",
    "top-burner": "a robot arm in a kitchen, the top burner knob turned on",
}
_FETCH = "a robot arm and a table"
_ADROIT = "a robot hand"
_SHADOW = "a robot hand"

TASKS: dict[str, RoboticsTask] = {
    row.name: row
    for row in (
        RoboticsTask(
            "FrankaKitchen-v1",
            "FrankaKitchen-v1",
            "a robot arm in a kitchen, the microwave and cabinets open, the kettle moved, the light and burners on",
            _KITCHEN,
            280,
        ),
        *(
            RoboticsTask(
                f"kitchen-{task}",
                "FrankaKitchen-v1",
                prompt,
                _KITCHEN,
                280,
                (("tasks_to_complete", (task.replace("-", " "),)),),
            )
            for task, prompt in _KITCHEN_TASKS.items()
        ),
        RoboticsTask("FetchReach-v4", "FetchReach-v4", "a robot arm with its gripper at the red target", _FETCH, 50),
        RoboticsTask("FetchPush-v4", "FetchPush-v4", "a robot arm pushing the block onto the red target", _FETCH, 50),
        RoboticsTask("FetchSlide-v4", "FetchSlide-v4", "a robot arm sliding the puck onto the red target", _FETCH, 50),
        RoboticsTask(
            "FetchPickAndPlace-v4",
            "FetchPickAndPlace-v4",
            "a robot arm holding the block up at the red target",
            _FETCH,
            50,
        ),
        RoboticsTask("AdroitHandDoor-v1", "AdroitHandDoor-v1", "a robot hand opening the door", _ADROIT, 200),
        RoboticsTask("AdroitHandHammer-v1", "AdroitHandHammer-v1", "a robot hand hammering the nail in", _ADROIT, 200),
        RoboticsTask(
            "AdroitHandPen-v1", "AdroitHandPen-v1", "a robot hand turning the pen like the target pen", _ADROIT, 100
        ),
        RoboticsTask(
            "AdroitHandRelocate-v1",
            "AdroitHandRelocate-v1",
            "a robot hand moving the ball to the green target",
            _ADROIT,
            200,
        ),
        RoboticsTask(
            "HandReach-v3", "HandReach-v3", "a robot hand touching the targets with its fingertips", _SHADOW, 50
        ),
        RoboticsTask(
            "HandManipulateBlock-v1",
            "HandManipulateBlock-v1",
            "a robot hand turning the block like the target block",
            _SHADOW,
            100,
        ),
        RoboticsTask(
            "HandManipulateEgg-v1",
            "HandManipulateEgg-v1",
            "a robot hand turning the egg like the target egg",
            _SHADOW,
            100,
        ),
        RoboticsTask(
            "HandManipulatePen-v1",
            "HandManipulatePen-v1",
            "a robot hand turning the pen like the target pen",
            _SHADOW,
            100,
        ),
    )
}


# ------------------------------------------------------------------ MuJoCo 4.0.0
def _joint(model: Any, name: str) -> tuple[int, int]:
    import mujoco

    joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if joint == -1:
        raise ValueError(f"joint {name!r} is not part of the model")
    return joint, int(model.jnt_type[joint])


def _widths() -> tuple[dict[int, int], dict[int, int]]:
    """Values per joint type in qpos and in qvel (a free joint 7 and 6, a ball 4 and 3, a hinge or slide 1)."""
    import mujoco

    kind = mujoco.mjtJoint
    free, ball, slide, hinge = (int(k) for k in (kind.mjJNT_FREE, kind.mjJNT_BALL, kind.mjJNT_SLIDE, kind.mjJNT_HINGE))
    return {free: 7, ball: 4, slide: 1, hinge: 1}, {free: 6, ball: 3, slide: 1, hinge: 1}


def _span(model: Any, name: str, velocity: bool) -> slice:
    joint, kind = _joint(model, name)
    start = int(model.jnt_dofadr[joint] if velocity else model.jnt_qposadr[joint])
    return slice(start, start + _widths()[1 if velocity else 0][kind])


def _setter(velocity: bool) -> Callable[[Any, Any, str, Any], None]:
    def set_joint(model: Any, data: Any, name: str, value: Any) -> None:
        span = _span(model, name, velocity)
        value = np.array(value)
        if span.stop - span.start > 1 and value.shape != (span.stop - span.start,):
            raise ValueError(f"joint {name!r} takes {span.stop - span.start} values, got shape {value.shape}")
        (data.qvel if velocity else data.qpos)[span] = value

    return set_joint


def _getter(velocity: bool) -> Callable[[Any, Any, str], np.ndarray]:
    def get_joint(model: Any, data: Any, name: str) -> np.ndarray:
        return (data.qvel if velocity else data.qpos)[_span(model, name, velocity)].copy()

    return get_joint


def fit_to_mujoco() -> bool:
    """Gives gymnasium-robotics' joint helpers the joint type as an int (see the module docstring); True
    when it changed them now, False when they had it already."""
    from gymnasium_robotics.utils import mujoco_utils

    if getattr(mujoco_utils, "_vlmrm_fitted", False):
        return False
    mujoco_utils.get_joint_qpos = _getter(velocity=False)
    mujoco_utils.get_joint_qvel = _getter(velocity=True)
    mujoco_utils.set_joint_qpos = _setter(velocity=False)
    mujoco_utils.set_joint_qvel = _setter(velocity=True)
    mujoco_utils._vlmrm_fitted = True
    return True


def make_env(name: str) -> Callable[..., gymnasium.Env]:
    """A factory of task ``name``'s env (see the module docstring): ``make(render_mode=, width=, height=)``."""
    row = TASKS[name]

    def make(
        render_mode: str | None = "rgb_array",
        width: int = DEFAULT_RENDER_SIZE,
        height: int = DEFAULT_RENDER_SIZE,
        **kwargs: Any,
    ) -> gymnasium.Env:
        (robotics,) = require("robotics", f"task {name!r}")
        fit_to_mujoco()
        gymnasium.register_envs(robotics)
        options = {key: list(value) if isinstance(value, tuple) else value for key, value in row.kwargs}
        env = gymnasium.make(
            row.env_id,
            render_mode=render_mode,
            width=width,
            height=height,
            **{**options, **kwargs},
        )
        return gymnasium.wrappers.FlattenObservation(env)

    return make
