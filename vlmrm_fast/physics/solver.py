"""A model's constraint solver, by name: MuJoCo Warp has Newton and CG, not PGS (gymnasium's humanoid
uses PGS), so ``physics="warp"`` runs a copy of the task's model with Newton; the CPU simulator can run
that same copy, to compare the two simulators, or the two solvers (docs/physics.md)."""

from __future__ import annotations

import copy

import mujoco

SOLVERS = {
    "pgs": mujoco.mjtSolver.mjSOL_PGS,
    "cg": mujoco.mjtSolver.mjSOL_CG,
    "newton": mujoco.mjtSolver.mjSOL_NEWTON,
}
#: The solvers MuJoCo Warp runs.
WARP_SOLVERS = ("newton", "cg")
#: What ``physics="warp"`` runs a model with when its own solver is one MuJoCo Warp lacks.
WARP_DEFAULT_SOLVER = "newton"


def solver_name(model: mujoco.MjModel) -> str:
    """The name (a key of :data:`SOLVERS`) of ``model``'s constraint solver."""
    return {int(value): name for name, value in SOLVERS.items()}[int(model.opt.solver)]


def with_solver(model: mujoco.MjModel, solver: str) -> mujoco.MjModel:
    """A copy of ``model`` whose constraint solver is ``solver`` ("pgs", "cg" or "newton"); all else
    (integrator, iterations, tolerance) as ``model`` has it. ``model`` itself is unchanged."""
    if solver not in SOLVERS:
        raise ValueError(f"solver {solver!r} is not one of {', '.join(SOLVERS)}")
    changed = copy.deepcopy(model)
    changed.opt.solver = SOLVERS[solver]
    return changed
