"""dm_control's suite as tasks: each domain's tasks through shimmy's gymnasium adapter, drawn by the batch
renderers (``envs.mujoco_drawing``'s ``dm_control`` family), with prompts for what the body should do.

    FastVLMRewardVecEnv("dm_control/walker-walk-v0", 8)

Why shimmy: it is the Farama Foundation's adapter, gymnasium's own documentation points dm_control users
to it, and it keeps dm_control's episode (its ``TimeStep`` ends as a truncation, a zero discount as a
termination), its seeding (``reset(seed=)`` reseeds the task's ``RandomState``) and its ``render()``
(``Physics.render``) as they are. Here each env is shimmy's ``DmControlCompatibilityV0`` over
``suite.load(domain, task)``, its dictionary observation flattened (gymnasium's ``FlattenObservation``,
so that SB3's ``MlpPolicy`` takes it), drawn from the camera the pixel-based dm_control literature uses
(camera 0, the quadruped's 2; another of the model's after an ``@``: ``dm_control/walker-walk-v0@back``) at
the run's frame size, the model's offscreen buffer made as large as
that size so that the env's own ``render()`` draws it too (dm_control refuses a frame larger than the
buffer its XML declares).

MuJoCo 4.0.0 and dm_control 1.0.50: dm_control builds its named indexing (``physics.named``) from a table
of ``mjModel``/``mjData`` fields written for the MuJoCo of its release, which still lists nine flex fields
MuJoCo 4.0.0 removed; ``Physics`` then fails on the first of them. :func:`fit_to_mujoco` drops the table's
entries that MuJoCo no longer has (no suite domain has a flex: nothing it indexes is lost) before any
physics is made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium

from vlmrm_fast.envs.extras import require

#: The size of frames the rows draw unless the run says otherwise.
DEFAULT_RENDER_SIZE = 224
#: dm_control's episode: 1000 control steps.
EPISODE_LENGTH = 1000


@dataclasses.dataclass(frozen=True)
class SuiteTask:
    domain: str
    task: str
    target: str
    baseline: str
    camera: int = 0  # the pixel-based literature's view (DrQ, CURL): camera 0, the quadruped's 2

    @property
    def env_id(self) -> str:
        """shimmy's gymnasium id of the task."""
        return f"dm_control/{self.domain}-{self.task}-v0"


_WALKER = "a two-legged robot"
_CHEETAH = "a cheetah robot"
_QUADRUPED = "a four-legged robot"
_HUMANOID = "a humanoid robot"
_ARM = "a robot arm"
_FINGER = "a robot finger and a spinner"
_CART = "pole and cart"

SUITE: dict[str, SuiteTask] = {
    row.env_id: row
    for row in (
        SuiteTask("walker", "stand", "a two-legged robot standing upright", _WALKER),
        SuiteTask("walker", "walk", "a two-legged robot walking forward", _WALKER),
        SuiteTask("walker", "run", "a two-legged robot running forward", _WALKER),
        SuiteTask("cheetah", "run", "a cheetah robot running forward", _CHEETAH),
        SuiteTask("quadruped", "walk", "a four-legged robot walking forward", _QUADRUPED, camera=2),
        SuiteTask("quadruped", "run", "a four-legged robot running forward", _QUADRUPED, camera=2),
        SuiteTask("humanoid", "stand", "a humanoid robot standing up", _HUMANOID),
        SuiteTask("humanoid", "walk", "a humanoid robot walking forward", _HUMANOID),
        SuiteTask("humanoid", "run", "a humanoid robot running forward", _HUMANOID),
        SuiteTask("manipulator", "bring_ball", "a robot arm bringing the ball to the target", _ARM),
        SuiteTask("finger", "spin", "a robot finger spinning the spinner", _FINGER),
        SuiteTask("finger", "turn_easy", "a robot finger turning the spinner's tip to the target", _FINGER),
        SuiteTask("reacher", "easy", "a robot arm touching the target with its fingertip", _ARM),
        SuiteTask("reacher", "hard", "a robot arm touching the target with its fingertip", _ARM),
        SuiteTask("cartpole", "balance", "pole vertically upright on top of the cart", _CART),
        SuiteTask("cartpole", "swingup", "pole vertically upright on top of the cart", _CART),
    )
}


def fit_to_mujoco() -> list[str]:
    """Drops the entries of dm_control's field table that this MuJoCo lacks (see the module docstring);
    returns the dropped ``struct.field`` names (none once done, or once dm_control matches MuJoCo)."""
    import mujoco
    from dm_control.mujoco.wrapper.mjbindings import sizes

    model = mujoco.MjModel.from_xml_string("<mujoco/>")
    present = {"mjmodel": model, "mjdata": mujoco.MjData(model)}
    dropped = []
    for struct, instance in present.items():
        table = sizes.array_sizes[struct]
        for field in [name for name in table if not hasattr(instance, name)]:
            del table[field]
            dropped.append(f"{struct}.{field}")
    return dropped


def check_camera(env_id: str, camera: str) -> int | str:
    """``camera`` (a name, or a number) when ``env_id``'s model has it, as dm_control's ``camera_id`` takes
    it; otherwise one line naming the cameras the model has."""
    import importlib

    import mujoco

    require("dm_control", f"task {env_id!r}")
    row = SUITE[env_id]
    xml, assets = importlib.import_module(f"dm_control.suite.{row.domain}").get_model_and_assets()
    model = mujoco.MjModel.from_xml_string(xml, assets)
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
    if camera in names:
        return camera
    if camera.isdigit() and int(camera) < model.ncam:
        return int(camera)
    raise ValueError(
        f"task '{env_id}@{camera}': {row.domain}'s model has no camera {camera!r}; its cameras are "
        f"{', '.join(repr(name) for name in names)} (or their numbers 0 to {model.ncam - 1})"
    )


def make_env(env_id: str, camera: int | str | None = None) -> Callable[..., gymnasium.Env]:
    """A factory of ``env_id``'s env (see the module docstring): ``make(render_mode=, width=, height=)``,
    drawn from ``camera`` (a name or number of its model's cameras; None: the row's)."""
    row = SUITE[env_id]

    def make(
        render_mode: str | None = "rgb_array",
        width: int = DEFAULT_RENDER_SIZE,
        height: int = DEFAULT_RENDER_SIZE,
        **kwargs: Any,
    ) -> gymnasium.Env:
        require("dm_control", f"task {env_id!r}")
        fit_to_mujoco()
        from dm_control import suite
        from shimmy.dm_control_compatibility import DmControlCompatibilityV0

        dm_env = suite.load(row.domain, row.task, **kwargs)
        global_ = dm_env.physics.model.vis.global_
        global_.offwidth, global_.offheight = max(global_.offwidth, width), max(global_.offheight, height)
        render_kwargs = {"height": height, "width": width, "camera_id": row.camera if camera is None else camera}
        env = DmControlCompatibilityV0(dm_env, render_mode=render_mode, render_kwargs=render_kwargs)
        return gymnasium.wrappers.FlattenObservation(env)

    return make
