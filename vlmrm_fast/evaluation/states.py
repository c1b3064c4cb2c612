"""Full environment states: read, write, name, sample and render them.

A state is a flat float64 vector that fixes what the camera sees:

* MuJoCo tasks: ``concat(qpos, qvel)``, written back with ``set_state``; the
  entries are named ``qpos:<joint>`` (``qpos:<joint>:x`` ... for free and ball
  joints) and ``qvel:<joint>``, and ``qpos[i]`` works too.
* CartPole: ``cart_position, cart_velocity, pole_angle, pole_angular_velocity``.
* MountainCar (both, and the textured one): ``position, velocity``.
* Any other env with a ``state`` array: ``state[i]``.

:func:`render_states` is the one frame source of this package: everything that
turns states into pictures goes through it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import zipfile
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from PIL import Image

from vlmrm_fast.envs import TaskSpec, get_task
from vlmrm_fast.progress import progress_bar, progress_iter

_CLASSIC_NAMES = {
    "CartPoleEnv": ("cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"),
    "MountainCarEnv": ("position", "velocity"),
    "Continuous_MountainCarEnv": ("position", "velocity"),
}


@dataclasses.dataclass(frozen=True)
class StateAccess:
    """How to read and write one kind of environment's full state."""

    kind: str  # "mujoco" or "classic"
    names: tuple[str, ...]
    get: Callable[[gymnasium.Env], np.ndarray]
    set: Callable[[gymnasium.Env, np.ndarray], None]

    def index(self, variable: str) -> int:
        """Position of a named state variable (``pole_angle``, ``qpos:right_knee``, ``qpos[7]``, ``state[2]``)."""
        if variable in self.names:
            return self.names.index(variable)
        for prefix, offset, count in self._indexed_groups():
            if variable.startswith(prefix + "[") and variable.endswith("]"):
                try:
                    i = int(variable[len(prefix) + 1 : -1])
                except ValueError:
                    break
                if 0 <= i < count:
                    return offset + i
                raise ValueError(f"{variable!r}: index out of range, {prefix} has {count} entries")
        raise ValueError(f"unknown state variable {variable!r}; this task's variables are: {', '.join(self.names)}")

    def _indexed_groups(self) -> list[tuple[str, int, int]]:
        if self.kind == "mujoco":
            nq = sum(1 for n in self.names if n.startswith("qpos:"))
            return [("qpos", 0, nq), ("qvel", nq, len(self.names) - nq)]
        return [("state", 0, len(self.names))]


def state_access(env: gymnasium.Env) -> StateAccess:
    """The :class:`StateAccess` for ``env`` (MuJoCo, CartPole, MountainCar or any env with ``state``)."""
    base = env.unwrapped
    if hasattr(base, "set_state") and hasattr(base, "data") and hasattr(base, "model"):
        names = _mujoco_names(base.model)
        nq = base.model.nq

        def get(e: gymnasium.Env) -> np.ndarray:
            d = e.unwrapped.data
            return np.concatenate([d.qpos, d.qvel]).astype(np.float64)

        def put(e: gymnasium.Env, state: np.ndarray) -> None:
            e.unwrapped.set_state(state[:nq], state[nq:])

        return StateAccess("mujoco", names, get, put)
    state = getattr(base, "state", None)
    if state is not None:
        size = np.asarray(state).size
        names = next((_CLASSIC_NAMES[c.__name__] for c in type(base).__mro__ if c.__name__ in _CLASSIC_NAMES), None)
        if names is None or len(names) != size:
            names = tuple(f"state[{i}]" for i in range(size))

        def get(e: gymnasium.Env) -> np.ndarray:
            return np.asarray(e.unwrapped.state, dtype=np.float64).reshape(-1).copy()

        def put(e: gymnasium.Env, value: np.ndarray) -> None:
            e.unwrapped.state = np.array(value, dtype=np.float64)

        return StateAccess("classic", tuple(names), get, put)
    raise TypeError(
        f"cannot read or set the state of {type(base).__name__}: supported are MuJoCo envs (set_state) and envs "
        "with a `state` array (CartPole, MountainCar)"
    )


def _mujoco_names(model: Any) -> tuple[str, ...]:
    import mujoco

    qpos: list[str] = []
    qvel: list[str] = []
    for j in range(model.njnt):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"
        kind = model.jnt_type[j]
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            qpos += [f"qpos:{name}:{c}" for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
            qvel += [f"qvel:{name}:{c}" for c in ("vx", "vy", "vz", "wx", "wy", "wz")]
        elif kind == mujoco.mjtJoint.mjJNT_BALL:
            qpos += [f"qpos:{name}:{c}" for c in ("qw", "qx", "qy", "qz")]
            qvel += [f"qvel:{name}:{c}" for c in ("wx", "wy", "wz")]
        else:
            qpos.append(f"qpos:{name}")
            qvel.append(f"qvel:{name}")
    return tuple(qpos + qvel)


def make_task_env(
    task: str | TaskSpec, *, render: bool = True, size: tuple[int, int] | None = None
) -> tuple[gymnasium.Env, bool]:
    """One env of ``task``; returns it and whether its frames need resizing to ``size`` (height, width)."""
    spec = get_task(task)
    if not render:
        return spec.make_env(render_mode=None), False
    if size is None:
        return spec.make_env(render_mode="rgb_array"), False
    height, width = size
    try:
        return spec.make_env(render_mode="rgb_array", width=width, height=height), False
    except TypeError:  # classic-control envs draw at a fixed size: resize their frames instead
        return spec.make_env(render_mode="rgb_array"), True


def default_render_size(task: str | TaskSpec) -> tuple[int, int] | None:
    """(height, width) frames are rendered at unless told: the task's (MuJoCo tasks), else the env's own."""
    spec = get_task(task)
    return spec.render_size if spec.vector_task is not None else None


def render_states(
    task: str | TaskSpec,
    states: Any,
    *,
    size: tuple[int, int] | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Frames (N, H, W, 3) uint8 of the task's env put in each of ``states`` (N, S).

    ``size`` (height, width); ``None`` renders at :func:`default_render_size`.
    """
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2 or states.shape[0] == 0:
        raise ValueError(f"states must be (N, S) with N >= 1, got shape {states.shape}")
    size = _check_size(size) if size is not None else default_render_size(task)
    env, resize = make_task_env(task, size=size)
    try:
        env.reset(seed=0)
        access = state_access(env)
        if states.shape[1] != len(access.names):
            shown = ", ".join(access.names[:8]) + (", ..." if len(access.names) > 8 else "")
            raise ValueError(
                f"states have {states.shape[1]} entries; this task's state has {len(access.names)}: {shown}"
            )
        frames = None
        for i, state in enumerate(progress_iter(states, desc="render", unit="frame", enabled=progress)):
            access.set(env, state)
            frame = np.asarray(env.render())
            if resize:
                frame = np.asarray(Image.fromarray(frame).resize((size[1], size[0]), Image.Resampling.BICUBIC))
            if frames is None:
                frames = np.empty((states.shape[0],) + frame.shape, dtype=np.uint8)
            frames[i] = frame
        return frames
    finally:
        env.close()


def initial_state(task: str | TaskSpec, seed: int = 0) -> tuple[np.ndarray, StateAccess]:
    """The task's state right after ``reset(seed=seed)``, and how to address its variables."""
    env, _ = make_task_env(task, render=False)
    try:
        env.reset(seed=seed)
        access = state_access(env)
        return access.get(env), access
    finally:
        env.close()


def sample_states(
    task: str | TaskSpec,
    n: int,
    *,
    policy: Any = None,
    seed: int = 0,
    thin: int = 4,
    deterministic: bool = False,
    progress: bool = False,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """``n`` states visited by rollouts of ``policy`` (random actions when None), drawn at random.

    Runs episodes (the task's length) until ``n * thin`` states were visited, then
    keeps ``n`` of them chosen uniformly without replacement. ``policy`` is an SB3
    model or a path to one (see :func:`load_policy`). Returns (n, S) states and
    their variable names.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(thin, bool) or not isinstance(thin, (int, np.integer)) or thin < 1:
        raise ValueError(f"thin must be a positive integer, got {thin!r}")
    policy, env, rng = _acting_env(task, policy, seed)
    visited: list[np.ndarray] = []
    try:
        obs, _ = env.reset(seed=seed)
        access = state_access(env)
        target = n * thin
        # Counted in the states asked for: n of them are drawn from the n * thin visited.
        with progress_bar(total=n, desc="sample", unit="state", enabled=progress) as bar:
            while len(visited) < target:
                visited.append(access.get(env))
                obs, _, terminated, truncated, _ = env.step(_action(env, policy, obs, deterministic))
                if terminated or truncated:
                    visited.append(access.get(env))  # the final state of the episode counts too
                    obs, _ = env.reset(seed=int(rng.integers(2**31)))
                bar.update(min(n, len(visited) // thin) - bar.n)
    finally:
        env.close()
    chosen = np.sort(rng.choice(len(visited), size=n, replace=False))
    return np.stack(visited)[chosen], access.names


def sample_episodes(
    task: str | TaskSpec,
    episodes: int,
    *,
    policy: Any = None,
    seed: int = 0,
    deterministic: bool = False,
    progress: bool = False,
) -> tuple[np.ndarray, tuple[str, ...], np.ndarray]:
    """Every state that ``episodes`` whole episodes of ``policy`` (random actions when None) reach, in
    order: the state after each step, as the env stack draws and scores them (the reset state is no
    step's). Returns (N, S) states, their variable names, and (N,) the episode of each state."""
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
    policy, env, rng = _acting_env(task, policy, seed)
    visited: list[np.ndarray] = []
    episode_of: list[int] = []
    try:
        access = None
        for episode in progress_iter(range(episodes), desc="sample", unit="episode", enabled=progress):
            obs, _ = env.reset(seed=seed if episode == 0 else int(rng.integers(2**31)))
            access = access or state_access(env)  # read once the env holds a state
            done = False
            while not done:
                obs, _, terminated, truncated, _ = env.step(_action(env, policy, obs, deterministic))
                visited.append(access.get(env))
                episode_of.append(episode)
                done = terminated or truncated
    finally:
        env.close()
    assert access is not None
    return np.stack(visited), access.names, np.asarray(episode_of, dtype=np.int64)


def _acting_env(task: str | TaskSpec, policy: Any, seed: int) -> tuple[Any, Any, np.random.Generator]:
    """The policy (loaded if given as a path), the task's env without rendering and the generator of its
    later reset seeds, all seeded by ``seed``."""
    if isinstance(policy, (str, pathlib.Path)):
        policy = load_policy(policy)
    env = get_task(task).make(render_mode=None)
    env.action_space.seed(seed)
    return policy, env, np.random.default_rng(seed)


def _action(env: Any, policy: Any, obs: Any, deterministic: bool) -> Any:
    """The policy's action for ``obs``, or a random one where there is no policy."""
    return env.action_space.sample() if policy is None else policy.predict(obs, deterministic=deterministic)[0]


def load_policy(path: str | pathlib.Path, algorithm: str | None = None) -> Any:
    """An SB3 model saved by ``vlmrm-fast train`` (``final_model.zip`` or a checkpoint), on the CPU.

    The algorithm is ``algorithm`` if given, else the ``rl.algorithm`` of the run's
    ``config.yaml`` beside the file (or one folder up, for checkpoints), else
    inferred from the saved policy class (SAC, DQN; PPO for actor-critic policies).
    """
    from stable_baselines3 import DQN, PPO, SAC

    classes = {"SAC": SAC, "PPO": PPO, "DQN": DQN}
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"policy file {str(path)!r} does not exist (a final_model.zip or a checkpoint)")
    name = algorithm.upper() if algorithm else _algorithm_from_run(path) or _algorithm_from_zip(path)
    if name not in classes:
        raise ValueError(f"algorithm {name!r} is not one of {', '.join(classes)}")
    try:
        return classes[name].load(path, device="cpu")
    except (AttributeError, KeyError, ValueError, RuntimeError) as exc:  # SB3 fails deep inside on a wrong class
        raise ValueError(f"could not load {path} as {name} ({exc}); give the algorithm it was trained with") from exc


def _algorithm_from_run(path: pathlib.Path) -> str | None:
    import yaml

    for folder in (path.parent, path.parent.parent):
        config = folder / "config.yaml"
        if config.is_file():
            rl = (yaml.safe_load(config.read_text()) or {}).get("rl") or {}
            if rl.get("algorithm"):
                return str(rl["algorithm"]).upper()
    return None


def _algorithm_from_zip(path: pathlib.Path) -> str:
    try:
        data = json.loads(zipfile.ZipFile(path).read("data"))
        module = data["policy_class"]["__module__"]
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ValueError(f"{path} is not an SB3 model file ({exc}); pass the algorithm explicitly") from None
    for name in ("sac", "dqn", "td3", "ddpg"):
        if f".{name}." in module:
            return name.upper()
    if module.endswith("common.policies"):
        return "PPO"
    raise ValueError(f"cannot tell the algorithm of {path} (policy module {module}); pass the algorithm explicitly")


def _check_size(size: Sequence[int]) -> tuple[int, int]:
    try:
        height, width = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ValueError(f"size must be (height, width), got {size!r}") from None
    if height < 1 or width < 1:
        raise ValueError(f"size must be positive, got {size!r}")
    return height, width
