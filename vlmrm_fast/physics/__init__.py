"""How a task's envs are simulated: one row per physics backend, and what ``physics="auto"`` picks.

The simulator env (:mod:`vlmrm_fast.stack.simulator_env`) steps MuJoCo tasks with a simulator of one of the
simulator-env rows (``batch``: MuJoCo's ``mjb_*`` batch API on the host's threads, :mod:`.batch`;
``warp``: MuJoCo Warp with every env's state on the GPU, :mod:`.warp`); the ``gym`` row runs the
task's gymnasium envs instead, each drawing its own frames. :func:`.solver.with_solver` gives a
model another constraint solver (MuJoCo Warp has no PGS), so both simulators can run the same one. A row says what
the backend needs, whether it can run a task here, and, for a simulator-env row, the class of its
simulator (:class:`.simulator.Simulator`: what the simulator env and the renderers read of one, and the
states it offers a renderer), the memory one env needs and where, the dynamics it steps (what a run's
identity compares) and whether it keeps its outputs on a device as torch tensors. Adding a physics backend,
one whose state lives on a device included, is a module and a row (docs/architecture.md, "Where to add
things"). Only :mod:`vlmrm_fast.stack.plan` chooses among them; the simulator env and the training config
read the rows and name no backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vlmrm_fast.lazy import named

if TYPE_CHECKING:
    import mujoco
    import torch

#: A task as the rows read it: ``envs.TaskSpec`` (its ``name`` and ``vector_task``, what the simulator env runs,
#: or None); named loosely so that physics, below the tasks, does not import them.
TaskSpec = Any


def _needs_vector_task(task: TaskSpec, device: torch.device) -> str | None:
    return None if task.vector_task is not None else f"task {task.name!r} has no simulator-env version"


def _always(task: TaskSpec, device: torch.device) -> str | None:
    return None


def _warp_unavailable(task: TaskSpec, device: torch.device) -> str | None:
    from vlmrm_fast.runtime import warp as warp_runtime

    problem = _needs_vector_task(task, device) or warp_runtime.warp_available()
    if problem is not None:
        return problem
    from vlmrm_fast.physics.warp import task_model_problem

    return task_model_problem(task)


@dataclasses.dataclass(frozen=True)
class EnvBytes:
    """The memory one env of a physics backend needs, at least: ``count`` bytes of ``what`` (said in a few
    words, for the refusal), in the memory of ``device`` (None: the host's)."""

    count: int
    what: str
    device: torch.device | None = None


def host_data_bytes(model: mujoco.MjModel, frame_shape: tuple[int, int], device: torch.device) -> EnvBytes:
    """One env of a simulator whose data lives in the host's memory: MuJoCo's data of ``model`` and, for frames
    scored on the CPU, its RGBA frame there (on a GPU the frames are in its memory)."""
    from vlmrm_fast.runtime.memory import env_bytes

    height, width = frame_shape
    on_host = device.type == "cpu"
    what = "MuJoCo's data" + (f" and a {height}x{width} RGBA frame" if on_host else "")
    return EnvBytes(env_bytes(model, frame_shape if on_host else None), what)


@dataclasses.dataclass(frozen=True)
class Physics:
    """One physics backend: its name (``EnvSpec.physics``), what it is, and how it is made.

    ``unavailable(task, device)``: why it cannot run ``task`` for frames scored on ``device`` (the CPU or
    ``cuda:N``), or None. ``simulator``: ``"module:Class"`` of its
    :class:`~vlmrm_fast.physics.simulator.Simulator`, which the simulator env
    (:mod:`vlmrm_fast.stack.simulator_env`) steps and one of the renderers draws, its ``offers`` saying which
    states a renderer may draw it from (:attr:`offers`); None: the task's gymnasium envs step and draw
    themselves. ``solvers``: the constraint solvers it runs (None: any, ``EnvSpec.solver``) and
    ``default_solver`` the one a task's model runs with unless the spec names one (None: the model's own);
    ``steps_in_ranges``: it can step a range of envs at a time (else a step is one range).

    What a backend declares of itself, so that nothing above it names it:
    ``bytes_per_env``: ``"module:function"`` of ``(model, frame_shape, device) -> EnvBytes``, the memory one
    env needs and where (its data, and its frame where the frames are kept beside it), checked before
    anything is allocated; ``dynamics``: the dynamics it steps, as a run's identity compares them (two
    backends of the same dynamics give the same run, ``training.config``); ``device_observations``: its
    simulator keeps the outputs on a device as torch tensors (``device``, ``torch_outputs``), from which the
    simulator env computes a GPU-native learner's observations where they lie.
    """

    name: str
    description: str
    needs: str
    unavailable: Callable[[TaskSpec, torch.device], str | None]
    simulator: str | None = None
    solvers: tuple[str, ...] | None = None
    default_solver: str | None = None
    steps_in_ranges: bool = True
    bytes_per_env: str = "vlmrm_fast.physics:host_data_bytes"
    dynamics: str = "mujoco"
    device_observations: bool = False

    @property
    def in_simulator_env(self) -> bool:
        """Whether it runs in the simulator env (a simulator of its own), rather than the task's gymnasium envs."""
        return self.simulator is not None

    def solver_for(self, requested: str | None) -> str | None:
        """The solver a task's model runs with under this physics: ``requested`` (``EnvSpec.solver``), else
        the default (None: the model's own)."""
        return requested or self.default_solver

    @property
    def offers(self) -> tuple[str, ...]:
        """The states of its simulator a renderer may draw (its class's ``offers``; none for the gymnasium
        envs, which draw themselves)."""
        return () if self.simulator is None else tuple(named(self.simulator).offers)

    def env_bytes(self, model: mujoco.MjModel, frame_shape: tuple[int, int], device: torch.device) -> EnvBytes:
        """The memory one env of ``model`` with a ``frame_shape`` frame scored on ``device`` needs (:attr:`bytes_per_env`)."""
        return named(self.bytes_per_env)(model, frame_shape, device)

    def make_simulator(
        self, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: tuple[Any, ...], device: torch.device
    ) -> Any:
        """The simulator env's simulator of ``num_envs`` copies of ``model``, for frames scored on ``device``."""
        if self.simulator is None:
            raise ValueError(f"physics={self.name!r} does not run in the simulator env")
        return named(self.simulator).for_simulator_env(model, num_envs, frame_skip, outputs, device)


PHYSICS: dict[str, Physics] = {
    physics.name: physics
    for physics in (
        Physics(
            "batch",
            "MuJoCo's batch API: all envs in the native core, stepped on the host's threads (mjb_*)",
            "a MuJoCo task (the built-in humanoid tasks)",
            unavailable=_needs_vector_task,
            simulator="vlmrm_fast.physics.batch:BatchSimulator",
        ),
        Physics(
            "warp",
            "MuJoCo Warp: every env's state on the GPU, a step one CUDA graph, drawn where it lies; Newton or CG "
            "solver, float32 (docs/physics.md); on a CPU Warp's backend, for testing",
            "MuJoCo Warp (pip install 'vlmrm-fast[warp]') and a MuJoCo task",
            unavailable=_warp_unavailable,
            simulator="vlmrm_fast.physics.warp:WarpSimulator",
            solvers=("newton", "cg"),
            default_solver="newton",
            steps_in_ranges=False,
            bytes_per_env="vlmrm_fast.physics.warp:world_and_frame_bytes",
            dynamics="warp",
            device_observations=True,
        ),
        Physics(
            "gym",
            "the task's gymnasium envs, one per env, each drawing its own frames (SB3's DummyVecEnv)",
            "any gymnasium task",
            unavailable=_always,
        ),
    )
}

#: What ``physics="auto"`` tries, in order: the simulator env where the task has one and a renderer
#: can draw it, the gymnasium envs otherwise. Never "warp": its dynamics (Newton, float32) are not the
#: paper's (PGS, float64); ask for it by name.
AUTO_ORDER = ("batch", "gym")


def dynamics_of(physics: str) -> str:
    """The dynamics ``physics`` (a row's name, or "auto") steps, as a run's identity compares them: "auto"'s are
    those every row of :data:`AUTO_ORDER` shares (it picks by the machine, never by the dynamics); a name that is
    no row stands for itself."""
    if physics == "auto":
        (dynamics,) = {PHYSICS[name].dynamics for name in AUTO_ORDER}
        return dynamics
    row = PHYSICS.get(physics)
    return physics if row is None else row.dynamics


__all__ = ["AUTO_ORDER", "PHYSICS", "EnvBytes", "Physics", "dynamics_of", "host_data_bytes"]
