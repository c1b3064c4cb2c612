"""Batched MuJoCo physics: N simulations of one model on MuJoCo's batch thread pool.

    sim = BatchSimulator(model, num_envs=64, frame_skip=5,
                         outputs=["qpos", ("cfrc_ext", 6)], rne_post_constraint=True)
    sim.reset(seed=0, noise_scale=1e-2)
    sim.step(actions)            # (64, nu); GIL released while stepping
    sim.outputs["cfrc_ext"]      # live (64, 78) view, refreshed by every step

A step is gymnasium's ``MujocoEnv.do_simulation`` on every simulation, bit for bit:
write ctrl, ``frame_skip`` x ``mj_step``, optionally ``mj_rnePostConstraint``, then copy
the output fields from the same ``mjData``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import mujoco
import numpy as np

import vlmrm_fast._native  # noqa: F401  (libmujoco, then the core)
from vlmrm_fast._core import sim as _native_sim

SimulationError = _native_sim.SimulationError

OutputSpec = str | tuple[str, int] | tuple[str, int, int]


class SimulationWarning(RuntimeWarning):
    """MuJoCo raised warnings (e.g. an instability that reset a simulation's data)."""


_WARNING_NAMES = {int(value): name for name, value in mujoco.mjtWarning.__members__.items() if name != "mjNWARNING"}


def parse_outputs(outputs: Iterable[OutputSpec]) -> list[tuple[str, int, int]]:
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


class ResetStates:
    """The states a reset sets, with each env's generator of reset noise (gymnasium's reset +
    ``set_state``); shared by every physics engine, so that their resets draw the same bits."""

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
        noise_scale: float,
        qpos: np.ndarray | None,
        qvel: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids (k,) int64, qpos (k, nq), qvel (k, nv)) float64 of a reset of envs ``ids`` (None: all);
        the arguments as :meth:`BatchSimulator.reset` takes them."""
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
        if noise_scale < 0:
            raise ValueError("noise_scale must be >= 0")
        if noise_scale > 0:
            # The bits of rng.uniform(-scale, scale, nq) then rng.uniform(-scale, scale, nv), as Humanoid-v5's
            # reset_model draws them: numpy's uniform is low + (high - low) * random(), and random() draws
            # both in one call per env (four times faster over thousands of envs).
            draws = np.empty((k, nq + nv))
            for row, env in enumerate(ids):
                self.np_random(int(env)).random(out=draws[row])
            low, high = -noise_scale, noise_scale
            noise = low + (high - low) * draws
            qpos += noise[:, :nq]
            qvel += noise[:, nq:]
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


class BatchSimulator:
    """``num_envs`` simulations of a copy of ``model``, stepped together.

    Args:
        model: the ``mujoco.MjModel`` (copied; later edits to it are not seen).
        num_envs: number of simulations.
        frame_skip: ``mj_step`` calls per ``step``.
        outputs: mjData fields (float64) copied out after every step and reset, each a
            name (the whole field, flattened), ``(name, start)`` or ``(name, start, count)``
            (a slice of the flattened field), in the order of ``output_array``'s columns.
        rne_post_constraint: run ``mj_rnePostConstraint`` after stepping, as gymnasium does,
            so that ``cacc``, ``cfrc_int`` and ``cfrc_ext`` are current.
        nthread: threads including the caller's; 0: every CPU this process may use.
        persistent: one ``mjData`` per simulation, so fields a step does not compute keep
            that simulation's own values as in a gymnasium env; False: one per thread (less
            memory; such fields then hold another simulation's values).

    State views (``qpos``, ``qvel``, ``act``, ``ctrl``, ``time``) are live: writing one sets
    that state for the next call. ``outputs`` and ``output_array`` are read-only views
    refreshed by each call. Views stay valid while referenced, also after ``close``.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        frame_skip: int = 1,
        outputs: Sequence[OutputSpec] = (),
        rne_post_constraint: bool = False,
        nthread: int = 0,
        persistent: bool = True,
    ) -> None:
        if not isinstance(model, mujoco.MjModel):
            raise TypeError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        if isinstance(outputs, str):
            outputs = [outputs]
        self.model = model
        self._native: Any = _native_sim.BatchSim(
            model._address,
            int(num_envs),
            int(frame_skip),
            parse_outputs(outputs),
            bool(rne_post_constraint),
            int(nthread),
            bool(persistent),
        )
        native = self._native
        output_array = native.outputs_view()
        output_array.flags.writeable = False
        last_warnings = native.last_warnings_view()
        last_warnings.flags.writeable = False
        self._views = {
            "qpos": native.state_view(int(mujoco.mjtState.mjSTATE_QPOS)),
            "qvel": native.state_view(int(mujoco.mjtState.mjSTATE_QVEL)),
            "act": native.state_view(int(mujoco.mjtState.mjSTATE_ACT)),
            "ctrl": native.state_view(int(mujoco.mjtState.mjSTATE_CTRL)),
            "time": native.state_view(int(mujoco.mjtState.mjSTATE_TIME))[:, 0],
            "output_array": output_array,
            "last_warnings": last_warnings,
        }
        self._outputs = {
            name: output_array[:, column : column + count] for name, column, count, _start, _size in native.output_slots
        }
        self._reset_states = ResetStates(model, self.num_envs)

    # ------------------------------------------------------------------- views
    @property
    def qpos(self) -> np.ndarray:
        """Live (num_envs, nq) view of the positions."""
        return self._view("qpos")

    @property
    def qvel(self) -> np.ndarray:
        """Live (num_envs, nv) view of the velocities."""
        return self._view("qvel")

    @property
    def act(self) -> np.ndarray:
        """Live (num_envs, na) view of the actuator activations."""
        return self._view("act")

    @property
    def ctrl(self) -> np.ndarray:
        """Live (num_envs, nu) view of the controls the last step applied."""
        return self._view("ctrl")

    @property
    def time(self) -> np.ndarray:
        """Live (num_envs,) view of the simulation times."""
        return self._view("time")

    @property
    def output_array(self) -> np.ndarray:
        """Read-only (num_envs, total) view: every output's columns, in the order given."""
        return self._view("output_array")

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """Read-only (num_envs, count) view per output name."""
        self._live()
        return self._outputs

    @property
    def last_warnings(self) -> np.ndarray:
        """(num_envs,) int32: bit w set where MuJoCo raised warning w (mjtWarning) in the last call."""
        return self._view("last_warnings")

    # ------------------------------------------------------------------ properties
    @property
    def num_envs(self) -> int:
        return self._live().num_envs

    @property
    def frame_skip(self) -> int:
        return self._live().frame_skip

    @property
    def nthread(self) -> int:
        return self._live().nthread

    @property
    def dt(self) -> float:
        """Simulated seconds per ``step``."""
        return float(self.model.opt.timestep) * self.frame_skip

    @property
    def output_slots(self) -> list[tuple[str, int, int, int, int]]:
        """(name, column, count, start, field_size) of each output."""
        return list(self._live().output_slots)

    def np_random(self, env: int) -> np.random.Generator:
        """The generator of env ``env`` for reset noise (seeded by ``reset(seed=...)``)."""
        return self._reset_states.np_random(env)

    # --------------------------------------------------------------------- calls
    def step(self, ctrl: np.ndarray, rows: slice | None = None) -> None:
        """Apply controls (num_envs, nu) and advance every simulation by ``frame_skip`` steps;
        with ``rows`` (a slice of env indices, step 1) only those, reading their rows of ``ctrl``.

        Raises ValueError for a wrong shape or non-finite controls (no simulation is
        stepped), SimulationError if MuJoCo raised in some simulations (those keep their
        state). Warns with SimulationWarning when MuJoCo raised warnings.
        """
        start, count = self.env_range(rows)
        self._live().step(ctrl, start, count)
        self._warn("step", start, count)

    @property
    def native(self):
        """The native simulator (``_core.sim.BatchSim``) a renderer draws from; raises once closed."""
        return self._live()

    def env_range(self, rows: slice | None) -> tuple[int, int]:
        """(start, count) of a slice of env indices; the whole batch for None."""
        if rows is None:
            return 0, self.num_envs
        start, stop, stride = rows.indices(self.num_envs)
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
    ) -> None:
        """Reset simulations ``ids`` (default: all) as gymnasium's reset + ``set_state``.

        Each is set to the model's defaults (``mj_resetData``), then to ``qpos``/``qvel``
        (default ``qpos0`` and zeros) plus, when ``noise_scale`` > 0, uniform noise in
        ``[-noise_scale, noise_scale]`` drawn from the env's generator (qpos first, then
        qvel, as Humanoid-v5's ``reset_model``), then ``mj_forward`` and the outputs.
        ``seed`` (re)seeds the generators first: an int seeds env ``i`` with ``seed + i``
        (as gymnasium's vector envs), a sequence gives one seed per id.
        """
        native = self._live()
        ids, qpos, qvel = self._reset_states.rows(ids, seed=seed, noise_scale=noise_scale, qpos=qpos, qvel=qvel)
        native.reset(ids.astype(np.int32), qpos, qvel)
        self._warn("reset")

    def close(self) -> None:
        """Release the simulator; views still referenced keep their memory until dropped."""
        self._native = None
        self._views = {}
        self._outputs = {}

    @property
    def closed(self) -> bool:
        return self._native is None

    def __enter__(self) -> BatchSimulator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------- helpers
    def _view(self, name: str) -> np.ndarray:
        self._live()
        return self._views[name]

    def _live(self):
        if self._native is None:
            raise RuntimeError("the simulator is closed")
        return self._native

    def _warn(self, call: str, start: int = 0, count: int | None = None) -> None:
        """Warns of the MuJoCo warnings raised in simulations [start, start + count) by the last call."""
        stop = self.num_envs if count is None else start + count
        message = warning_message(call, self.last_warnings, start, stop)
        if message:
            warnings.warn(message, SimulationWarning, stacklevel=3)


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


def make(
    model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: Sequence[OutputSpec], gpu: int | None
) -> BatchSimulator:
    """The engine's simulator (its row of ``vlmrm_fast.physics.PHYSICS``): gymnasium's step on every env,
    ``mj_rnePostConstraint`` included, on every CPU this process may use (``gpu`` plays no part)."""
    return BatchSimulator(model, num_envs, frame_skip=frame_skip, outputs=outputs, rne_post_constraint=True)
