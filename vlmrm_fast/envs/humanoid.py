"""The paper's humanoid scene, built by editing gymnasium's humanoid model with MjSpec.

Edits (visual only; the physics is gymnasium's Humanoid-v5 to the bit): a blue
gradient sky, a tiled floor without reflections, a light robot texture, and a
camera that follows the centre of mass at a fixed offset, framing the whole body.
There is no early termination; episodes have a fixed length (a truncation).
"""

from __future__ import annotations

import os

import gymnasium
import mujoco
import numpy as np
from gymnasium.envs.mujoco.humanoid_v5 import HumanoidEnv

CAMERA_NAME = "vlmrm_front"
FRAME_SKIP = 5
RESET_NOISE_SCALE = 1e-2
DEFAULT_EPISODE_LENGTH = 100
DEFAULT_RENDER_SIZE = 480
CAMERA_POSITION = (1.35, -2.15, 1.35)   # world frame at the initial pose; tracks the centre of mass
CAMERA_TARGET = (0.0, 0.0, 0.85)

# gymnasium Humanoid-v5 reward defaults (terminate_when_unhealthy=False here)
FORWARD_REWARD_WEIGHT = 1.25
CTRL_COST_WEIGHT = 0.1
CONTACT_COST_WEIGHT = 5e-7
CONTACT_COST_MAX = 10.0
HEALTHY_REWARD = 5.0
HEALTHY_Z_RANGE = (1.0, 2.0)


def gymnasium_humanoid_xml() -> str:
    return os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", "humanoid.xml")


def humanoid_spec(textured: bool = True) -> mujoco.MjSpec:
    """gymnasium's humanoid.xml with the paper's scene edits applied."""
    spec = mujoco.MjSpec.from_file(gymnasium_humanoid_xml())
    if textured:
        for texture in spec.textures:
            if texture.type == mujoco.mjtTexture.mjTEXTURE_SKYBOX:
                texture.builtin = mujoco.mjtBuiltin.mjBUILTIN_GRADIENT
                texture.rgb1 = [0.55, 0.75, 0.95]   # zenith
                texture.rgb2 = [0.95, 0.97, 1.0]    # horizon haze
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
        floor = spec.geom("floor")
        floor.rgba = [1, 1, 1, 1]
        for geom in spec.geoms:
            if geom.name != "floor":
                geom.rgba = [1, 1, 1, 1]
    # Follows the centre of mass at a fixed offset, looking at the body from the front-left.
    position, target = np.array(CAMERA_POSITION), np.array(CAMERA_TARGET)
    spec.worldbody.add_camera(
        name=CAMERA_NAME, mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM, pos=position, xyaxes=look_at_xyaxes(position, target)
    )
    return spec


def look_at_xyaxes(position: np.ndarray, target: np.ndarray) -> list[float]:
    """MuJoCo camera axes (right, up) for a camera at ``position`` looking at ``target``, no roll."""
    backward = (position - target) / np.linalg.norm(position - target)
    right = np.cross([0.0, 0.0, 1.0], backward)
    right /= np.linalg.norm(right)
    up = np.cross(backward, right)
    return [*right, *up]


def shadow_map_size(render_size: int) -> int:
    """Four shadow-map texels per frame pixel, a power of two in [512, 2048]: the same picture
    as MuJoCo's default 4096 at CLIP's resolutions, and much less rasterizer time per frame."""
    size = 512
    while size < 4 * render_size and size < 2048:
        size *= 2
    return size


def humanoid_model(textured: bool = True, render_size: int | None = None) -> mujoco.MjModel:
    """The compiled scene; the offscreen buffer and shadow map are sized for ``render_size``."""
    model = humanoid_spec(textured).compile()
    if render_size is not None:
        model.vis.quality.shadowsize = shadow_map_size(render_size)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, render_size)
        model.vis.global_.offheight = max(model.vis.global_.offheight, render_size)
    return model


class HumanoidPoseEnv(HumanoidEnv):
    """gymnasium's Humanoid-v5 on the paper's scene: no early termination, rendered by our camera.

    Use with a time limit (``episode_length``); the VecEnv and ``make_single_env`` add it.
    """

    def __init__(self, textured: bool = True, render_mode: str | None = "rgb_array", width: int = DEFAULT_RENDER_SIZE, height: int = DEFAULT_RENDER_SIZE, **kwargs):
        self._textured = textured
        kwargs.setdefault("terminate_when_unhealthy", False)
        super().__init__(
            xml_file=gymnasium_humanoid_xml(),
            render_mode=render_mode,
            width=width,
            height=height,
            camera_name=CAMERA_NAME,
            **kwargs,
        )

    def _initialize_simulation(self):
        model = humanoid_model(self._textured, max(self.width, self.height))
        return model, mujoco.MjData(model)


# ------------------------------------------------------------------ batched quantities
# The batch engine computes observations and the environment's reward for all
# envs at once from the fields the simulator copies out after each step (the
# same mjData fields, at the same moment, that Humanoid-v5 reads).


class HumanoidBatch:
    """Humanoid-v5's observation, reward and info for the batch engine (terminate_when_unhealthy=False)."""

    frame_skip = FRAME_SKIP
    reset_noise_scale = RESET_NOISE_SCALE
    camera = CAMERA_NAME
    outputs = ("qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext", "xipos")

    def __init__(self, textured: bool = True):
        self.textured = textured

    def build_model(self, render_size: int) -> mujoco.MjModel:
        return humanoid_model(self.textured, render_size)

    def observation(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        n = fields["qpos"].shape[0]
        return np.concatenate(
            [
                fields["qpos"][:, 2:],
                fields["qvel"],
                fields["cinert"].reshape(n, -1, 10)[:, 1:].reshape(n, -1),
                fields["cvel"].reshape(n, -1, 6)[:, 1:].reshape(n, -1),
                fields["qfrc_actuator"][:, 6:],
                fields["cfrc_ext"].reshape(n, -1, 6)[:, 1:].reshape(n, -1),
            ],
            axis=1,
        )

    @staticmethod
    def mass_center_xy(model: mujoco.MjModel, fields: dict[str, np.ndarray]) -> np.ndarray:
        """(N, 2) mass-weighted centre of the bodies, as gymnasium's ``mass_center``."""
        xipos = fields["xipos"].reshape(fields["xipos"].shape[0], -1, 3)
        return (np.einsum("b,nbj->nj", model.body_mass, xipos) / model.body_mass.sum())[:, :2]

    def reward(self, model: mujoco.MjModel, dt: float, xy_before: np.ndarray, fields: dict[str, np.ndarray], ctrl: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        xy_after = self.mass_center_xy(model, fields)
        velocity = (xy_after - xy_before) / dt
        z = fields["qpos"][:, 2]
        healthy = ((HEALTHY_Z_RANGE[0] < z) & (z < HEALTHY_Z_RANGE[1])) * HEALTHY_REWARD
        forward = FORWARD_REWARD_WEIGHT * velocity[:, 0]
        ctrl_cost = CTRL_COST_WEIGHT * np.sum(np.square(ctrl), axis=1)
        contact = np.clip(CONTACT_COST_WEIGHT * np.sum(np.square(fields["cfrc_ext"]), axis=1), -np.inf, CONTACT_COST_MAX)
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
