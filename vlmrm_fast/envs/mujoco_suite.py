"""gymnasium's MuJoCo v5 suite as vector tasks: one row per task (:data:`SUITE`), one
:class:`SuiteVectorTask` for all of them.

Each row is gymnasium's env of that id as the simulator env runs it: gymnasium's own model file, frame
skip, weights and ranges (read from the env class's signature, so they are gymnasium's wherever it
keeps them), and its observation, reward, termination, infos and reset written here for every env
at once, the same numpy operations on the same values in the same order, so that they equal
gymnasium's to the bit (``python_tests/test_mujoco_suite.py`` compares them step by step over whole
episodes). gymnasium computes them one env at a time in Python; here they are arrays over the envs,
which is the point of the simulator env.

What is worth knowing of gymnasium's rules, kept here on purpose:

* actions enter the control costs as the caller gave them (a float32 action gives a float32 cost, as
  in gymnasium), except Humanoid and HumanoidStandup, which read ``data.ctrl`` (float64);
* the forward velocity is the change over a step of ``qpos[0]`` (HalfCheetah, Hopper, Walker2d),
  ``qpos[0:2]`` (Swimmer), the torso's ``xpos`` (Ant) or the centre of mass from ``xipos`` (Humanoid);
  ``xpos``/``xipos`` after ``mj_step`` are those of its last forward pass, and so are ours (the same
  ``mjData`` fields, copied out after the step);
* a norm of one env's vector is taken one env at a time (:func:`_norms`): numpy's ``linalg.norm`` of a
  vector calls BLAS's dot, whose rounding a reduction over a batch need not share.

Frames: gymnasium's ``render()`` draws a *free* camera (its ``MujocoRenderer`` forces one when no
camera is named), set from the env's ``default_camera_config``; ``trackbodyid`` does nothing on a
free camera, so the view is fixed in the world. Where the config gives no ``lookat`` (Ant,
HalfCheetah, Swimmer, Reacher, Pusher, InvertedPendulum, InvertedDoublePendulum), gymnasium aims the
camera at the median of the geoms' positions when ``render()`` is first called, that is at each env's
first reset state; here it is the median at the model's initial pose (:func:`camera_config`), the
same for every env. The batch renderers draw it as a fixed model camera, :data:`GYMNASIUM_VIEW`, whose
frames equal the free camera's pixel for pixel, and the gymnasium envs of ``physics="gym"`` are given
the same config, so both paths draw one picture. ``Ant-v5@track`` draws the model's own ``track``
camera instead (it follows the body), on both paths.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import mujoco
import numpy as np
from gymnasium.envs.mujoco.ant_v5 import AntEnv
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv
from gymnasium.envs.mujoco.humanoid_v5 import HumanoidEnv
from gymnasium.envs.mujoco.humanoidstandup_v5 import HumanoidStandupEnv
from gymnasium.envs.mujoco.inverted_double_pendulum_v5 import InvertedDoublePendulumEnv
from gymnasium.envs.mujoco.inverted_pendulum_v5 import InvertedPendulumEnv
from gymnasium.envs.mujoco.mujoco_env import expand_model_path
from gymnasium.envs.mujoco.pusher_v5 import PusherEnv
from gymnasium.envs.mujoco.reacher_v5 import ReacherEnv
from gymnasium.envs.mujoco.swimmer_v5 import SwimmerEnv
from gymnasium.envs.mujoco.walker2d_v5 import Walker2dEnv

from vlmrm_fast.envs.humanoid import free_camera_pose
from vlmrm_fast.physics.simulator import OutputSpec, UniformNoise

#: The model camera that sees what gymnasium's default free camera sees (added to every suite model).
GYMNASIUM_VIEW = "vlmrm_gymnasium"
#: gymnasium's default frame size (``MujocoEnv``'s width and height).
DEFAULT_RENDER_SIZE = 480

Fields = dict[str, Any]  # the simulator's outputs: numpy arrays (N, width), or torch tensors on a device


# ------------------------------------------------------------------ what every row shares
def gymnasium_defaults(env_class: type) -> dict[str, Any]:
    """The keyword defaults of ``env_class.__init__``: gymnasium's weights, ranges, frame skip, model file."""
    return {
        name: parameter.default
        for name, parameter in inspect.signature(env_class.__init__).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


class Params:
    """A row's constants: gymnasium's defaults (``p["ctrl_cost_weight"]``) and what its model fixes."""

    def __init__(self, defaults: dict[str, Any], model: mujoco.MjModel) -> None:
        self.defaults = defaults
        self.model = model
        self.init_qpos = model.qpos0.copy()
        self.body_mass = model.body_mass.copy()

    def __getitem__(self, name: str) -> Any:
        return self.defaults[name]

    def body(self, name: str | int) -> int:
        """A body's index, given as gymnasium names it (a name, or an index)."""
        return name if isinstance(name, int) else self.model.body(name).id


def _cat(parts: Sequence[Any]) -> Any:
    """Concatenation along the env's row: numpy in, numpy out; torch in (device outputs), torch out."""
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=1)
    import torch

    return torch.cat(list(parts), dim=1)


def _contiguous(x: Any) -> Any:
    """numpy's sin and cos take another loop for strided input; gymnasium's input is contiguous."""
    return np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x


def _sin(x: Any) -> Any:
    return np.sin(_contiguous(x)) if isinstance(x, np.ndarray) else x.sin()


def _cos(x: Any) -> Any:
    return np.cos(_contiguous(x)) if isinstance(x, np.ndarray) else x.cos()


def _clip(x: Any, low: float, high: float) -> Any:
    return np.clip(x, low, high) if isinstance(x, np.ndarray) else x.clip(low, high)


def _norms(vectors: np.ndarray) -> np.ndarray:
    """``np.linalg.norm`` of each row, one row at a time (see the module docstring)."""
    return np.array([np.linalg.norm(vector) for vector in vectors])


def _square_sum(x: np.ndarray) -> np.ndarray:
    """Each row's ``np.sum(np.square(row))``, in the row's dtype (numpy reduces each row as it reduces one)."""
    return np.sum(np.square(x), axis=1)


def _rows(field: Any, width: int) -> Any:
    """A flattened per-env field as (N, k, width): ``xpos`` as (N, nbody, 3), ``cfrc_ext`` as (N, nbody, 6)."""
    return field.reshape(field.shape[0], -1, width)


def _body_xy(p: Params, fields: Fields, body: str | int) -> np.ndarray:
    return _rows(fields["xpos"], 3)[:, p.body(body), :2]


def _mass_center_xy(p: Params, fields: Fields) -> np.ndarray:
    """Humanoid-v5's ``mass_center`` of every env, one env at a time (gymnasium's einsum over one env)."""
    xipos = _rows(fields["xipos"], 3)
    mass = p.body_mass
    return np.array([(np.einsum("b,bj->j", mass, env) / mass.sum())[0:2] for env in xipos])


# ------------------------------------------------------------------ the locomotion tasks
def _velocity(before: np.ndarray, after: np.ndarray, dt: float) -> np.ndarray:
    return (after - before) / dt


def _ant_contact_forces(p: Params, fields: Fields) -> Any:
    low, high = p["contact_force_range"]
    return _clip(fields["cfrc_ext"], low, high)


def _ant_healthy(p: Params, fields: Fields) -> np.ndarray:
    state = np.concatenate([fields["qpos"], fields["qvel"]], axis=1)
    low, high = p["healthy_z_range"]
    return np.isfinite(state).all(axis=1) & (low <= state[:, 2]) & (state[:, 2] <= high)


def _ant_obs(p: Params, fields: Fields) -> Any:
    parts = [fields["qpos"][:, 2:], fields["qvel"]]
    if p["include_cfrc_ext_in_observation"]:
        parts.append(_ant_contact_forces(p, fields)[:, 6:])
    return _cat(parts)


def _ant_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    after = _body_xy(p, fields, p["main_body"])
    velocity = _velocity(before, after, dt)
    forward = velocity[:, 0] * p["forward_reward_weight"]
    healthy = _ant_healthy(p, fields) * p["healthy_reward"]
    ctrl_cost = p["ctrl_cost_weight"] * _square_sum(actions)
    contact_cost = p["contact_cost_weight"] * _square_sum(_ant_contact_forces(p, fields))
    reward = (forward + healthy) - (ctrl_cost + contact_cost)
    qpos = fields["qpos"]
    return reward, {
        "x_position": qpos[:, 0],
        "y_position": qpos[:, 1],
        "distance_from_origin": _norms(qpos[:, 0:2]),
        "x_velocity": velocity[:, 0],
        "y_velocity": velocity[:, 1],
        "reward_forward": forward,
        "reward_ctrl": -ctrl_cost,
        "reward_contact": -contact_cost,
        "reward_survive": healthy,
    }


def _half_cheetah_obs(p: Params, fields: Fields) -> Any:
    return _cat([fields["qpos"][:, 1:], fields["qvel"]])


def _half_cheetah_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    after = fields["qpos"][:, 0]
    velocity = _velocity(before[:, 0], after, dt)
    forward = p["forward_reward_weight"] * velocity
    ctrl_cost = p["ctrl_cost_weight"] * _square_sum(actions)
    return forward - ctrl_cost, {
        "x_position": after,
        "x_velocity": velocity,
        "reward_forward": forward,
        "reward_ctrl": -ctrl_cost,
    }


def _planar_walker_obs(p: Params, fields: Fields) -> Any:
    """Hopper's and Walker2d's: qpos without x, qvel clipped to [-10, 10]."""
    return _cat([fields["qpos"][:, 1:], _clip(fields["qvel"], -10, 10)])


def _hopper_healthy(p: Params, fields: Fields) -> np.ndarray:
    qpos = fields["qpos"]
    state = np.concatenate([qpos, fields["qvel"]], axis=1)[:, 2:]
    z, angle = qpos[:, 1], qpos[:, 2]
    state_low, state_high = p["healthy_state_range"]
    z_low, z_high = p["healthy_z_range"]
    angle_low, angle_high = p["healthy_angle_range"]
    healthy_state = np.all(np.logical_and(state_low < state, state < state_high), axis=1)
    return healthy_state & (z_low < z) & (z < z_high) & (angle_low < angle) & (angle < angle_high)


def _walker_healthy(p: Params, fields: Fields) -> np.ndarray:
    z, angle = fields["qpos"][:, 1], fields["qpos"][:, 2]
    z_low, z_high = p["healthy_z_range"]
    angle_low, angle_high = p["healthy_angle_range"]
    return (z_low < z) & (z < z_high) & (angle_low < angle) & (angle < angle_high)


def _planar_walker_reward(healthy_rule: Callable[[Params, Fields], np.ndarray]):
    def reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
        qpos = fields["qpos"]
        velocity = _velocity(before[:, 0], qpos[:, 0], dt)
        forward = p["forward_reward_weight"] * velocity
        healthy = healthy_rule(p, fields) * p["healthy_reward"]
        ctrl_cost = p["ctrl_cost_weight"] * _square_sum(actions)
        return (forward + healthy) - ctrl_cost, {
            "x_position": qpos[:, 0],
            "z_distance_from_origin": qpos[:, 1] - p.init_qpos[1],
            "x_velocity": velocity,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_survive": healthy,
        }

    return reward


def _swimmer_obs(p: Params, fields: Fields) -> Any:
    return _cat([fields["qpos"][:, 2:], fields["qvel"]])


def _swimmer_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    after = fields["qpos"][:, 0:2]
    velocity = _velocity(before, after, dt)
    forward = p["forward_reward_weight"] * velocity[:, 0]
    ctrl_cost = p["ctrl_cost_weight"] * _square_sum(actions)
    return forward - ctrl_cost, {
        "x_position": after[:, 0],
        "y_position": after[:, 1],
        "distance_from_origin": _norms(after),
        "x_velocity": velocity[:, 0],
        "y_velocity": velocity[:, 1],
        "reward_forward": forward,
        "reward_ctrl": -ctrl_cost,
    }


def _humanoid_obs(p: Params, fields: Fields) -> Any:
    """Humanoid-v5's and HumanoidStandup-v5's observation."""
    parts = [fields["qpos"][:, 2:], fields["qvel"]]
    for field, first, flag in (  # each without the world body's entries (qfrc_actuator: the free joint's)
        ("cinert", 10, "include_cinert_in_observation"),
        ("cvel", 6, "include_cvel_in_observation"),
        ("qfrc_actuator", 6, "include_qfrc_actuator_in_observation"),
        ("cfrc_ext", 6, "include_cfrc_ext_in_observation"),
    ):
        if p[flag]:
            parts.append(fields[field][:, first:])
    return _cat(parts)


def _tendons(fields: Fields) -> dict[str, np.ndarray]:
    return {"tendon_length": fields["ten_length"].copy(), "tendon_velocity": fields["ten_velocity"].copy()}


def _humanoid_healthy(p: Params, fields: Fields) -> np.ndarray:
    low, high = p["healthy_z_range"]
    z = fields["qpos"][:, 2]
    return (low < z) & (z < high)


def _humanoid_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    velocity = _velocity(before, _mass_center_xy(p, fields), dt)
    forward = p["forward_reward_weight"] * velocity[:, 0]
    healthy = _humanoid_healthy(p, fields) * p["healthy_reward"]
    ctrl_cost = p["ctrl_cost_weight"] * _square_sum(fields["ctrl"])
    contact_cost = np.clip(p["contact_cost_weight"] * _square_sum(fields["cfrc_ext"]), *p["contact_cost_range"])
    reward = (forward + healthy) - (ctrl_cost + contact_cost)
    qpos = fields["qpos"]
    return reward, {
        "x_position": qpos[:, 0],
        "y_position": qpos[:, 1],
        **_tendons(fields),
        "distance_from_origin": _norms(qpos[:, 0:2]),
        "x_velocity": velocity[:, 0],
        "y_velocity": velocity[:, 1],
        "reward_survive": healthy,
        "reward_forward": forward,
        "reward_ctrl": -ctrl_cost,
        "reward_contact": -contact_cost,
    }


def _standup_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    qpos = fields["qpos"]
    uph_cost = (qpos[:, 2] - 0) / p.model.opt.timestep
    quad_ctrl_cost = p["ctrl_cost_weight"] * _square_sum(fields["ctrl"])
    quad_impact_cost = np.clip(p["impact_cost_weight"] * _square_sum(fields["cfrc_ext"]), *p["impact_cost_range"])
    reward = uph_cost - quad_ctrl_cost - quad_impact_cost + 1
    return reward, {
        "x_position": qpos[:, 0],
        "y_position": qpos[:, 1],
        "z_distance_from_origin": qpos[:, 2] - p.init_qpos[2],
        **_tendons(fields),
        "reward_linup": uph_cost,
        "reward_quadctrl": -quad_ctrl_cost,
        "reward_impact": -quad_impact_cost,
    }


# ------------------------------------------------------------------ the arms and the pendulums
def _reacher_obs(p: Params, fields: Fields) -> Any:
    qpos, xpos = fields["qpos"], _rows(fields["xpos"], 3)
    to_target = xpos[:, p.body("fingertip")] - xpos[:, p.body("target")]
    return _cat([_cos(qpos[:, :2]), _sin(qpos[:, :2]), qpos[:, 2:], fields["qvel"][:, :2], to_target[:, :2]])


def _reacher_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    xpos = _rows(fields["xpos"], 3)
    to_target = xpos[:, p.body("fingertip")] - xpos[:, p.body("target")]
    reward_dist = -_norms(to_target) * p["reward_dist_weight"]
    reward_ctrl = -_square_sum(actions) * p["reward_control_weight"]
    return reward_dist + reward_ctrl, {"reward_dist": reward_dist, "reward_ctrl": reward_ctrl}


def _pusher_obs(p: Params, fields: Fields) -> Any:
    xpos = _rows(fields["xpos"], 3)
    bodies = [xpos[:, p.body(name)] for name in ("tips_arm", "object", "goal")]
    return _cat([fields["qpos"][:, :7], fields["qvel"][:, :7], *bodies])


def _pusher_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    xpos = _rows(fields["xpos"], 3)
    tips_arm, item, goal = (xpos[:, p.body(name)] for name in ("tips_arm", "object", "goal"))
    reward_near = -_norms(item - tips_arm) * p["reward_near_weight"]
    reward_dist = -_norms(item - goal) * p["reward_dist_weight"]
    reward_ctrl = -_square_sum(actions) * p["reward_control_weight"]
    reward = reward_dist + reward_ctrl + reward_near
    return reward, {"reward_dist": reward_dist, "reward_ctrl": reward_ctrl, "reward_near": reward_near}


def _pendulum_obs(p: Params, fields: Fields) -> Any:
    return _cat([fields["qpos"], fields["qvel"]])


def _pendulum_terminated(p: Params, fields: Fields) -> np.ndarray:
    obs = _pendulum_obs(p, fields)
    return ~np.isfinite(obs).all(axis=1) | (np.abs(obs[:, 1]) > 0.2)


def _pendulum_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    survive = (~_pendulum_terminated(p, fields)).astype(np.int64)  # gymnasium's int(not terminated)
    return survive.astype(np.float64), {"reward_survive": survive}


def _double_pendulum_obs(p: Params, fields: Fields) -> Any:
    qpos, qvel = fields["qpos"], fields["qvel"]
    return _cat(
        [
            qpos[:, :1],
            _sin(qpos[:, 1:]),
            _cos(qpos[:, 1:]),
            _clip(qvel, -10, 10),
            _clip(fields["qfrc_constraint"], -10, 10)[:, :1],
        ]
    )


def _double_pendulum_terminated(p: Params, fields: Fields) -> np.ndarray:
    return fields["site_xpos"][:, 2] <= 1


def _double_pendulum_reward(p: Params, fields: Fields, actions: np.ndarray, before: np.ndarray, dt: float):
    x, y = fields["site_xpos"][:, 0], fields["site_xpos"][:, 2]
    v1, v2 = fields["qvel"][:, 1], fields["qvel"][:, 2]
    dist_penalty = 0.01 * x**2 + (y - 2) ** 2
    vel_penalty = 1e-3 * v1**2 + 5e-3 * v2**2
    alive_bonus = p["healthy_reward"] * (~_double_pendulum_terminated(p, fields)).astype(np.int64)
    reward = alive_bonus - dist_penalty - vel_penalty
    return reward, {
        "reward_survive": alive_bonus,
        "distance_penalty": -dist_penalty,
        "velocity_penalty": -vel_penalty,
    }


# ------------------------------------------------------------------ resets
@dataclasses.dataclass(frozen=True)
class UniformNormalNoise:
    """qpos + U(-scale, scale), qvel + scale x N(0, 1), one env at a time (Ant's, HalfCheetah's and
    InvertedDoublePendulum's ``reset_model``: a normal draw takes a variable number of bits)."""

    scale: float

    def draw(self, rngs: Sequence[np.random.Generator], qpos: np.ndarray, qvel: np.ndarray) -> None:
        for rng, positions, velocities in zip(rngs, qpos, qvel, strict=True):
            positions += rng.uniform(low=-self.scale, high=self.scale, size=positions.size)
            velocities += self.scale * rng.standard_normal(velocities.size)


class ReacherNoise:
    """Reacher-v5's ``reset_model``: the arm's angles and the target's position drawn, the target at rest."""

    def draw(self, rngs: Sequence[np.random.Generator], qpos: np.ndarray, qvel: np.ndarray) -> None:
        for rng, positions, velocities in zip(rngs, qpos, qvel, strict=True):
            positions[:] = rng.uniform(low=-0.1, high=0.1, size=positions.size) + positions
            while True:
                goal = rng.uniform(low=-0.2, high=0.2, size=2)
                if np.linalg.norm(goal) < 0.2:
                    break
            positions[-2:] = goal
            velocities += rng.uniform(low=-0.005, high=0.005, size=velocities.size)
            velocities[-2:] = 0


class PusherNoise:
    """Pusher-v5's ``reset_model``: the cylinder drawn away from the goal at the origin, both at rest."""

    def draw(self, rngs: Sequence[np.random.Generator], qpos: np.ndarray, qvel: np.ndarray) -> None:
        goal = np.asarray([0, 0])
        for rng, positions, velocities in zip(rngs, qpos, qvel, strict=True):
            while True:
                cylinder = np.concatenate(
                    [rng.uniform(low=-0.3, high=0, size=1), rng.uniform(low=-0.2, high=0.2, size=1)]
                )
                if np.linalg.norm(cylinder - goal) > 0.17:
                    break
            positions[-4:-2] = cylinder
            positions[-2:] = goal
            velocities += rng.uniform(low=-0.005, high=0.005, size=velocities.size)
            velocities[-4:] = 0


def _uniform(defaults: dict[str, Any]) -> Any:
    return UniformNoise(defaults["reset_noise_scale"])


def _uniform_normal(defaults: dict[str, Any]) -> Any:
    return UniformNormalNoise(defaults["reset_noise_scale"])


# ------------------------------------------------------------------ the rows
Reward = Callable[[Params, Fields, np.ndarray, np.ndarray, float], tuple[np.ndarray, dict[str, np.ndarray]]]


@dataclasses.dataclass(frozen=True)
class SuiteRow:
    """One task of the suite: gymnasium's id and env class, the prompts, the simulator's outputs it reads,
    and its rules (observation, reward and infos, termination, reset noise), each over every env at
    once. ``before``: what the reward needs of the state before a step (a velocity's start), or None."""

    env_id: str
    env_class: type
    target: str
    baseline: str
    outputs: tuple[OutputSpec, ...]
    observe: Callable[[Params, Fields], Any]
    reward: Reward
    reset_noise: Callable[[dict[str, Any]], Any]
    terminated: Callable[[Params, Fields], np.ndarray] | None = None
    before: Callable[[Params, Fields], np.ndarray] | None = None

    @functools.cached_property
    def defaults(self) -> dict[str, Any]:
        return gymnasium_defaults(self.env_class)

    @property
    def frame_skip(self) -> int:
        return int(self.defaults["frame_skip"])

    @property
    def episode_length(self) -> int:
        return int(gymnasium.spec(self.env_id).max_episode_steps)

    @property
    def model_path(self) -> str:
        return expand_model_path(self.defaults["xml_file"])


_QPOS_VELOCITY: tuple[OutputSpec, ...] = ("qpos", "qvel")
_HUMANOID_FIELDS: tuple[OutputSpec, ...] = (
    "qpos",
    "qvel",
    "cinert",
    "cvel",
    "qfrc_actuator",
    "cfrc_ext",
    "ctrl",
    "ten_length",
    "ten_velocity",
)

SUITE: dict[str, SuiteRow] = {
    row.env_id: row
    for row in (
        SuiteRow(
            "Ant-v5",
            AntEnv,
            "a four-legged robot walking forward",
            "a four-legged robot",
            ("qpos", "qvel", "cfrc_ext", "xpos"),
            _ant_obs,
            _ant_reward,
            _uniform_normal,
            terminated=lambda p, f: ~_ant_healthy(p, f) & p["terminate_when_unhealthy"],
            before=lambda p, f: _body_xy(p, f, p["main_body"]).copy(),
        ),
        SuiteRow(
            "HalfCheetah-v5",
            HalfCheetahEnv,
            "a cheetah robot running forward",
            "a cheetah robot",
            _QPOS_VELOCITY,
            _half_cheetah_obs,
            _half_cheetah_reward,
            _uniform_normal,
            before=lambda p, f: f["qpos"][:, :1].copy(),
        ),
        SuiteRow(
            "Hopper-v5",
            HopperEnv,
            "a one-legged robot hopping forward",
            "a one-legged robot",
            _QPOS_VELOCITY,
            _planar_walker_obs,
            _planar_walker_reward(_hopper_healthy),
            _uniform,
            terminated=lambda p, f: ~_hopper_healthy(p, f) & p["terminate_when_unhealthy"],
            before=lambda p, f: f["qpos"][:, :1].copy(),
        ),
        SuiteRow(
            "Walker2d-v5",
            Walker2dEnv,
            "a two-legged robot walking forward",
            "a two-legged robot",
            _QPOS_VELOCITY,
            _planar_walker_obs,
            _planar_walker_reward(_walker_healthy),
            _uniform,
            terminated=lambda p, f: ~_walker_healthy(p, f) & p["terminate_when_unhealthy"],
            before=lambda p, f: f["qpos"][:, :1].copy(),
        ),
        SuiteRow(
            "Swimmer-v5",
            SwimmerEnv,
            "a snake-like robot swimming forward",
            "a snake-like robot",
            _QPOS_VELOCITY,
            _swimmer_obs,
            _swimmer_reward,
            _uniform,
            before=lambda p, f: f["qpos"][:, 0:2].copy(),
        ),
        SuiteRow(
            "Humanoid-v5",
            HumanoidEnv,
            "a humanoid robot running forward",
            "a humanoid robot",
            (*_HUMANOID_FIELDS, "xipos"),
            _humanoid_obs,
            _humanoid_reward,
            _uniform,
            terminated=lambda p, f: ~_humanoid_healthy(p, f) & p["terminate_when_unhealthy"],
            before=_mass_center_xy,
        ),
        SuiteRow(
            "HumanoidStandup-v5",
            HumanoidStandupEnv,
            "a humanoid robot standing up",
            "a humanoid robot",
            _HUMANOID_FIELDS,
            _humanoid_obs,
            _standup_reward,
            _uniform,
        ),
        SuiteRow(
            "Reacher-v5",
            ReacherEnv,
            "a robot arm touching the red dot with its fingertip",
            "a robot arm",
            ("qpos", "qvel", "xpos"),
            _reacher_obs,
            _reacher_reward,
            lambda defaults: ReacherNoise(),
        ),
        SuiteRow(
            "Pusher-v5",
            PusherEnv,
            "a robot arm pushing the white cylinder onto the red circle",
            "a robot arm and a white cylinder",
            ("qpos", "qvel", "xpos"),
            _pusher_obs,
            _pusher_reward,
            lambda defaults: PusherNoise(),
        ),
        SuiteRow(
            "InvertedPendulum-v5",
            InvertedPendulumEnv,
            "a pole balanced upright on top of a cart",
            "a pole and a cart",
            _QPOS_VELOCITY,
            _pendulum_obs,
            _pendulum_reward,
            _uniform,
            terminated=_pendulum_terminated,
        ),
        SuiteRow(
            "InvertedDoublePendulum-v5",
            InvertedDoublePendulumEnv,
            "a pole of two links balanced upright on top of a cart",
            "a pole of two links and a cart",
            ("qpos", "qvel", "qfrc_constraint", ("site_xpos", 0, 3)),
            _double_pendulum_obs,
            _double_pendulum_reward,
            _uniform_normal,
            terminated=_double_pendulum_terminated,
        ),
    )
}


# ------------------------------------------------------------------ models and cameras
@functools.cache
def camera_config(env_id: str) -> dict[str, Any]:
    """The free camera gymnasium's ``render()`` draws ``env_id`` with: ``MjvCamera``'s defaults, the
    ``OffScreenViewer``'s lookat and distance, then the env's ``default_camera_config``; a lookat it
    leaves to the viewer is the median of the geoms' positions at the model's initial pose (gymnasium
    takes them at the first ``render()``); ``trackbodyid`` dropped (nothing on a free camera)."""
    row = SUITE[env_id]
    model = mujoco.MjModel.from_xml_path(row.model_path)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    camera = mujoco.MjvCamera()
    config: dict[str, Any] = {
        "lookat": np.median(data.geom_xpos, axis=0),
        "distance": float(model.stat.extent),
        "azimuth": float(camera.azimuth),
        "elevation": float(camera.elevation),
    }
    for key, value in (row.defaults.get("default_camera_config") or {}).items():
        if key in config:
            config[key] = np.asarray(value, dtype=np.float64) if key == "lookat" else float(value)
    return config


def model_cameras(env_id: str) -> list[str]:
    """The camera names a suite task can draw from: gymnasium's view, then its model's own cameras."""
    model = mujoco.MjModel.from_xml_path(SUITE[env_id].model_path)
    named = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
    return [GYMNASIUM_VIEW, *[name for name in named if name]]


def suite_model(env_id: str, render_size: int | None = None) -> mujoco.MjModel:
    """gymnasium's model of ``env_id`` with :data:`GYMNASIUM_VIEW` added (a fixed world camera: no body
    moves, the physics is gymnasium's to the bit) and its offscreen buffer grown to ``render_size``, as
    gymnasium grows it for its width and height."""
    spec = mujoco.MjSpec.from_file(SUITE[env_id].model_path)
    config = camera_config(env_id)
    position, xyaxes = free_camera_pose(config["lookat"], config["distance"], config["elevation"], config["azimuth"])
    spec.worldbody.add_camera(
        name=GYMNASIUM_VIEW,
        mode=mujoco.mjtCamLight.mjCAMLIGHT_FIXED,
        pos=position,
        xyaxes=xyaxes,
        fovy=spec.visual.global_.fovy,  # the free camera's field of view
    )
    with warnings.catch_warnings():
        # half_cheetah.xml's settotalmass: MuJoCo prints its deprecation for gymnasium's file itself, as for gymnasium
        warnings.filterwarnings("ignore", message="compiler attribute 'settotalmass' is deprecated")
        model = spec.compile()
    if render_size is not None:
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, render_size)
        model.vis.global_.offheight = max(model.vis.global_.offheight, render_size)
    return model


def check_camera(env_id: str, camera: str) -> str:
    """``camera`` when ``env_id``'s model has it; otherwise one line naming the cameras it has."""
    cameras = model_cameras(env_id)
    if camera not in cameras:
        raise ValueError(
            f"task '{env_id}@{camera}': {env_id}'s model has no camera {camera!r}; its cameras are "
            f"{', '.join(repr(name) for name in cameras)} (the first, gymnasium's default view, is what '{env_id}' "
            "draws); name one after the '@', or add a camera to your own model"
        )
    return camera


def make_env(env_id: str, camera: str = GYMNASIUM_VIEW) -> Callable[..., gymnasium.Env]:
    """A factory of gymnasium's own env of ``env_id``, drawing what the simulator env draws: gymnasium's view
    with its lookat fixed as :func:`camera_config` fixes it, or a camera of the model by name."""

    def make(render_mode: str | None = "rgb_array", solver: str | None = None, **kwargs: Any) -> gymnasium.Env:
        if camera == GYMNASIUM_VIEW:
            kwargs.setdefault("default_camera_config", camera_config(env_id))
        else:
            kwargs.setdefault("camera_name", camera)
        env = gymnasium.make(env_id, render_mode=render_mode, **kwargs)
        if solver is not None:
            from vlmrm_fast.physics.solver import SOLVERS

            env.unwrapped.model.opt.solver = SOLVERS[solver]
        return env

    return make


# ------------------------------------------------------------------ the vector task
class SuiteVectorTask:
    """A suite task as the simulator env runs it (a :class:`~vlmrm_fast.envs.vector_task.VectorTask`), drawn
    from ``camera`` (default gymnasium's view)."""

    def __init__(self, env_id: str, camera: str = GYMNASIUM_VIEW) -> None:
        self.row = SUITE[env_id]
        self._camera = camera
        self.frame_skip = self.row.frame_skip
        self.reset_noise = self.row.reset_noise(self.row.defaults)
        self.outputs = self.row.outputs
        self._params: Params | None = None

    @property
    def camera(self) -> str:
        return self._camera

    @property
    def params(self) -> Params:
        if self._params is None:
            self._params = Params(self.row.defaults, mujoco.MjModel.from_xml_path(self.row.model_path))
        return self._params

    def build_model(self, render_size: int) -> mujoco.MjModel:
        return suite_model(self.row.env_id, render_size)

    def observation(self, fields: Fields) -> Any:
        """The task's observation of every env: numpy in, numpy out; torch tensors in, torch out."""
        return self.row.observe(self.params, fields)

    def terminated(self, fields: Fields) -> np.ndarray:
        if self.row.terminated is None:
            return np.zeros(fields["qpos"].shape[0], dtype=bool)
        return np.asarray(self.row.terminated(self.params, fields), dtype=bool)

    def step_reward(self, model: mujoco.MjModel, num_envs: int) -> SuiteStepReward:
        return SuiteStepReward(self.row, self.params, num_envs)


class SuiteStepReward:
    """A suite task's reward and infos of a step, with each env's state before it where the reward needs
    one (:attr:`SuiteRow.before`)."""

    def __init__(self, row: SuiteRow, params: Params, num_envs: int) -> None:
        self.row, self.params = row, params
        self._before: np.ndarray | None = None
        self._num_envs = num_envs

    def before_step(self, fields: Fields, rows: slice) -> None:
        if self.row.before is None:
            return
        values = self.row.before(self.params, {key: value[rows] for key, value in fields.items()})
        if self._before is None:
            self._before = np.zeros((self._num_envs, *values.shape[1:]))
        self._before[rows] = values

    def __call__(self, fields: Fields, actions: np.ndarray, dt: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        before = self._before if self._before is not None else np.zeros((len(actions), 0))
        rewards, infos = self.row.reward(self.params, fields, np.asarray(actions), before, dt)
        return np.asarray(rewards, dtype=np.float64), infos
