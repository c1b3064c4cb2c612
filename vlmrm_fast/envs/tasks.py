"""The task registry: every built-in task as a :class:`TaskSpec` (prompts, the gymnasium env factory,
episode length, frame size, the simulator env's vector task), found by name with :func:`get_task` (a
humanoid scene after an ``@``, any registered gymnasium id). What the tasks are is said in the
package's docstring (``vlmrm_fast/envs/__init__.py``); their registration with gymnasium is
``envs/registration.py``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium

from vlmrm_fast.envs import dm_control, humanoid, mujoco_suite, paper_assets, robotics
from vlmrm_fast.envs.classic_control import PAPER_EPISODE_LENGTH, PaperCartPoleEnv, PaperMountainCarContinuousEnv
from vlmrm_fast.envs.mountain_car import PaperMountainCarContinuousTexturedEnv
from vlmrm_fast.envs.time_limits import with_time_limit

if TYPE_CHECKING:
    from vlmrm_fast.envs.vector_task import VectorTask

HUMANOID_BASELINE = ("a humanoid robot",)
#: gymnasium's namespace of the package's envs: the built-in tasks are registered as vlmrm_fast/<task>
GYM_NAMESPACE = "vlmrm_fast"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    name: str
    description: str
    make_env: Callable[..., gymnasium.Env]  # one gymnasium env: make_env(render_mode=..., width=..., height=...)
    target_prompts: tuple[str, ...] = ()
    baseline_prompts: tuple[str, ...] = ()
    episode_length: int | None = None  # None: the env's own time limit
    render_size: tuple[int, int] | None = None  # (height, width) the paper renders at
    # A MuJoCo task's rules over every env at once, what the simulator env runs (envs.vector_task.VectorTask, e.g.
    # envs.humanoid.HumanoidVectorTask); None: gymnasium envs only.
    vector_task: VectorTask | None = None
    resize_mode: str | None = None  # preprocess override; "squash" keeps a wide frame whole
    hard: bool = False  # the paper found CLIP could not teach it
    scene: str | None = None  # humanoid tasks: the scene frames are drawn in (envs.humanoid.SCENES)
    success_rule: str | None = None  # the paper's episode success: "every_step" or "any_step" of info["success"]
    asset_files: tuple[str, ...] = ()  # the paper's image files its look can load (envs.paper_assets)
    scene_assets: str | None = None  # the folder they are loaded from; None: the generated textures
    # The family of MuJoCo env the batch renderers draw this task's gymnasium envs as (envs.mujoco_drawing:
    # "gymnasium", "dm_control"); None: not known to be one (its envs draw their own frames).
    drawing: str | None = None
    extra: str | None = None  # the optional suite its envs need (envs.extras: "dm_control", "robotics")

    def make(
        self,
        *,
        render_mode: str | None = "rgb_array",
        render_size: tuple[int, int] | None = None,
        episode_length: int | None = None,
        time_limit: str = "truncate",
        solver: str | None = None,
        **env_kwargs: Any,
    ) -> gymnasium.Env:
        """One gymnasium env of the task: frames of ``render_size`` (height, width; MuJoCo tasks' envs
        take it, classic-control envs draw their own size), episodes of ``episode_length`` steps
        (default the task's; None and no default: the env's own limit) that end as ``time_limit``
        says (``envs.time_limits``: a truncation or a termination); a MuJoCo task's model runs with
        ``solver`` (None: its own)."""
        if render_size is not None and (self.vector_task is not None or self.drawing is not None):
            env_kwargs.setdefault("height", render_size[0])
            env_kwargs.setdefault("width", render_size[1])
        if solver is not None and self.vector_task is not None:
            env_kwargs["solver"] = solver
        env = self.make_env(render_mode=render_mode, **env_kwargs)
        limit = episode_length or self.episode_length
        return with_time_limit(env, limit, time_limit) if limit else env

    def with_scene_assets(self, folder: str | None) -> TaskSpec:
        """This task drawn with the paper's image files from ``folder`` (None: as it is). Refuses a
        task that draws none of them, and a folder that lacks one (naming how to get them)."""
        if folder is None:
            return self
        if not self.asset_files:
            takers = ", ".join(name for name, task in TASKS.items() if task.asset_files)
            raise ValueError(
                f"scene_assets: task {self.name!r} draws none of the paper's image files; the tasks that do are "
                f"{takers} (humanoid tasks in the paper or paper-textures scene)"
            )
        folder = paper_assets.normalized_folder(folder)
        missing = paper_assets.missing_assets(folder, self.asset_files)
        if missing:
            raise FileNotFoundError(
                f"scene_assets: {folder} lacks {', '.join(missing)} (looked in the folder and where the paper's "
                f"repository keeps them); {paper_assets.HOW_TO_GET}"
            )
        make_env = self.make_env

        def make(render_mode: str | None = "rgb_array", **kwargs: Any) -> gymnasium.Env:
            return make_env(render_mode=render_mode, scene_assets=folder, **kwargs)

        vector_task = self.vector_task.with_scene_assets(folder) if self.vector_task is not None else None
        return dataclasses.replace(self, make_env=make, vector_task=vector_task, scene_assets=folder)


def humanoid_env(
    render_mode: str | None = "rgb_array",
    width: int = humanoid.DEFAULT_RENDER_SIZE,
    height: int = humanoid.DEFAULT_RENDER_SIZE,
    **kwargs: Any,
) -> gymnasium.Env:
    return humanoid.HumanoidPoseEnv(render_mode=render_mode, width=width, height=height, **kwargs)


def _humanoid_scene_env(scene: str) -> Callable[..., gymnasium.Env]:
    def make(render_mode: str | None = "rgb_array", **kwargs: Any) -> gymnasium.Env:
        return humanoid_env(render_mode, scene=scene, **kwargs)

    return make


def _gym_env(env_id: str) -> Callable[..., gymnasium.Env]:
    def make(render_mode: str | None = "rgb_array", **kwargs: Any) -> gymnasium.Env:
        return gymnasium.make(env_id, render_mode=render_mode, **kwargs)

    return make


def _paper_env(cls: type) -> Callable[..., gymnasium.Env]:
    """One env of the paper's classic-control semantics; the VecEnv adds the time limit."""

    def make(render_mode: str | None = "rgb_array", **kwargs: Any) -> gymnasium.Env:
        return cls(render_mode=render_mode, **kwargs)

    return make


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
        make_env=_humanoid_scene_env(humanoid.DEFAULT_SCENE),
        drawing="gymnasium",
        target_prompts=(prompt,),
        baseline_prompts=HUMANOID_BASELINE,
        episode_length=humanoid.DEFAULT_EPISODE_LENGTH,
        render_size=(humanoid.DEFAULT_RENDER_SIZE, humanoid.DEFAULT_RENDER_SIZE),
        vector_task=humanoid.HumanoidVectorTask(humanoid.DEFAULT_SCENE),
        hard=hard,
        scene=humanoid.DEFAULT_SCENE,
        asset_files=paper_assets.HUMANOID_FILES,
    )
    for pose, prompt, hard in _HUMANOID_POSES
}
# The paper's prompts (Appendix C, Table 3); episode length 200 (Appendix C.1).
TASKS["cartpole"] = TaskSpec(
    name="cartpole",
    description="CartPole as the paper ran it: no early termination, info['success'] = pole upright",
    make_env=_paper_env(PaperCartPoleEnv),
    target_prompts=("pole vertically upright on top of the cart",),
    baseline_prompts=("pole and cart",),
    episode_length=PAPER_EPISODE_LENGTH,
    render_size=(400, 600),
    resize_mode="squash",
    success_rule="every_step",  # the paper's evaluation: upright on every step of the episode
)
TASKS["mountain-car"] = TaskSpec(
    name="mountain-car",
    description="MountainCarContinuous as the paper ran it: no early termination, sticky info['success'] = car at the flag",
    make_env=_paper_env(PaperMountainCarContinuousEnv),
    target_prompts=("a car at the peak of the mountain, next to the yellow flag",),
    baseline_prompts=("a car in the mountain",),
    episode_length=PAPER_EPISODE_LENGTH,
    render_size=(400, 600),
    resize_mode="squash",
    success_rule="any_step",  # the paper's evaluation: the car reached the flag at some step
)
TASKS["mountain-car-textured"] = dataclasses.replace(
    TASKS["mountain-car"],
    name="mountain-car-textured",
    description="MountainCarContinuous as the paper ran it, drawn with realistic textures",
    make_env=_paper_env(PaperMountainCarContinuousTexturedEnv),
    asset_files=paper_assets.MOUNTAIN_CAR_FILES,
)

# gymnasium's MuJoCo v5 suite under its own ids, as vector tasks (envs.mujoco_suite): gymnasium's envs to the bit.
for _row in mujoco_suite.SUITE.values():
    TASKS[_row.env_id] = TaskSpec(
        name=_row.env_id,
        description=f"gymnasium's {_row.env_id} ({_row.target})",
        make_env=mujoco_suite.make_env(_row.env_id),
        target_prompts=(_row.target,),
        baseline_prompts=(_row.baseline,),
        episode_length=_row.episode_length,
        render_size=(mujoco_suite.DEFAULT_RENDER_SIZE, mujoco_suite.DEFAULT_RENDER_SIZE),
        vector_task=mujoco_suite.SuiteVectorTask(_row.env_id),
        drawing="gymnasium",  # (physics="gym": its gymnasium envs drawn by the batched drawing)
    )

# The optional suites (envs.dm_control, envs.robotics): their packages are imported when an env is made.
for _suite in dm_control.SUITE.values():
    TASKS[_suite.env_id] = TaskSpec(
        name=_suite.env_id,
        description=f"dm_control's {_suite.domain} {_suite.task.replace('_', ' ')}, through shimmy",
        make_env=dm_control.make_env(_suite.env_id),
        target_prompts=(_suite.target,),
        baseline_prompts=(_suite.baseline,),
        episode_length=dm_control.EPISODE_LENGTH,
        render_size=(dm_control.DEFAULT_RENDER_SIZE, dm_control.DEFAULT_RENDER_SIZE),
        drawing="dm_control",
        extra="dm_control",
    )
for _row in robotics.TASKS.values():
    TASKS[_row.name] = TaskSpec(
        name=_row.name,
        description=f"gymnasium-robotics' {_row.env_id}" + (f" ({dict(_row.kwargs)})" if _row.kwargs else ""),
        make_env=robotics.make_env(_row.name),
        target_prompts=(_row.target,),
        baseline_prompts=(_row.baseline,),
        episode_length=_row.episode_length,
        render_size=(robotics.DEFAULT_RENDER_SIZE, robotics.DEFAULT_RENDER_SIZE),
        drawing="gymnasium",
        extra="robotics",
    )

# Stock gymnasium ids of the built-in tasks: stock semantics, the task's prompts and frame handling.
_STOCK_IDS = {
    "CartPole-v1": "cartpole",
    "MountainCarContinuous-v0": "mountain-car",
    "vlmrm_fast/MountainCarContinuousTextured-v0": "mountain-car-textured",
}


def _camera_task(name: str) -> TaskSpec:
    """A task of gymnasium's MuJoCo suite or of dm_control drawn from another camera of its model
    (``Ant-v5@track``, ``dm_control/walker-walk-v0@back``)."""
    task, camera = name.split("@", 1)
    if task in mujoco_suite.SUITE:
        made = {
            "make_env": mujoco_suite.make_env(task, mujoco_suite.check_camera(task, camera)),
            "vector_task": mujoco_suite.SuiteVectorTask(task, camera),
        }
    else:
        made = {"make_env": dm_control.make_env(task, dm_control.check_camera(task, camera))}
    return dataclasses.replace(
        TASKS[task], name=name, description=f"{TASKS[task].description}, seen from its camera {camera!r}", **made
    )


def _humanoid_scene_task(name: str) -> TaskSpec:
    task, scene = name.split("@", 1)
    if task not in TASKS or TASKS[task].scene is None:
        humanoids = [t for t, spec in TASKS.items() if spec.scene is not None]
        raise ValueError(
            f"task {name!r}: only humanoid tasks take a scene (humanoid-kneeling@builtin), and the tasks of "
            "gymnasium's MuJoCo suite and of dm_control a camera (Ant-v5@track, dm_control/walker-walk-v0@back); the "
            f"humanoid tasks are: {', '.join(humanoids)}"
        )
    if scene not in humanoid.SCENES:
        raise ValueError(f"task {name!r}: unknown scene {scene!r}; scenes are: {', '.join(humanoid.SCENES)}")
    return dataclasses.replace(
        TASKS[task],
        name=name,
        description=f"{TASKS[task].description}, {scene} scene",
        make_env=_humanoid_scene_env(scene),
        vector_task=humanoid.HumanoidVectorTask(scene),
        scene=scene,
        asset_files=paper_assets.HUMANOID_FILES if humanoid.SCENES[scene].look == "paper" else (),
    )


def drawing_family(entry_point: Any) -> str | None:
    """The family (``envs.mujoco_drawing``) of the env a gymnasium registry entry point makes, when it is
    gymnasium's ``MujocoEnv`` (or a subclass that keeps its ``render()``); None otherwise."""
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    try:
        maker = (
            gymnasium.envs.registration.load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
        )
    except (ImportError, AttributeError, ValueError):
        return None
    drawn = isinstance(maker, type) and issubclass(maker, MujocoEnv) and maker.render is MujocoEnv.render
    return "gymnasium" if drawn else None


def get_task(name: str | TaskSpec) -> TaskSpec:
    """A built-in task by name, or a task wrapping any registered gymnasium id (a TaskSpec passes through)."""
    if isinstance(name, TaskSpec):
        return name
    if not isinstance(name, str) or not name:
        raise TypeError(f"task must be a task name or a gymnasium id, got {name!r}")
    if name in TASKS:
        return TASKS[name]
    if name.startswith(f"{GYM_NAMESPACE}/") and name.split("/", 1)[1] in TASKS:  # its gymnasium id
        return TASKS[name.split("/", 1)[1]]
    if "@" in name:
        family = name.split("@", 1)[0]
        with_camera = family in mujoco_suite.SUITE or family in dm_control.SUITE
        return _camera_task(name) if with_camera else _humanoid_scene_task(name)
    if name in gymnasium.registry:
        spec = gymnasium.registry[name]
        task = TaskSpec(
            name=name,
            description=f"gymnasium {name}",
            make_env=_gym_env(name),
            episode_length=spec.max_episode_steps,
            drawing=drawing_family(spec.entry_point),
        )
        if name in _STOCK_IDS:
            borrowed = TASKS[_STOCK_IDS[name]]
            task = dataclasses.replace(
                task,
                target_prompts=borrowed.target_prompts,
                baseline_prompts=borrowed.baseline_prompts,
                render_size=borrowed.render_size,
                resize_mode=borrowed.resize_mode,
            )
        return task
    if name.lower().replace("-", "").startswith("metaworld"):
        raise ValueError(
            f"task {name!r}: Meta-World does not run beside this project's MuJoCo 4.0.0 (metaworld 3.1.1 pins "
            "mujoco==3.3.0; 3.0.0 installs but its envs fail to build); docs/environments.md says what works instead"
        )
    close = difflib.get_close_matches(name, list(TASKS) + list(gymnasium.registry), n=4, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown task {name!r}.{hint} Built-in tasks: {', '.join(TASKS)}; or any gymnasium id.")
