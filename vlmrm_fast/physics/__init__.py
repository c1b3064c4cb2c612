"""How a task's envs are simulated: one row per physics backend, and what ``physics="auto"`` picks.

The batch engine (:mod:`vlmrm_fast.engine`) steps MuJoCo tasks with a simulator of one of the
engine rows (``batch``: MuJoCo's ``mjb_*`` batch API on the host's threads, :mod:`.batch`); the
``gym`` row runs the task's gymnasium envs instead, each drawing its own frames. A row says what
the backend needs, whether it can run a task here, and, for an engine row, the factory of its
simulator. Adding a physics backend is a module and a row
(docs/architecture.md, "Where to add things"). Only :mod:`vlmrm_fast.stack` chooses among them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vlmrm_fast.lazy import named

if TYPE_CHECKING:
    import mujoco

    from vlmrm_fast.envs import TaskSpec


def _needs_batch_glue(task: TaskSpec, gpu: int | None) -> str | None:
    return None if task.batch is not None else f"task {task.name!r} has no batch-engine version"


def _always(task: TaskSpec, gpu: int | None) -> str | None:
    return None


@dataclasses.dataclass(frozen=True)
class Physics:
    """One physics backend: its name (``EnvSpec.physics``), what it is, and how it is made.

    ``engine``: it runs in the batch engine, drawn by one of the renderers; otherwise the task's
    gymnasium envs step and draw themselves. ``unavailable(task, gpu)``: why it cannot run ``task``
    for frames scored on CUDA device ``gpu`` (None: the CPU), or None. ``simulator``: for an engine
    row, ``"module:function"`` of ``make(model, num_envs, frame_skip, outputs, gpu)``.
    """

    name: str
    description: str
    needs: str
    engine: bool
    unavailable: Callable[[TaskSpec, int | None], str | None]
    simulator: str | None = None

    def make_simulator(
        self, model: mujoco.MjModel, num_envs: int, frame_skip: int, outputs: tuple[Any, ...], gpu: int | None
    ) -> Any:
        """The engine's simulator of ``num_envs`` copies of ``model``."""
        if self.simulator is None:
            raise ValueError(f"physics={self.name!r} does not run in the batch engine")
        return named(self.simulator)(model, num_envs, frame_skip, outputs, gpu)


PHYSICS: dict[str, Physics] = {
    physics.name: physics
    for physics in (
        Physics(
            "batch",
            "MuJoCo's batch engine: all envs in the native core, stepped on the host's threads (mjb_*)",
            "a MuJoCo task (the built-in humanoid tasks)",
            engine=True,
            unavailable=_needs_batch_glue,
            simulator="vlmrm_fast.physics.batch:make",
        ),
        Physics(
            "gym",
            "the task's gymnasium envs, one per env, each drawing its own frames (SB3's DummyVecEnv)",
            "any gymnasium task",
            engine=False,
            unavailable=_always,
        ),
    )
}

#: What ``physics="auto"`` tries, in order: the batch engine where the task has one and a renderer
#: can draw it, the gymnasium envs otherwise.
AUTO_ORDER = ("batch", "gym")

__all__ = ["AUTO_ORDER", "PHYSICS", "Physics"]
