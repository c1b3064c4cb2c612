"""How a task's envs are simulated: one row per physics backend, and what ``physics="auto"`` picks.

The batch env (:mod:`vlmrm_fast.stack.batch_env`) steps MuJoCo tasks with a simulator of one of the
batch-env rows (``batch``: MuJoCo's ``mjb_*`` batch API on the host's threads, :mod:`.batch`;
``warp``: MuJoCo Warp with every env's state on the GPU, :mod:`.warp`); the ``gym`` row runs the
task's gymnasium envs instead, each drawing its own frames. :func:`.solver.with_solver` gives a
model another constraint solver (MuJoCo Warp has no PGS), so both simulators can run the same one. A row says what
the backend needs, whether it can run a task here, and, for a batch-env row, the class of its
simulator (:class:`.simulator.Simulator`: what the batch env and the renderers read of one, and the
states it offers a renderer). Adding a physics backend is a module and a row
(docs/architecture.md, "Where to add things"). Only :mod:`vlmrm_fast.stack.plan` chooses among them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vlmrm_fast.lazy import named

if TYPE_CHECKING:
    import mujoco
    import torch

#: A task as the rows read it: ``envs.TaskSpec`` (its ``name`` and ``batch``, the batch env's glue or None);
#: named loosely so that physics, below the tasks, does not import them.
TaskSpec = Any


def _needs_batch_glue(task: TaskSpec, device: torch.device) -> str | None:
    return None if task.batch is not None else f"task {task.name!r} has no batch-env version"


def _always(task: TaskSpec, device: torch.device) -> str | None:
    return None


def _warp_unavailable(task: TaskSpec, device: torch.device) -> str | None:
    from vlmrm_fast.runtime import warp as warp_runtime

    problem = _needs_batch_glue(task, device) or warp_runtime.warp_available()
    if problem is not None:
        return problem
    from vlmrm_fast.physics.warp import task_model_problem

    return task_model_problem(task)


@dataclasses.dataclass(frozen=True)
class Physics:
    """One physics backend: its name (``EnvSpec.physics``), what it is, and how it is made.

    ``batch_env``: it runs in the batch env, drawn by one of the renderers; otherwise the task's
    gymnasium envs step and draw themselves. ``unavailable(task, device)``: why it cannot run ``task``
    for frames scored on ``device`` (the CPU or ``cuda:N``), or None. ``simulator``: for a batch-env
    row, ``"module:Class"`` of its :class:`~vlmrm_fast.physics.simulator.Simulator`, whose ``offers``
    say which states a renderer may draw it from (:attr:`offers`); ``solvers``: the constraint
    solvers it runs (None: any, ``EnvSpec.solver``) and ``default_solver`` the one a task's model runs
    with unless the spec names one (None: the model's own); ``steps_in_ranges``: it can step a range
    of envs at a time (else a step is one range); ``state_on_host``: the simulations' data lives in the
    host's memory (its size is checked against it before anything is allocated).
    """

    name: str
    description: str
    needs: str
    batch_env: bool
    unavailable: Callable[[TaskSpec, torch.device], str | None]
    simulator: str | None = None
    solvers: tuple[str, ...] | None = None
    default_solver: str | None = None
    steps_in_ranges: bool = True
    state_on_host: bool = True

    def solver_for(self, requested: str | None) -> str | None:
        """The solver a task's model runs with under this physics: ``requested`` (``EnvSpec.solver``), else
        the default (None: the model's own)."""
        return requested or self.default_solver

    @property
    def offers(self) -> tuple[str, ...]:
        """The states of its simulator a renderer may draw (its class's ``offers``; none for the gymnasium
        envs, which draw themselves)."""
        return () if self.simulator is None else tuple(named(self.simulator).offers)

    def make_simulator(
        self, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: tuple[Any, ...], device: torch.device
    ) -> Any:
        """The batch env's simulator of ``num_envs`` copies of ``model``, for frames scored on ``device``."""
        if self.simulator is None:
            raise ValueError(f"physics={self.name!r} does not run in the batch env")
        return named(self.simulator).for_batch_env(model, num_envs, frame_skip, outputs, device)


PHYSICS: dict[str, Physics] = {
    physics.name: physics
    for physics in (
        Physics(
            "batch",
            "MuJoCo's batch env: all envs in the native core, stepped on the host's threads (mjb_*)",
            "a MuJoCo task (the built-in humanoid tasks)",
            batch_env=True,
            unavailable=_needs_batch_glue,
            simulator="vlmrm_fast.physics.batch:BatchSimulator",
        ),
        Physics(
            "warp",
            "MuJoCo Warp: every env's state on the GPU, a step one CUDA graph, drawn where it lies; Newton or CG "
            "solver, float32 (docs/physics.md); on a CPU Warp's backend, for testing",
            "MuJoCo Warp (pip install 'vlmrm-fast[warp]') and a MuJoCo task",
            batch_env=True,
            unavailable=_warp_unavailable,
            simulator="vlmrm_fast.physics.warp:WarpSimulator",
            solvers=("newton", "cg"),
            default_solver="newton",
            steps_in_ranges=False,
            state_on_host=False,
        ),
        Physics(
            "gym",
            "the task's gymnasium envs, one per env, each drawing its own frames (SB3's DummyVecEnv)",
            "any gymnasium task",
            batch_env=False,
            unavailable=_always,
        ),
    )
}

#: What ``physics="auto"`` tries, in order: the batch env where the task has one and a renderer
#: can draw it, the gymnasium envs otherwise. Never "warp": its dynamics (Newton, float32) are not the
#: paper's (PGS, float64); ask for it by name.
AUTO_ORDER = ("batch", "gym")

__all__ = ["AUTO_ORDER", "PHYSICS", "Physics"]
