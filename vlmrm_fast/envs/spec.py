"""EnvSpec: everything that picks the envs of a run, checked once and passed whole.

The env-side twin of :class:`~vlmrm_fast.reward.spec.RewardModelSpec`: ``FastVLMRewardVecEnv``
builds one from its arguments, the training config's ``env:`` section is one, and under torchrun
it travels to every rank. Fields left None take the task's defaults (:meth:`with_task_defaults`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from vlmrm_fast import physics as _physics
from vlmrm_fast import rendering as _rendering
from vlmrm_fast.checks import FieldError, FieldTypeError, boolean, chunk_count, number, one_of, positive_int
from vlmrm_fast.envs import TaskSpec, get_task
from vlmrm_fast.envs.paper_assets import normalized_folder
from vlmrm_fast.envs.time_limits import SCORE_TERMINAL_ON, TIME_LIMITS
from vlmrm_fast.physics.simulator import DRAWN_POSITIONS
from vlmrm_fast.physics.solver import SOLVERS


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """``n_envs`` envs of ``task`` (a built-in task or a gymnasium id) and how they are stepped.

    ``render_size``: frames of (height, width), or a square's side; ``physics``: how the envs are
    simulated, a row of ``vlmrm_fast.physics.PHYSICS`` (the simulator env, gymnasium envs, ...) or
    ``"auto"`` (the first that can run the task, ``vlmrm_fast.stack.plan``); ``renderer``: what draws the
    simulator env's frames, a row of ``vlmrm_fast.rendering.RENDERERS`` or ``"auto"`` (Warp on a CPU
    when installed, EGL otherwise: ``rendering.AUTO_ORDER``), None where none does (``physics="gym"``:
    the gymnasium envs draw their own; a stack's plan says so); over the gymnasium envs of a MuJoCo task
    (``TaskSpec.drawing``) ``"auto"`` draws them all at once from their own data (the batched drawing,
    ``stack.drawn_env``; ``renderer="egl"`` asks for it, None for each env's own ``render()``);
    ``env_processes``: each gymnasium env stepped in a worker process of its own (SB3's ``SubprocVecEnv``;
    false: all in this process, SB3's ``DummyVecEnv``); ``pipeline_chunks``: the ranges
    of envs a step is scored in while the next is simulated (``"auto"``: up to 4 on a GPU, 1 on the
    CPU); ``env_reward_weight`` (rho): the agent learns from ``vlm + rho * env``. ``time_limit``: how
    an episode ends at ``episode_length``, ``"truncate"`` (SB3 bootstraps, the default) or
    ``"terminal"`` (no bootstrap, as the paper's code; see ``envs.time_limits``). ``scene_assets``: a
    folder with the paper's own image files (a checkout of its repository), drawn instead of the
    generated textures (see ``envs.paper_assets``). ``solver``: the constraint solver the task's model
    runs with (``"newton"``, ``"cg"``, ``"pgs"``; None: the physics' default, which is the model's own
    for ``physics="batch"`` and Newton for ``"warp"``, whose MuJoCo Warp has no PGS; docs/physics.md
    compares them). ``score_terminal_on``: the frame an episode's last step is scored on,
    ``"terminal_state"`` (the state that ended it) or ``"reset_frame"`` (the next episode's first, as
    the paper's code scored it; ``envs.time_limits``, docs/paper.md). ``drawn_positions``: the poses a
    simulator env's frames show, ``"reached"`` (the positions each step reached, as the observation) or
    ``"gymnasium"`` (each simulation's data as its step left it, which is what gymnasium's ``render()``
    draws: the poses of the step's last forward pass, one substep behind; ``physics.simulator``,
    docs/paper.md); gymnasium envs (``physics="gym"``) always draw gymnasium's way (their own ``render()``, or
    the batched drawing of their data as it lies). How the envs spread over
    torchrun's ranks is :class:`~vlmrm_fast.distributed.DistributedConfig`'s.

    A stack's plan (``vlmrm_fast.stack.plan.StackPlan.env``) is this spec with every choice made: the task's
    defaults filled in, ``physics``, ``renderer``, ``solver`` and ``pipeline_chunks`` as they run.
    """

    task: str
    n_envs: int = 1
    episode_length: int | None = None
    render_size: int | tuple[int, int] | None = None
    physics: str = "auto"
    renderer: str | None = "auto"
    env_processes: bool = False
    pipeline_chunks: int | str = "auto"
    env_reward_weight: float = 0.0
    time_limit: str = "truncate"
    scene_assets: str | None = None
    solver: str | None = None
    score_terminal_on: str = "terminal_state"
    drawn_positions: str = "reached"

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if not isinstance(self.task, str) or not self.task:
            raise FieldError(
                "task", f"must be a task name (e.g. humanoid-kneeling) or a gymnasium id, got {self.task!r}"
            )
        try:
            get_task(self.task)
        except ValueError as exc:
            raise FieldError("task", str(exc)) from None
        put("n_envs", positive_int(self.n_envs, "n_envs"))
        put("episode_length", positive_int(self.episode_length, "episode_length", allow_none=True))
        shape = render_shape(self.render_size)
        if shape is not None and not isinstance(self.render_size, (int, np.integer)):
            put("render_size", shape)  # a list from YAML becomes the (height, width) it means
        one_of(self.physics, "physics", ("auto", *_physics.PHYSICS))
        if self.renderer is not None:
            one_of(self.renderer, "renderer", ("auto", *_rendering.RENDERERS))
        elif self.physics != "gym" and not (self.physics == "auto" and get_task(self.task).vector_task is None):
            raise FieldError(
                "renderer",
                f"None draws nothing, and physics={self.physics!r} runs the simulator env, which a renderer draws; "
                "name one, or 'auto' (None goes with physics='gym', whose gymnasium envs draw their own frames)",
            )
        put("env_processes", boolean(self.env_processes, "env_processes"))
        if self.env_processes and self.physics not in ("auto", "gym"):
            raise FieldError(
                "env_processes",
                f"steps gymnasium envs in worker processes; physics={self.physics!r} steps every env in this process "
                "(the simulator env): leave env_processes false, or use physics='gym'",
            )
        put("pipeline_chunks", chunk_count(self.pipeline_chunks, "pipeline_chunks", self.n_envs))
        put("env_reward_weight", number(self.env_reward_weight, "env_reward_weight"))
        one_of(self.time_limit, "time_limit", TIME_LIMITS)
        one_of(self.score_terminal_on, "score_terminal_on", SCORE_TERMINAL_ON)
        one_of(self.drawn_positions, "drawn_positions", DRAWN_POSITIONS)
        if self.solver is not None:
            one_of(self.solver, "solver", tuple(SOLVERS))
        if self.scene_assets is not None:
            if not isinstance(self.scene_assets, str) or not self.scene_assets:
                raise FieldTypeError(
                    "scene_assets", f"must be a folder holding the paper's image files, got {self.scene_assets!r}"
                )
            put("scene_assets", normalized_folder(self.scene_assets))
            try:
                get_task(self.task).with_scene_assets(self.scene_assets)
            except (ValueError, OSError) as exc:
                raise FieldError("scene_assets", str(exc).removeprefix("scene_assets: ")) from None

    def task_spec(self) -> TaskSpec:
        """The task, drawn with ``scene_assets`` when given."""
        return get_task(self.task).with_scene_assets(self.scene_assets)

    @property
    def frame_shape(self) -> tuple[int, int] | None:
        """The frames' (height, width); None: the task's."""
        return render_shape(self.render_size)

    def replace(self, **changes: Any) -> EnvSpec:
        return dataclasses.replace(self, **changes)

    def with_task_defaults(self) -> EnvSpec:
        """The task's episode length and frame size where this spec leaves them None."""
        task = get_task(self.task)
        return self.replace(
            episode_length=self.episode_length or task.episode_length,
            render_size=self.render_size or task.render_size,
        )


def render_shape(render_size: Any) -> tuple[int, int] | None:
    """``render_size`` (an int, or (height, width)) as (height, width); None passes."""
    if render_size is None:
        return None
    if isinstance(render_size, (int, np.integer)) and not isinstance(render_size, bool):
        size = (int(render_size), int(render_size))
    elif (
        isinstance(render_size, Sequence)
        and not isinstance(render_size, str)
        and len(render_size) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in render_size)
    ):
        size = (int(render_size[0]), int(render_size[1]))
    else:
        raise FieldTypeError("render_size", f"must be an int or (height, width), got {render_size!r}")
    if min(size) < 8 or max(size) > 4096:
        raise FieldError("render_size", f"{size} is outside [8, 4096] pixels; CLIP takes e.g. 224 or the paper's 480")
    return size
