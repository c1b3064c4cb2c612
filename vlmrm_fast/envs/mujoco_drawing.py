"""How a MuJoCo gymnasium env draws itself, read so that the batch renderers can draw it instead.

An env whose ``render()`` is MuJoCo's (``mjv_updateScene`` of its model and data, then ``mjr_render``)
keeps its own ``step()``; only its picture is taken over. What that picture needs is said by
:class:`DrawSetup` (the model, the frame size, the camera, the visualisation options, the scene's
capacity: fixed for the env's life) and by the fields of its ``mjData`` that a scene reads
(:data:`DRAWN_FIELDS`), which :class:`DrawLayout` packs into two flat arrays after each step and
reset. A renderer that draws them from another ``mjData`` of the same model (``rendering.egl``'s
``render_data``) draws what the env's ``render()`` would: the data as its step left it, with no
kinematics pass (after ``mj_step`` the poses are those of the last substep's start).

Each family of env says where its model, data and camera are (:data:`FAMILIES`):

* ``gymnasium``: gymnasium's ``MujocoEnv`` (its MuJoCo suite, gymnasium-robotics' Adroit hands, a
  user's env on an XML), gymnasium-robotics' ``MujocoRobotEnv`` (Fetch, the Shadow hands: their
  ``_render_callback`` runs first, as their ``render()`` runs it) and Franka Kitchen (its robot env
  holds the renderer): gymnasium's ``MujocoRenderer``, whose free camera takes its ``lookat`` from the
  data at the env's first ``render()`` (the median of the geoms' positions) unless the env's
  ``default_camera_config`` gives one;
* ``dm_control``: a dm_control environment through shimmy's ``DmControlCompatibilityV0``
  (``envs.dm_control``): dm_control's ``Physics.render`` camera (``render_kwargs``' ``camera_id``,
  -1 the free camera) and scene capacity.

:class:`RecordDrawState` (a gymnasium wrapper, the twin of ``stack.wrappers.RecordFrame``) puts the
packed fields of the state each step and reset reached in the info, so that SB3's vector envs (in
this process or in worker processes) carry them out before they reset a finished env; the batched
drawing path (``stack.drawn_env``) unpacks them and draws every env at once.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import gymnasium
import mujoco
import numpy as np

#: The step info key of the packed draw state (popped by the batched drawing before infos go on).
DRAW_STATE_KEY = "vlmrm_draw_state"

#: The fields of ``mjData`` that ``mjv_updateScene`` reads (with every visual flag on but those of
#: :data:`UNCARRIED_FLAGS`): positions, the poses of bodies, geoms, sites, cameras and lights, centres
#: of mass (tracking cameras), tendon paths, flex vertices, bounding volumes, sleep states, controls and
#: activations (actuator colours), sensor values (rangefinder rays), applied forces (perturbations).
#: ``python_tests/test_drawn_envs.py`` checks that a scene of these fields alone equals the scene of the
#: whole data, for every family.
DRAWN_FIELDS = (
    "qpos",
    "mocap_pos",
    "mocap_quat",
    "act",
    "ctrl",
    "actuator_length",
    "actuator_moment",
    "eq_active",
    "xfrc_applied",
    "sensordata",
    "xpos",
    "xquat",
    "xmat",
    "xipos",
    "ximat",
    "xanchor",
    "xaxis",
    "subtree_com",
    "geom_xpos",
    "geom_xmat",
    "site_xpos",
    "site_xmat",
    "cam_xpos",
    "cam_xmat",
    "light_xpos",
    "light_xdir",
    "ten_wrapadr",
    "ten_wrapnum",
    "ten_length",
    "wrap_obj",
    "wrap_xpos",
    "flexvert_xpos",
    "flexelem_aabb",
    "flexedge_length",
    "bvh_aabb_dyn",
    "bvh_active",
    "body_awake",
    "tree_asleep",
    "tree_awake",
)

#: Visual flags whose drawing reads contacts or constraint rows, which the draw state does not carry.
UNCARRIED_FLAGS = (
    mujoco.mjtVisFlag.mjVIS_JOINT,  # a joint at its limit is coloured from the constraint rows
    mujoco.mjtVisFlag.mjVIS_CONSTRAINT,
    mujoco.mjtVisFlag.mjVIS_CONTACTPOINT,
    mujoco.mjtVisFlag.mjVIS_CONTACTFORCE,
    mujoco.mjtVisFlag.mjVIS_CONTACTSPLIT,
    mujoco.mjtVisFlag.mjVIS_ISLAND,
)

_OPTION_ARRAYS = (
    "flags",
    "geomgroup",
    "sitegroup",
    "jointgroup",
    "tendongroup",
    "actuatorgroup",
    "flexgroup",
    "skingroup",
)


class NotDrawable(ValueError):
    """An env the batch renderers cannot draw as its ``render()`` does, and why, in one line."""


class DrawLayout:
    """Where each of :data:`DRAWN_FIELDS` lies in a model's packed draw state: one float64 array (the
    real fields) and one int32 array (the integer ones), laid out once per model."""

    def __init__(self, model: mujoco.MjModel) -> None:
        data = mujoco.MjData(model)
        self.floats: list[tuple[str, int, int]] = []  # (field, start, size)
        self.ints: list[tuple[str, int, int]] = []
        n_float = n_int = 0
        for name in DRAWN_FIELDS:
            array = getattr(data, name)
            if array.size == 0:
                continue
            if array.dtype == np.float64:
                self.floats.append((name, n_float, array.size))
                n_float += array.size
            else:
                self.ints.append((name, n_int, array.size))
                n_int += array.size
        self.float_size, self.int_size = n_float, n_int

    def pack(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """The draw state of ``data``: (float64 (float_size,), int32 (int_size,)), copies."""
        floats = np.empty(self.float_size)
        ints = np.empty(self.int_size, dtype=np.int32)
        for name, start, size in self.floats:
            floats[start : start + size] = getattr(data, name).reshape(-1)
        for name, start, size in self.ints:
            ints[start : start + size] = getattr(data, name).reshape(-1)
        return floats, ints

    def unpack(self, state: tuple[np.ndarray, np.ndarray], data: mujoco.MjData) -> None:
        """Writes a packed draw state into ``data`` (an ``mjData`` of the same model)."""
        floats, ints = state
        if floats.shape != (self.float_size,) or ints.shape != (self.int_size,):
            raise ValueError(
                f"a draw state of {floats.shape[0]} + {ints.shape[0]} values for a model whose state has "
                f"{self.float_size} + {self.int_size}: the envs' models differ"
            )
        for name, start, size in self.floats:
            getattr(data, name).reshape(-1)[:] = floats[start : start + size]
        for name, start, size in self.ints:
            getattr(data, name).reshape(-1)[:] = ints[start : start + size]


@dataclasses.dataclass(frozen=True)
class CameraRecipe:
    """The camera an env's ``render()`` draws from, as it is made at its first ``render()``:
    ``fields`` (``mujoco.MjvCamera``'s, applied in order) over ``mujoco.MjvCamera``'s defaults, a free
    camera first aimed at the median of the geoms' positions and set ``extent`` away when
    ``aim_at_geoms`` (gymnasium's ``OffScreenViewer``), or dm_control's default free camera when
    ``default_free`` (``mjv_defaultFreeCamera``)."""

    fields: tuple[tuple[str, Any], ...] = ()
    aim_at_geoms: bool = False
    default_free: bool = False

    def camera(self, model: mujoco.MjModel, data: mujoco.MjData) -> dict[str, Any]:
        """The camera, as ``rendering.egl``'s ``set_frame_camera`` takes it, from ``data`` at the first draw."""
        camera = mujoco.MjvCamera()
        if self.default_free:
            camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            mujoco.mjv_defaultFreeCamera(model, camera)
        if self.aim_at_geoms:
            camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            camera.fixedcamid = -1
            camera.lookat[:] = np.median(data.geom_xpos, axis=0) if model.ngeom else 0.0
            camera.distance = model.stat.extent
        for key, value in self.fields:
            if key == "lookat":
                camera.lookat[:] = value
            else:
                setattr(camera, key, value)
        return {
            "type": int(camera.type),
            "fixedcamid": int(camera.fixedcamid),
            "trackbodyid": int(camera.trackbodyid),
            "lookat": [float(v) for v in camera.lookat],
            "distance": float(camera.distance),
            "azimuth": float(camera.azimuth),
            "elevation": float(camera.elevation),
            "orthographic": int(camera.orthographic),
        }


@dataclasses.dataclass(frozen=True)
class DrawSetup:
    """What an env's ``render()`` draws with, fixed for the env's life (picklable: it crosses from a
    worker process once): the family, its model (the worker's copy, or the env's own in this
    process), the frame size, the camera, the visualisation options (``mujoco.MjvOption``'s fields) and
    the scene's capacity (``max_geom``: a scene that fills it drops geoms, as the env's would)."""

    family: str
    model: mujoco.MjModel
    height: int
    width: int
    camera: CameraRecipe
    option: dict[str, Any]
    max_geom: int


@dataclasses.dataclass(frozen=True)
class EnvView:
    """One live env as the batched drawing reads it: its setup, its data, and what its ``render()``
    runs before drawing (gymnasium-robotics' ``_render_callback``; None: nothing)."""

    setup: DrawSetup
    data: mujoco.MjData
    before_draw: Callable[[], None] | None


def option_fields(option: mujoco.MjvOption) -> dict[str, Any]:
    """A ``mujoco.MjvOption``'s fields as ``rendering.egl``'s ``set_option`` takes them; refuses the
    flags whose drawing reads what the draw state does not carry (contacts, constraint rows)."""
    drawn = [flag.name for flag in UNCARRIED_FLAGS if option.flags[flag]]
    if drawn:
        raise NotDrawable(
            f"its visual options turn on {', '.join(drawn)}, which draw contacts or constraint rows that the batched "
            "drawing does not carry; turn them off, or let the env draw itself (renderer=None)"
        )
    fields: dict[str, Any] = {name: [int(v) for v in getattr(option, name)] for name in _OPTION_ARRAYS}
    fields.update(
        label=int(option.label),
        frame=int(option.frame),
        bvh_depth=int(option.bvh_depth),
        flex_layer=int(option.flex_layer),
    )
    return fields


# ------------------------------------------------------------------ families
def _gymnasium_holder(env: Any) -> Any | None:
    """The object holding gymnasium's ``MujocoRenderer`` of ``env`` (unwrapped): the env, or the robot
    env Franka Kitchen delegates to; None when there is none."""
    from gymnasium.envs.mujoco.mujoco_rendering import MujocoRenderer

    for holder in (env, getattr(env, "robot_env", None)):
        if isinstance(getattr(holder, "mujoco_renderer", None), MujocoRenderer):
            return holder
    return None


def _known_render(env: Any) -> bool:
    """Whether ``type(env).render`` is one whose picture is known here: gymnasium's ``MujocoEnv``'s,
    gymnasium-robotics' ``MujocoRobotEnv``'s (its callback, then the same) or Franka Kitchen's (its robot
    env's), not an override of the user's that may draw something else."""
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    known = [MujocoEnv.render]
    if "gymnasium_robotics" in sys.modules:  # (an env of it exists, so it is imported; never imported here)
        from gymnasium_robotics.envs.franka_kitchen.kitchen_env import KitchenEnv
        from gymnasium_robotics.envs.robot_env import MujocoRobotEnv

        known += [MujocoRobotEnv.render, KitchenEnv.render]
    return any(type(env).render is render for render in known)


def _gymnasium_view(env: Any) -> EnvView | None:
    holder = _gymnasium_holder(env)
    if holder is None:
        return None
    if not _known_render(env):
        raise NotDrawable(
            f"{type(env).__name__} overrides render(), so its picture may not be MuJoCo's scene alone; let it draw "
            "itself (renderer=None)"
        )
    renderer = holder.mujoco_renderer
    if renderer.width is None or renderer.height is None:
        raise NotDrawable("its renderer has no frame size (made without width and height)")
    viewer = renderer._viewers.get("rgb_array")
    camera_id = renderer.camera_id
    fields: list[tuple[str, Any]] = []
    if viewer is not None:  # it has drawn already: its camera as it stands
        camera = viewer.cam
        fields = [(key, getattr(camera, key)) for key in ("type", "fixedcamid", "trackbodyid", "distance")]
        fields += [("lookat", tuple(float(v) for v in camera.lookat))]
        fields += [(key, getattr(camera, key)) for key in ("azimuth", "elevation", "orthographic")]
        recipe = CameraRecipe(tuple(fields))
    else:
        for key, value in (renderer.default_cam_config or {}).items():
            fields.append((key, tuple(float(v) for v in value) if isinstance(value, np.ndarray) else value))
        recipe = CameraRecipe(tuple(fields), aim_at_geoms=True)
    if camera_id is not None:  # render(camera_id=...) sets these on every call
        kind = mujoco.mjtCamera.mjCAMERA_FREE if camera_id == -1 else mujoco.mjtCamera.mjCAMERA_FIXED
        recipe = dataclasses.replace(
            recipe, fields=(*recipe.fields, ("type", int(kind)), ("fixedcamid", int(camera_id)))
        )
    option = mujoco.MjvOption()
    for flag, value in renderer._vopt.items():
        option.flags[flag] = value
    callback = getattr(env, "_render_callback", None)
    setup = DrawSetup(
        "gymnasium",
        renderer.model,
        int(renderer.height),
        int(renderer.width),
        recipe,
        option_fields(option),
        int(renderer.max_geom),
    )
    return EnvView(setup, renderer.data, callback if callable(callback) else None)


def _dm_control_view(env: Any) -> EnvView | None:
    try:
        from shimmy.dm_control_compatibility import DmControlCompatibilityV0
    except ImportError:
        return None
    if not isinstance(env, DmControlCompatibilityV0):
        return None
    from dm_control.mujoco.wrapper.core import MjvScene

    kwargs = dict(env.render_kwargs)
    refused = sorted(set(kwargs) - {"height", "width", "camera_id", "scene_option"})
    if refused:
        raise NotDrawable(
            f"its render_kwargs {refused} change dm_control's picture beyond a camera and options; let it draw "
            "itself (renderer=None)"
        )
    physics = env._env.physics
    model, data = physics.model._model, physics.data._data
    camera_id = kwargs.get("camera_id", -1)
    if isinstance(camera_id, str):
        camera_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera_id)
    if camera_id == -1:
        recipe = CameraRecipe(default_free=True)
    else:
        recipe = CameraRecipe((("type", int(mujoco.mjtCamera.mjCAMERA_FIXED)), ("fixedcamid", int(camera_id))))
    option = kwargs.get("scene_option") or mujoco.MjvOption()
    setup = DrawSetup(
        "dm_control",
        model,
        int(kwargs.get("height", 240)),
        int(kwargs.get("width", 320)),
        recipe,
        option_fields(option),
        int(MjvScene(physics.model).maxgeom),  # dm_control's estimate of the scene's capacity, as its Camera makes it
    )
    return EnvView(setup, data, None)


#: Each family of drawable env, in the order they are tried: its name and how it reads an unwrapped env
#: (an EnvView, None when the env is not of the family, or NotDrawable saying why not).
FAMILIES: dict[str, Callable[[Any], EnvView | None]] = {
    "gymnasium": _gymnasium_view,
    "dm_control": _dm_control_view,
}


def view_of(env: gymnasium.Env) -> EnvView:
    """How ``env`` (made with ``render_mode="rgb_array"``) draws its frames; :class:`NotDrawable` in one
    line naming why the batch renderers cannot draw it."""
    name = type(env.unwrapped).__name__
    if env.render_mode != "rgb_array":
        raise NotDrawable(
            f"env {name} was made with render_mode={env.render_mode!r}; batched drawing needs 'rgb_array'"
        )
    for family, read in FAMILIES.items():
        try:
            view = read(env.unwrapped)
        except NotDrawable as exc:
            raise NotDrawable(f"env {name} ({family}): {exc}") from None
        if view is not None:
            return view
    raise NotDrawable(
        f"env {name} is not a MuJoCo env the batch renderers can draw (neither gymnasium's MujocoEnv, "
        "gymnasium-robotics' envs, nor dm_control through shimmy): it draws its own frames (leave renderer unset)"
    )


class RecordDrawState(gymnasium.Wrapper):
    """Adds ``info["vlmrm_draw_state"]`` at each step and reset: the packed fields of the env's data that its
    frame is drawn from, as its ``render()`` would draw them (the family's pre-render callback run first)."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self._view = view_of(env)
        self._layout = DrawLayout(self._view.setup.model)

    def draw_setup(self) -> DrawSetup:
        """What the frames are drawn with (the model, size, camera, options): asked once by the drawing."""
        return self._view.setup

    def _record(self, info: dict[str, Any]) -> dict[str, Any]:
        if self._view.before_draw is not None:
            self._view.before_draw()
        info = dict(info)
        info[DRAW_STATE_KEY] = self._layout.pack(self._view.data)
        return info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._record(info)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._record(info)
