"""The humanoid's scenes, built by editing gymnasium's humanoid model with MjSpec.

Every scene is gymnasium's Humanoid-v5 to the bit in its physics: only textures,
materials, the light and cameras change. A scene fixes what the frames look like
(:data:`SCENES`):

* ``"paper"`` (the default): the scene of Rocamonde et al. (2024), Section 4.3,
  Table 1 and Fig. 3c. Textures of the same kind as theirs, drawn by
  :mod:`vlmrm_fast.envs.textures` (a cloudy sky, dark stone floor tiles, a light
  brushed-metal robot), their materials and light, and their camera: gymnasium's
  free camera with kube/job.yaml's ``camera_config`` (distance 3.5, elevation -10,
  azimuth 180, lookat (0, 0, 1), ``trackbodyid`` 1). gymnasium renders a free
  camera, on which ``trackbodyid`` has no effect: the view is fixed in the world,
  in front of the robot and slightly above it ("a fixed position pointing at the
  agent slightly angled down", Section 4.3). It is the model camera ``vlmrm_paper``.
* ``"paper-textures"``: the same textures with the model's own ``track`` camera,
  which follows the centre of mass from the side (Fig. 3b).
* ``"gymnasium"``: gymnasium's scene as shipped, seen from ``track`` (Fig. 3a).
* ``"builtin"``: this project's earlier scene: MuJoCo's built-in gradient sky,
  checker floor and flat light robot, seen from ``vlmrm_front``, a camera that
  follows the centre of mass from the front left.

The paper-look scenes draw generated textures unless given ``scene_assets``, a folder holding
the paper's own image files (``sky.png``, ``tiles.png``, ``robot.png``; a checkout of the
paper's repository will do, see :mod:`vlmrm_fast.envs.paper_assets`): MuJoCo then loads those
files as the paper's ``humanoid_textured.xml`` does, and the model keeps that file's shadow map
(MuJoCo's default, :data:`PAPER_SHADOW_MAP_SIZE`), so that the frames are the paper's code's
frames, pixel for pixel, drawn by the same MuJoCo (``python_tests/test_paper.py``). With the
generated textures the shadow map is sized for the frames (:func:`shadow_map_size`).

There is no early termination; episodes have a fixed length (``time_limit``: a truncation, or a
termination as in the paper's code; see :mod:`vlmrm_fast.envs.time_limits`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import gymnasium
import mujoco
import numpy as np
from gymnasium.envs.mujoco.humanoid_v5 import HumanoidEnv

from vlmrm_fast.envs import paper_assets, textures
from vlmrm_fast.physics.simulator import UniformNoise

FRAME_SKIP = 5
#: The shadow map of the paper's model: its humanoid_textured.xml sets none, so MuJoCo's default.
PAPER_SHADOW_MAP_SIZE = 4096
RESET_NOISE_SCALE = 1e-2
DEFAULT_EPISODE_LENGTH = 100
DEFAULT_RENDER_SIZE = 480

# The paper's camera, as kube/job.yaml gives it to gymnasium (reward.camera_config): a free camera.
PAPER_CAMERA = "vlmrm_paper"
PAPER_CAMERA_CONFIG = {
    "trackbodyid": 1,
    "distance": 3.5,
    "lookat": (0.0, 0.0, 1.0),
    "elevation": -10.0,
    "azimuth": 180.0,
}
# This project's earlier camera: follows the centre of mass at a fixed offset, from the front left.
FRONT_CAMERA = "vlmrm_front"
FRONT_CAMERA_POSITION = (1.35, -2.15, 1.35)  # world frame at the initial pose
FRONT_CAMERA_TARGET = (0.0, 0.0, 0.85)
GYMNASIUM_CAMERA = "track"  # in gymnasium's humanoid.xml: side view, follows the centre of mass


@dataclasses.dataclass(frozen=True)
class Scene:
    name: str
    description: str
    look: str  # "paper", "builtin" or "gymnasium": sky, floor, robot, light
    camera: str  # the model camera frames are drawn from


SCENES: dict[str, Scene] = {
    scene.name: scene
    for scene in (
        Scene(
            "paper",
            "Rocamonde et al.'s scene: generated sky, stone tiles and robot textures; their fixed front camera",
            "paper",
            PAPER_CAMERA,
        ),
        Scene(
            "paper-textures",
            "the paper's textures seen from gymnasium's side camera (their Fig. 3b)",
            "paper",
            GYMNASIUM_CAMERA,
        ),
        Scene(
            "gymnasium",
            "gymnasium's humanoid scene as shipped, seen from its side camera (their Fig. 3a)",
            "gymnasium",
            GYMNASIUM_CAMERA,
        ),
        Scene(
            "builtin",
            "MuJoCo built-in gradient sky, checker floor and flat robot; a front-left camera following the body",
            "builtin",
            FRONT_CAMERA,
        ),
    )
}
DEFAULT_SCENE = "paper"

# gymnasium Humanoid-v5 reward defaults (terminate_when_unhealthy=False here)
FORWARD_REWARD_WEIGHT = 1.25
CTRL_COST_WEIGHT = 0.1
CONTACT_COST_WEIGHT = 5e-7
CONTACT_COST_MAX = 10.0
HEALTHY_REWARD = 5.0
HEALTHY_Z_RANGE = (1.0, 2.0)


def gymnasium_humanoid_xml() -> str:
    return os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", "humanoid.xml")


def get_scene(scene: str | Scene) -> Scene:
    if isinstance(scene, Scene):
        return scene
    if scene not in SCENES:
        raise ValueError(f"unknown humanoid scene {scene!r}; scenes are: {', '.join(SCENES)}")
    return SCENES[scene]


def free_camera_pose(lookat, distance: float, elevation: float, azimuth: float) -> tuple[np.ndarray, list[float]]:
    """Position and ``xyaxes`` of a model camera that sees what MuJoCo's free camera with
    these parameters sees (mjv_updateCamera's geometry; angles in degrees)."""
    el, az = np.radians(elevation), np.radians(azimuth)
    forward = np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
    up = np.array([-np.sin(el) * np.cos(az), -np.sin(el) * np.sin(az), np.cos(el)])
    return np.asarray(lookat, float) - distance * forward, [*np.cross(forward, up), *up]


def look_at_xyaxes(position: np.ndarray, target: np.ndarray) -> list[float]:
    """MuJoCo camera axes (right, up) for a camera at ``position`` looking at ``target``, no roll."""
    backward = (position - target) / np.linalg.norm(position - target)
    right = np.cross([0.0, 0.0, 1.0], backward)
    right /= np.linalg.norm(right)
    up = np.cross(backward, right)
    return [*right, *up]


def _set_texture_data(texture: mujoco.MjsTexture, image: np.ndarray) -> None:
    """Replaces a texture's picture by ``image`` (uint8 (H, W, 3); cube maps: 6 faces stacked)."""
    texture.builtin = mujoco.mjtBuiltin.mjBUILTIN_NONE
    texture.mark = mujoco.mjtMark.mjMARK_NONE
    texture.random = 0.0
    texture.height, texture.width = image.shape[:2]
    texture.nchannel = 3
    texture.data = image.tobytes()


def _set_texture_file(texture: mujoco.MjsTexture, path: str) -> None:
    """Makes MuJoCo load a texture's picture from an image file, as an XML ``file=`` attribute does."""
    texture.builtin = mujoco.mjtBuiltin.mjBUILTIN_NONE
    texture.mark = mujoco.mjtMark.mjMARK_NONE
    texture.random = 0.0
    texture.data = b""
    texture.nchannel = 3
    texture.file = path


def _paper_look(spec: mujoco.MjSpec, scene_assets: str | None = None) -> None:
    """The paper's textures, materials and light (its humanoid_textured.xml): our own pictures, or
    the paper's files from ``scene_assets``."""
    drawn = {"sky.png": textures.sky_cube, "tiles.png": textures.stone_tiles, "robot.png": textures.brushed_metal}
    for texture in spec.textures:
        if texture.type == mujoco.mjtTexture.mjTEXTURE_SKYBOX:
            name = "sky.png"
        elif texture.name == "texplane":
            name = "tiles.png"
        elif texture.name == "texgeom":
            name = "robot.png"
        else:
            continue
        if scene_assets is None:
            _set_texture_data(texture, drawn[name]())
        else:
            _set_texture_file(texture, str(paper_assets.find_asset(scene_assets, name)))
    for material in spec.materials:
        if material.name == "MatPlane":
            material.reflectance, material.shininess, material.specular = 0.0, 0.0, 0.0
            material.texrepeat = [60, 60]
        elif material.name == "geom":
            material.specular, material.shininess = 1.0, 1.0
    for light in spec.lights:
        light.pos, light.dir = [0.0, 0.0, 1.0], [0.0, 0.0, -1.5]
        light.specular = [0.5, 0.5, 0.5]
    for geom in spec.geoms:
        geom.rgba = [1, 1, 1, 1]  # the textures alone colour the scene


def _builtin_look(spec: mujoco.MjSpec) -> None:
    for texture in spec.textures:
        if texture.type == mujoco.mjtTexture.mjTEXTURE_SKYBOX:
            texture.builtin = mujoco.mjtBuiltin.mjBUILTIN_GRADIENT
            texture.rgb1 = [0.55, 0.75, 0.95]  # zenith
            texture.rgb2 = [0.95, 0.97, 1.0]  # horizon haze
        elif texture.name == "texplane":
            texture.builtin = mujoco.mjtBuiltin.mjBUILTIN_CHECKER
            texture.rgb1 = [0.62, 0.60, 0.56]
            texture.rgb2 = [0.78, 0.76, 0.72]
        elif texture.name == "texgeom":
            texture.builtin = mujoco.mjtBuiltin.mjBUILTIN_FLAT
            texture.rgb1 = [0.85, 0.85, 0.88]
            texture.rgb2 = [0.85, 0.85, 0.88]
            texture.random = 0.0
    for material in spec.materials:
        if material.name == "MatPlane":
            material.reflectance = 0.0  # mirror images of the robot confuse CLIP
            material.texrepeat = [30, 30]
    spec.visual.map.shadowclip = 0.3  # a tighter shadow frustum: no shadow acne on the far floor
    for geom in spec.geoms:
        geom.rgba = [1, 1, 1, 1]


def humanoid_spec(scene: str | Scene = DEFAULT_SCENE, scene_assets: str | None = None) -> mujoco.MjSpec:
    """gymnasium's humanoid.xml with ``scene``'s look; every scene's model holds all the cameras
    (``track``, ``vlmrm_paper``, ``vlmrm_front``), so any of them can draw any scene.
    ``scene_assets``: a folder with the paper's image files, for a scene of the paper's look."""
    scene = get_scene(scene)
    if scene_assets is not None and scene.look != "paper":
        raise ValueError(
            f"scene_assets: the {scene.name!r} scene draws no paper textures; "
            f"use a scene of the paper's look ({', '.join(s.name for s in SCENES.values() if s.look == 'paper')})"
        )
    spec = mujoco.MjSpec.from_file(gymnasium_humanoid_xml())
    if scene.look == "paper":
        _paper_look(spec, scene_assets)
    elif scene.look == "builtin":
        _builtin_look(spec)
    position, xyaxes = free_camera_pose(**{k: v for k, v in PAPER_CAMERA_CONFIG.items() if k != "trackbodyid"})
    spec.worldbody.add_camera(name=PAPER_CAMERA, mode=mujoco.mjtCamLight.mjCAMLIGHT_FIXED, pos=position, xyaxes=xyaxes)
    position, target = np.array(FRONT_CAMERA_POSITION), np.array(FRONT_CAMERA_TARGET)
    spec.worldbody.add_camera(
        name=FRONT_CAMERA,
        mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
        pos=position,
        xyaxes=look_at_xyaxes(position, target),
    )
    return spec


def shadow_map_size(render_size: int) -> int:
    """Four shadow-map texels per frame pixel, a power of two in [512, 2048]: at CLIP's resolutions
    the shadows of MuJoCo's default 4096 but for isolated pixels on their edges (27 of 480 x 480 in
    the paper's scene at rest), for less rasterizer time per frame (Mesa's llvmpipe: 1.4 to 1.9x less
    from 64 to 480 pixels). Not the paper's picture, which keeps 4096 (:data:`PAPER_SHADOW_MAP_SIZE`)."""
    size = 512
    while size < 4 * render_size and size < 2048:
        size *= 2
    return size


def humanoid_model(
    scene: str | Scene = DEFAULT_SCENE, render_size: int | None = None, scene_assets: str | None = None
) -> mujoco.MjModel:
    """The compiled scene; the offscreen buffer is sized for ``render_size``, and the shadow map too unless the
    scene draws the paper's own image files (``scene_assets``: the paper's picture, its shadow map)."""
    model = humanoid_spec(scene, scene_assets).compile()
    if scene_assets is not None:
        model.vis.quality.shadowsize = PAPER_SHADOW_MAP_SIZE
    elif render_size is not None:
        model.vis.quality.shadowsize = shadow_map_size(render_size)
    if render_size is not None:
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, render_size)
        model.vis.global_.offheight = max(model.vis.global_.offheight, render_size)
    return model


class HumanoidPoseEnv(HumanoidEnv):
    """gymnasium's Humanoid-v5 on one of :data:`SCENES`: no early termination, rendered by the scene's camera.

    Use with a time limit (``episode_length``); the VecEnv adds it.
    """

    def __init__(
        self,
        scene: str | Scene = DEFAULT_SCENE,
        render_mode: str | None = "rgb_array",
        width: int = DEFAULT_RENDER_SIZE,
        height: int = DEFAULT_RENDER_SIZE,
        scene_assets: str | None = None,
        solver: str | None = None,
        **kwargs,
    ):
        self.scene = get_scene(scene)
        self.scene_assets = scene_assets
        self.solver = solver  # the constraint solver (vlmrm_fast.physics.solver); None: the model's own
        kwargs.setdefault("terminate_when_unhealthy", False)
        super().__init__(
            xml_file=gymnasium_humanoid_xml(),
            render_mode=render_mode,
            width=width,
            height=height,
            camera_name=self.scene.camera,
            **kwargs,
        )

    def _initialize_simulation(self):
        from vlmrm_fast.physics.solver import with_solver

        model = humanoid_model(self.scene, max(self.width, self.height), self.scene_assets)
        if self.solver is not None:
            model = with_solver(model, self.solver)
        return model, mujoco.MjData(model)


# ------------------------------------------------------------------ batched quantities
# The simulator env computes observations and the environment's reward for all
# envs at once from the fields the simulator copies out after each step (the
# same mjData fields, at the same moment, that Humanoid-v5 reads).


class HumanoidVectorTask:
    """Humanoid-v5's observation, reward and info for the simulator env (terminate_when_unhealthy=False),
    drawn in ``scene`` (a :class:`~vlmrm_fast.envs.vector_task.VectorTask`), with the paper's image files from
    ``scene_assets`` if given."""

    frame_skip = FRAME_SKIP
    reset_noise = UniformNoise(RESET_NOISE_SCALE)
    outputs = ("qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext", "xipos")

    def __init__(self, scene: str | Scene = DEFAULT_SCENE, scene_assets: str | None = None):
        self.scene = get_scene(scene)
        self.scene_assets = scene_assets

    @property
    def camera(self) -> str:
        return self.scene.camera

    def with_scene_assets(self, scene_assets: str) -> HumanoidVectorTask:
        return HumanoidVectorTask(self.scene, scene_assets)

    def build_model(self, render_size: int) -> mujoco.MjModel:
        return humanoid_model(self.scene, render_size, self.scene_assets)

    def observation(self, fields: dict[str, Any]) -> Any:
        """Humanoid-v5's observation of every env: numpy arrays in, numpy out; torch tensors (a
        simulator's fields on the device) in, a torch tensor on that device out."""
        n = fields["qpos"].shape[0]
        parts = [
            fields["qpos"][:, 2:],
            fields["qvel"],
            fields["cinert"].reshape(n, -1, 10)[:, 1:].reshape(n, -1),
            fields["cvel"].reshape(n, -1, 6)[:, 1:].reshape(n, -1),
            fields["qfrc_actuator"][:, 6:],
            fields["cfrc_ext"].reshape(n, -1, 6)[:, 1:].reshape(n, -1),
        ]
        if isinstance(parts[0], np.ndarray):
            return np.concatenate(parts, axis=1)
        import torch

        return torch.cat(parts, dim=1)

    def terminated(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        """None: the pose tasks never end early (terminate_when_unhealthy=False)."""
        return np.zeros(fields["qpos"].shape[0], dtype=bool)

    def step_reward(self, model: mujoco.MjModel, num_envs: int) -> HumanoidStepReward:
        return HumanoidStepReward(model, num_envs)


class HumanoidStepReward:
    """Humanoid-v5's reward of a step for ``num_envs`` envs: it needs each env's centre of mass from
    before the step (the forward reward is its velocity), recorded by ``before_step``."""

    def __init__(self, model: mujoco.MjModel, num_envs: int):
        self.model = model
        self._xy_before = np.zeros((num_envs, 2))

    def mass_center_xy(self, xipos: np.ndarray) -> np.ndarray:
        """(N, 2) mass-weighted centre of the bodies, as gymnasium's ``mass_center``."""
        xipos = xipos.reshape(xipos.shape[0], -1, 3)
        body_mass = self.model.body_mass
        return (np.einsum("b,nbj->nj", body_mass, xipos) / body_mass.sum())[:, :2]

    def before_step(self, fields: dict[str, np.ndarray], rows: slice) -> None:
        self._xy_before[rows] = self.mass_center_xy(fields["xipos"][rows])

    def __call__(
        self, fields: dict[str, np.ndarray], actions: np.ndarray, dt: float
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        ctrl = np.asarray(actions, np.float64)  # Humanoid-v5's control cost reads data.ctrl
        xy_after = self.mass_center_xy(fields["xipos"])
        velocity = (xy_after - self._xy_before) / dt
        z = fields["qpos"][:, 2]
        healthy = ((HEALTHY_Z_RANGE[0] < z) & (z < HEALTHY_Z_RANGE[1])) * HEALTHY_REWARD
        forward = FORWARD_REWARD_WEIGHT * velocity[:, 0]
        ctrl_cost = CTRL_COST_WEIGHT * np.sum(np.square(ctrl), axis=1)
        contact = np.clip(
            CONTACT_COST_WEIGHT * np.sum(np.square(fields["cfrc_ext"]), axis=1), -np.inf, CONTACT_COST_MAX
        )
        reward = forward + healthy - (ctrl_cost + contact)
        info = {
            "x_position": fields["qpos"][:, 0],
            "y_position": fields["qpos"][:, 1],
            "distance_from_origin": np.linalg.norm(fields["qpos"][:, 0:2], ord=2, axis=1),
            "x_velocity": velocity[:, 0],
            "y_velocity": velocity[:, 1],
            "reward_survive": healthy,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact,
        }
        return reward, info
