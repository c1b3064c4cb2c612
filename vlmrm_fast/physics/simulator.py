"""What a simulator of the simulator env is: the protocol the simulator env and the renderers read of one, the
states it can offer a renderer, and what every simulator holds the same way, written once.

A physics backend's simulator (:mod:`.batch`, :mod:`.warp`, or any class of :class:`Simulator`'s
shape) holds ``num_envs`` simulations of one MuJoCo model. The simulator env steps and resets it and reads
its outputs; a renderer draws it from one of the states its class ``offers``, most direct first:

* :data:`NATIVE_DATA`: each simulation's mjData in the native core (``native``, a
  ``_core.sim.BatchSim``), drawn where it lies, on the simulator's threads;
* :data:`HOST_POSITIONS`: ``qpos``, (num_envs, nq) float64 in the host's memory;
* :data:`DEVICE_WORLDS`: MuJoCo Warp's model and data of every world on one device (``warp_model``,
  ``warp_data``, ``warp_stream``, ``device``);
* :data:`HOST_DATA`: a ``mujoco.MjModel`` and ``mujoco.MjData`` per env on the host (``models``,
  ``datas``), each drawn as its data lies, from the camera each env's ``render()`` uses (``camera(i)``),
  with ``option`` (``mujoco.MjvOption``'s fields): gymnasium envs stepped by their own ``step()``,
  drawn by the batched drawing (``stack.drawn_env``), not a simulator env's simulator.

Apart from what it offers a renderer, a simulator whose row declares ``device_observations``
(``physics.PHYSICS``) keeps its outputs on a device as torch tensors: ``device`` and ``torch_outputs``
(``outputs``' fields there), from which the simulator env computes a learner's observations on that device.

A renderer's class says which states it ``draws``; the plan pairs a physics with a renderer that
draws a state the physics' simulator offers, and refuses a pair that cannot meet
(``physics.PHYSICS[name].offers``, ``rendering.RENDERERS[name].draws``).

Which poses are drawn (:data:`DRAWN_POSITIONS`, ``EnvSpec.drawn_positions``): ``"reached"``, the bodies'
poses of the positions a step reached, computed from them before drawing (a state that holds positions,
:data:`STATES_OF_POSITIONS`); ``"gymnasium"``, each simulation's data as its step left it, which is what
gymnasium's ``render()`` draws after a step: ``mj_step`` computes the poses in its forward pass and then
integrates, so they are those of the last substep's start (Euler), or of RK4's last stage, not of the
positions reached. Only a state that holds the data itself (:data:`STATES_AS_STEPPED`) can be drawn that
way; positions alone cannot. :data:`HOST_DATA` is drawn that way only: its data is the envs' own, as their
step left it, and the batched drawing shows what their ``render()`` shows.
"""

from __future__ import annotations

import abc
import dataclasses
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import mujoco
import numpy as np

if TYPE_CHECKING:
    import torch

#: The states a simulator offers and a renderer draws (see the module docstring).
NATIVE_DATA = "native data"
HOST_POSITIONS = "host positions"
DEVICE_WORLDS = "device worlds"
HOST_DATA = "host data"
STATES = (NATIVE_DATA, HOST_POSITIONS, DEVICE_WORLDS, HOST_DATA)
#: The poses a renderer may draw of a simulator's state (see the module docstring).
DRAWN_POSITIONS = ("reached", "gymnasium")
#: The states that hold the positions a renderer computes the poses from: drawn with ``"reached"`` positions.
STATES_OF_POSITIONS = (NATIVE_DATA, HOST_POSITIONS, DEVICE_WORLDS)
#: The states that hold each simulation's data as its step left it: drawn as it lies, ``"gymnasium"`` positions.
STATES_AS_STEPPED = (NATIVE_DATA, DEVICE_WORLDS, HOST_DATA)


def states_for(positions: str) -> tuple[str, ...]:
    """The states a renderer can draw ``positions`` (one of :data:`DRAWN_POSITIONS`) from."""
    return STATES_OF_POSITIONS if positions == "reached" else STATES_AS_STEPPED


OutputSpec = str | tuple[str, int] | tuple[str, int, int]


class Simulator(Protocol):
    """What the simulator env and a renderer read of a simulator (the plan reads its row, ``physics.PHYSICS``).

    ``offers``: the states a renderer may draw it from, most direct first (a class attribute); a state
    offered brings its members (``native``; ``qpos``; ``warp_model``, ``warp_data``, ``warp_stream``,
    ``device``); a simulator whose row declares ``device_observations`` has ``device`` and ``torch_outputs``
    (the module docstring). ``for_simulator_env`` is how the simulator env makes one (its row names the class).
    """

    offers: ClassVar[tuple[str, ...]]
    model: mujoco.MjModel

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: Sequence[OutputSpec], device: torch.device
    ) -> Simulator:
        """The simulator env's simulator: gymnasium's step (``mj_rnePostConstraint`` included) of ``num_envs``
        copies of ``model``, copying out ``outputs``, on ``device`` (the plan's) where it uses one."""
        ...

    @property
    def num_envs(self) -> int: ...

    @property
    def dt(self) -> float:
        """Simulated seconds per ``step``."""
        ...

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """(num_envs, count) float64 per output, on the host, as of the last call."""
        ...

    @property
    def qpos(self) -> np.ndarray: ...

    @property
    def qvel(self) -> np.ndarray: ...

    def step(self, ctrl: np.ndarray, rows: slice | None = None) -> None:
        """Advances envs ``rows`` (None: all) by one env step with controls ``ctrl`` (num_envs, nu)."""
        ...

    def reset(
        self,
        ids: Sequence[int] | np.ndarray | None = None,
        *,
        seed: int | Sequence[int] | None = None,
        noise_scale: float = 0.0,
        qpos: np.ndarray | None = None,
        qvel: np.ndarray | None = None,
        noise: ResetNoise | None = None,
    ) -> None: ...

    def env_range(self, rows: slice | None) -> tuple[int, int]:
        """(start, count) of a slice of env indices it can step (None: all)."""
        ...

    def close(self) -> None: ...


class SimulationWarning(RuntimeWarning):
    """MuJoCo raised warnings (e.g. an instability that reset a simulation's data)."""


_WARNING_NAMES = {int(value): name for name, value in mujoco.mjtWarning.__members__.items() if name != "mjNWARNING"}


def parse_outputs(outputs: Iterable[OutputSpec]) -> list[tuple[str, int, int]]:
    """Output requests as (name, start, count); count -1: to the end of the field."""
    parsed = []
    for spec in outputs:
        if isinstance(spec, str):
            parsed.append((spec, 0, -1))
        elif isinstance(spec, tuple) and len(spec) in (2, 3) and isinstance(spec[0], str):
            start = int(spec[1])
            count = int(spec[2]) if len(spec) == 3 else -1
            if count < 0 and len(spec) == 3:
                raise ValueError(f"output {spec!r}: count must be >= 0")
            parsed.append((spec[0], start, count))
        else:
            raise TypeError(f"output {spec!r} must be a field name, (name, start) or (name, start, count)")
    return parsed


def warning_message(call: str, last_warnings: np.ndarray, start: int, stop: int) -> str | None:
    """What a call's MuJoCo warnings (``last_warnings``: per-simulation mjtWarning bits) in simulations
    [start, stop) say, in one line; None when there were none."""
    flagged = start + np.flatnonzero(last_warnings[start:stop])
    if flagged.size == 0:
        return None
    bits = int(np.bitwise_or.reduce(last_warnings[flagged]))
    names = [name for value, name in _WARNING_NAMES.items() if bits & (1 << value)]
    shown = ", ".join(str(i) for i in flagged[:8]) + (", ..." if flagged.size > 8 else "")
    return (
        f"MuJoCo warnings during {call} in {flagged.size} simulation(s) ({shown}): "
        f"{', '.join(names)}; per-simulation bits in last_warnings"
        + (" (BADQACC: MuJoCo reset that simulation's data, as mj_step does)" if "mjWARN_BADQACC" in names else "")
    )


class ResetNoise(Protocol):
    """How a task's reset perturbs its start state (gymnasium's ``reset_model``), drawing from each env's
    generator exactly what that env's ``reset_model`` draws."""

    def draw(self, rngs: Sequence[np.random.Generator], qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Perturbs rows ``qpos`` (k, nq) and ``qvel`` (k, nv) in place (they hold the start state: the given
        rows, else ``qpos0`` and zeros), row ``i`` drawing from ``rngs[i]``."""
        ...


@dataclasses.dataclass(frozen=True)
class UniformNoise:
    """Uniform noise in ``[-scale, scale]`` on every qpos, then every qvel (Humanoid-v5's ``reset_model``);
    ``scale`` 0: none."""

    scale: float

    def __post_init__(self) -> None:
        if not self.scale >= 0:
            raise ValueError(f"noise_scale must be >= 0, got {self.scale!r}")

    def draw(self, rngs: Sequence[np.random.Generator], qpos: np.ndarray, qvel: np.ndarray) -> None:
        if self.scale == 0:
            return
        nq = qpos.shape[1]
        # The bits of rng.uniform(-scale, scale, nq) then rng.uniform(-scale, scale, nv): numpy's uniform is
        # low + (high - low) * random(), and random() draws both in one call per env (four times faster over
        # thousands of envs).
        draws = np.empty((len(rngs), nq + qvel.shape[1]))
        for row, rng in enumerate(rngs):
            rng.random(out=draws[row])
        low, high = -self.scale, self.scale
        noise = low + (high - low) * draws
        qpos += noise[:, :nq]
        qvel += noise[:, nq:]


class ResetStates:
    """The states a reset sets, with each env's generator of reset noise (gymnasium's reset +
    ``set_state``); shared by every simulator, so that their resets draw the same bits."""

    def __init__(self, model: mujoco.MjModel, num_envs: int) -> None:
        self.model = model
        self.num_envs = int(num_envs)
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs

    def np_random(self, env: int) -> np.random.Generator:
        """The generator of env ``env`` (unseeded until a reset seeds it)."""
        rng = self._rngs[env]
        if rng is None:
            rng = self._rngs[env] = np.random.default_rng()
        return rng

    def rows(
        self,
        ids: Sequence[int] | np.ndarray | None,
        *,
        seed: int | Sequence[int] | None,
        noise_scale: float = 0.0,
        qpos: np.ndarray | None,
        qvel: np.ndarray | None,
        noise: ResetNoise | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids (k,) int64, qpos (k, nq), qvel (k, nv)) float64 of a reset of envs ``ids`` (None: all);
        the arguments as :meth:`SimulatorBase.reset` takes them."""
        n_envs = self.num_envs
        ids = np.arange(n_envs) if ids is None else np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= n_envs):
            raise ValueError(f"ids must be in [0, {n_envs})")
        if len(np.unique(ids)) != len(ids):
            raise ValueError("ids must be distinct")
        k = len(ids)
        if seed is not None:
            seeds = [int(seed) + int(i) for i in ids] if isinstance(seed, (int, np.integer)) else [int(s) for s in seed]
            if len(seeds) != k:
                raise ValueError(f"seed has {len(seeds)} values for {k} ids")
            for env, s in zip(ids, seeds):
                self._rngs[int(env)] = np.random.default_rng(s)
        nq, nv = self.model.nq, self.model.nv
        qpos = self._rows(qpos, k, nq, self.model.qpos0, "qpos")
        qvel = self._rows(qvel, k, nv, np.zeros(nv), "qvel")
        if noise is not None and noise_scale:
            raise ValueError("give noise_scale or noise, not both")
        if noise is None:
            noise = UniformNoise(noise_scale)
            if noise.scale == 0:
                return ids, qpos, qvel
        noise.draw([self.np_random(int(env)) for env in ids], qpos, qvel)
        return ids, qpos, qvel

    @staticmethod
    def _rows(values, k: int, width: int, default: np.ndarray, what: str) -> np.ndarray:
        if values is None:
            return np.tile(np.asarray(default, dtype=np.float64), (k, 1))
        rows = np.array(values, dtype=np.float64)
        if rows.shape == (width,):
            rows = np.tile(rows, (k, 1))
        if rows.shape != (k, width):
            raise ValueError(f"{what} must have shape ({k}, {width}) or ({width},), got {rows.shape}")
        if not np.isfinite(rows).all():
            raise ValueError(f"{what} has non-finite values")
        return rows


class SimulatorBase(abc.ABC):
    """What every simulator holds the same way: its model, how many simulations and how many physics
    steps per ``step``, the generators of its resets (:class:`ResetStates`: a reset's arguments and
    noise are every simulator's), the warnings of its last call, and closing. A simulator supplies how it
    steps, how it sets the reset rows (``_reset``), its state and outputs, ``last_warnings``, ``closed``
    and ``close``."""

    offers: ClassVar[tuple[str, ...]]

    def __init__(self, model: mujoco.MjModel, num_envs: int, frame_skip: int) -> None:
        if not isinstance(model, mujoco.MjModel):
            raise TypeError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        if int(num_envs) < 1:
            raise ValueError("num_envs must be >= 1")
        if int(frame_skip) < 1:
            raise ValueError("frame_skip must be >= 1")
        self.model = model
        self._num_envs, self._frame_skip = int(num_envs), int(frame_skip)
        self._reset_states = ResetStates(model, self._num_envs)

    # ------------------------------------------------------------ what a simulator supplies
    @abc.abstractmethod
    def step(self, ctrl: np.ndarray, rows: slice | None = None) -> None: ...

    @abc.abstractmethod
    def _reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Sets simulations ``ids`` (non-empty) to rows ``qpos``/``qvel`` (float64), their other state at the
        model's defaults, then their derived quantities, outputs and ``last_warnings``."""

    @property
    @abc.abstractmethod
    def last_warnings(self) -> np.ndarray:
        """(num_envs,) int32: bit w set where MuJoCo raised warning w (mjtWarning) in the last call."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    # ------------------------------------------------------------------ shared
    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def frame_skip(self) -> int:
        return self._frame_skip

    @property
    def dt(self) -> float:
        """Simulated seconds per ``step``."""
        return float(self.model.opt.timestep) * self._frame_skip

    def np_random(self, env: int) -> np.random.Generator:
        """The generator of env ``env`` for reset noise (seeded by ``reset(seed=...)``)."""
        return self._reset_states.np_random(env)

    def env_range(self, rows: slice | None) -> tuple[int, int]:
        """(start, count) of a slice of env indices; the whole batch for None."""
        if rows is None:
            return 0, self._num_envs
        start, stop, stride = rows.indices(self._num_envs)
        if stride != 1 or stop <= start:
            raise ValueError(f"rows must be a non-empty slice of consecutive env indices, got {rows!r}")
        return start, stop - start

    def reset(
        self,
        ids: Sequence[int] | np.ndarray | None = None,
        *,
        seed: int | Sequence[int] | None = None,
        noise_scale: float = 0.0,
        qpos: np.ndarray | None = None,
        qvel: np.ndarray | None = None,
        noise: ResetNoise | None = None,
    ) -> None:
        """Reset simulations ``ids`` (default: all) as gymnasium's reset + ``set_state``.

        Each is set to the model's defaults, then to ``qpos``/``qvel`` (default ``qpos0`` and zeros)
        plus, when ``noise_scale`` > 0, uniform noise in ``[-noise_scale, noise_scale]`` drawn from the
        env's generator (qpos first, then qvel, as Humanoid-v5's ``reset_model``), or the noise of a
        task's own reset (``noise``, a :class:`ResetNoise`), then its derived quantities and outputs.
        ``seed`` (re)seeds the generators first: an int seeds env ``i`` with ``seed + i`` (as gymnasium's
        vector envs), a sequence gives one seed per id.
        """
        self._live()
        ids, qpos_rows, qvel_rows = self._reset_states.rows(
            ids, seed=seed, noise_scale=noise_scale, qpos=qpos, qvel=qvel, noise=noise
        )
        if ids.size == 0:
            return
        self._reset(ids, qpos_rows, qvel_rows)
        self._warn("reset")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _live(self) -> Any:
        if self.closed:
            raise RuntimeError("the simulator is closed")
        return None

    def _warn(self, call: str, start: int = 0, count: int | None = None) -> None:
        """Warns of the MuJoCo warnings raised in simulations [start, start + count) by the last call."""
        stop = self._num_envs if count is None else start + count
        message = warning_message(call, self.last_warnings, start, stop)
        if message:
            warnings.warn(message, SimulationWarning, stacklevel=3)
