"""The one place where a stack's choices are made: :func:`plan_stack` resolves an
:class:`~vlmrm_fast.envs.spec.EnvSpec` and a reward model (its spec, or a loaded one) into a frozen
:class:`StackPlan`, and :func:`build_stack` hands that plan down to the model loader, the simulator env,
its simulator and renderer, and the reward wrapper. None of them decides anything again.

    env = EnvSpec("humanoid-kneeling", 64, render_size=224)
    plan = plan_stack(env, RewardModelSpec(model="ViT-L-14/laion2b_s32b_b82k"))
    plan.describe()   # 'humanoid-kneeling, 64 envs scored on cuda:0: physics batch, renderer egl, ...'
    venv, model = build_stack(plan, RewardModelSpec(...))

The choices, each made once, in this order:

1. the device frames are scored on (the reward model's: a loaded model's, or its spec's resolved);
2. the renderer (``vlmrm_fast.rendering.RENDERERS``: a named one, or ``"auto"``'s pick for that device);
3. the physics (``vlmrm_fast.physics.PHYSICS``: a named one, or ``"auto"``'s: the simulator env where the
   task has one and the renderer can draw, the task's gymnasium envs otherwise); a renderer draws a
   simulator env's physics when it draws one of the states its simulator offers (``Renderer.draws``,
   ``Physics.offers``): a pair that cannot meet is refused, naming both and what would;
4. the pipeline's ranges of envs (``stack.scorer.plan_chunks``: one range where nothing can overlap);
5. the encoder's batch: the largest range (fixed-batch encoders are built for it), or for rewards scored
   later in episode batches the batch that fills the device, unless the spec sets one.

On the way it checks, once, what the reward model asks of the stack (its family's
``reward.protocol.RewardNeeds``: episodes long enough for a window, the state that ended an episode,
rewards as the envs step, a time limit) against the env spec (:func:`check_needs`); nothing below checks
it again.

Each setting of the plan has one value: ``plan.env`` is the env spec with every choice written in
(``physics``, ``renderer``, ``solver``, ``pipeline_chunks`` as they run, never ``"auto"``), and the device is
one ``torch.device`` handed down to the simulator env, its simulator and its renderer.

``FastVLMRewardVecEnv`` (a keyword front over this module), ``ShardedVecEnv`` and the gymnasium vector
env build their stacks here; :func:`specs_of_arguments` is the one place keywords become specs.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.envs import TaskSpec
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.physics import AUTO_ORDER, PHYSICS, Physics
from vlmrm_fast.physics.simulator import HOST_DATA
from vlmrm_fast.rendering import RENDERERS, choose_renderer
from vlmrm_fast.reward.protocol import RewardModel, RewardNeeds, check_reward_model
from vlmrm_fast.reward.schedule import ScoreSchedule, schedule_of
from vlmrm_fast.reward.spec import RewardModelSpec, spec_fields
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.memory import check_envs_fit
from vlmrm_fast.stack.scorer import plan_chunks

if TYPE_CHECKING:
    import gymnasium

logger = logging.getLogger(__name__)

#: EnvSpec fields that the keyword fronts take as keywords (task and num_envs come first, by position).
ENV_ARGUMENTS = tuple(field.name for field in dataclasses.fields(EnvSpec) if field.name not in ("task", "n_envs"))
#: The paths a stack's frames take (``StackPlan.path``), fastest first.
PATHS = ("simulator env", "batched drawing", "generic")
#: What a stack takes beside the two specs: the first reset's seed, gymnasium envs' keywords, and
#: whether the rewards are left to the caller (episode batches).
OPTIONS = ("seed", "env_kwargs", "defer_rewards")


@dataclasses.dataclass(frozen=True)
class StackPlan:
    """Every choice of one stack, made once (see the module docstring for the order).

    ``env``: the env spec with every choice in it, each setting one value: the task's defaults filled in,
    ``physics`` a row of ``physics.PHYSICS``, ``renderer`` a row of ``rendering.RENDERERS`` (None: the task's
    gymnasium envs draw their own frames), ``solver`` the constraint solver the task's model runs with
    (None: the model's own), ``pipeline_chunks`` the number of ranges; ``task``: its task (with its scene
    assets); ``device``: where frames are scored, and drawn when they are drawn on a GPU (the CPU or
    ``cuda:N``, the one device handed down to the renderer and the simulator); ``ranges``: the pipeline's
    ranges of envs; ``encoder_batch``: the frames per encoder batch; ``defer_rewards``: the rewards are
    left to the caller, who scores the frames in episode batches.
    """

    env: EnvSpec
    task: TaskSpec = dataclasses.field(compare=False, repr=False)
    device: torch.device
    ranges: tuple[slice, ...]
    encoder_batch: int
    defer_rewards: bool = False

    @property
    def physics(self) -> str:
        return self.env.physics

    @property
    def renderer(self) -> str | None:
        return self.env.renderer

    @property
    def solver(self) -> str | None:
        return self.env.solver

    @property
    def in_simulator_env(self) -> bool:
        """Whether the envs run in the simulator env (else in the task's gymnasium envs)."""
        return PHYSICS[self.physics].in_simulator_env

    @property
    def path(self) -> str:
        """The stack's path, one of :data:`PATHS`: the simulator env; the task's gymnasium envs stepping
        themselves, drawn all at once by the renderer (the batched drawing, ``stack.drawn_env``); or those
        envs drawing their own frames (the generic path)."""
        if self.in_simulator_env:
            return "simulator env"
        return "generic" if self.renderer is None else "batched drawing"

    def env_factory(self, **env_kwargs: Any) -> Callable[[], gymnasium.Env]:
        """A factory of one gymnasium env of the task as the plan draws, steps and ends it (frame size,
        scene assets, the solver, episode length, time limit): the envs of ``physics="gym"``, and a run's
        videos (which so run the dynamics the run trains on)."""
        task, env = self.task, self.env
        return lambda: task.make(
            render_size=env.frame_shape,
            episode_length=env.episode_length,
            time_limit=env.time_limit,
            solver=env.solver,
            **env_kwargs,
        )

    def describe(self) -> str:
        """The plan in one line (logged once per stack; ``vlmrm-fast train`` prints it)."""
        sizes = sorted({r.stop - r.start for r in self.ranges})
        ranges = f"{len(self.ranges)} range{'s' if len(self.ranges) > 1 else ''} of {'/'.join(map(str, sizes))} envs"
        drawn = f"renderer {self.renderer}" if self.renderer else "frames drawn by the gymnasium envs"
        if self.path == "batched drawing":
            drawn = f"the gymnasium envs' data drawn by renderer {self.renderer}"
        if self.env.env_processes:
            drawn += ", each env stepped in a worker process"
        solver = f" ({self.solver} solver)" if self.solver else ""
        scored = ", rewards left to episode batches" if self.defer_rewards else ""
        terminal = (
            ", the last step of an episode scored on the reset frame"
            if self.env.score_terminal_on == ("reset_frame")
            else ""
        )
        if self.renderer and self.env.drawn_positions != "reached":
            terminal += f", drawn as {self.env.drawn_positions} draws"
        return (
            f"{self.env.task}, {self.env.n_envs} envs scored on {self.device}: physics {self.physics}{solver}, "
            f"{drawn}, {ranges}, encoder batch {self.encoder_batch}{scored}{terminal}"
        )


def plan_stack(
    env: EnvSpec,
    reward: RewardModelSpec | RewardModel,
    *,
    simulator_env_only: bool = False,
    defer_rewards: bool = False,
    rollout_steps: int | None = None,
) -> StackPlan:
    """The plan of ``env``'s envs scored by ``reward`` (a spec to load, or a loaded reward model).

    ``simulator_env_only``: the envs must run in the simulator env (the gymnasium vector env drives it), so that
    ``physics="auto"`` picks among the simulator-env rows. ``defer_rewards``: the caller scores the frames in
    episode batches; the encoder batch, unless the spec sets one, is then the batch that fills the device
    (``reward.batch_scoring.episode_batch_size``), evened out over a rollout of ``rollout_steps`` steps of
    every env when given.
    """
    env = env.with_task_defaults()
    task = env.task_spec()
    if task.extra is not None:  # an optional suite: refused here, naming its pip command, before anything is made
        from vlmrm_fast.envs.extras import require

        require(task.extra, f"task {task.name!r}")
    if not isinstance(reward, RewardModelSpec):
        check_reward_model(reward)
    device = resolve_device(reward.device) if isinstance(reward, RewardModelSpec) else torch.device(reward.device)
    asked = PHYSICS.get(env.physics)  # None: "auto"
    drawable = (
        asked is not None and asked.in_simulator_env and asked.unavailable(task, device) is None
    )  # (its module loads)
    if asked is None:  # "auto": the renderer that draws the simulator env of "auto"'s order
        asked = next(PHYSICS[name] for name in AUTO_ORDER if PHYSICS[name].in_simulator_env)
        drawable = True
    renderer = None
    if env.renderer is not None:
        renderer = choose_renderer(
            env.renderer, device, offers=asked.offers if drawable else None, positions=env.drawn_positions
        )
    physics = _choose_physics(env, task, renderer, device, simulator_env_only)
    row = PHYSICS[physics]
    if not row.in_simulator_env:
        renderer = _drawing_renderer(env.renderer, task, device)
    solver = _choose_solver(env, task, row)
    if not row.steps_in_ranges and env.pipeline_chunks not in ("auto", 1):
        raise ValueError(
            f"physics={physics!r} steps every env at once: pipeline_chunks={env.pipeline_chunks!r} cannot split a "
            "step; use pipeline_chunks='auto' (one range)"
        )
    overlaps = renderer is None or RENDERERS[renderer].overlaps_encoder  # host frames: uploads overlap the encoder
    chunks = env.pipeline_chunks if row.steps_in_ranges else 1
    ranges = tuple(plan_chunks(env.n_envs, chunks, device, overlaps=overlaps))
    check_needs(
        reward.needs,
        reward.schedule if isinstance(reward, RewardModelSpec) else schedule_of(reward),
        episode_length=env.episode_length,
        score_terminal_on=env.score_terminal_on,
        defer_rewards=defer_rewards,
    )
    encoder_batch = _encoder_batch(reward, env, device, ranges, defer_rewards, rollout_steps)
    resolved = env.replace(physics=physics, renderer=renderer, solver=solver, pipeline_chunks=len(ranges))
    plan = StackPlan(resolved, task, device, ranges, encoder_batch, defer_rewards)
    logger.info("stack: %s", plan.describe())
    return plan


def check_needs(
    needs: RewardNeeds,
    schedule: ScoreSchedule,
    *,
    episode_length: int | None,
    score_terminal_on: str,
    defer_rewards: bool,
) -> None:
    """Refuses, in one line naming the field and the fix, a stack that cannot give a reward model what it
    ``needs`` (and its ``schedule``: episode batches score every step): the one check of a reward model
    against its stack, made by :func:`plan_stack`, or by a reward wrapper built over envs of one's own."""
    if needs.time_limit is not None and episode_length is None:
        need = needs.time_limit
        instead = f", or {need.instead}" if need.instead else ""
        raise FieldError(
            need.field, f"{need.why}, and these envs have none: give env.episode_length (episode_length=){instead}"
        )
    if needs.too_few_steps is not None and episode_length is not None and needs.frames > episode_length:
        raise FieldError(
            needs.too_few_steps.field,
            f"{needs.frames} frames is more than an episode's {episode_length} steps, so {needs.too_few_steps.why}; "
            f"give at most {episode_length} (or a longer env.episode_length)",
        )
    every = schedule.score_every
    if episode_length is not None and every > episode_length:
        raise FieldError(
            "score_every",
            f"{every} steps is longer than an episode's {episode_length} steps (env.episode_length), so no step would "
            f"be scored on the schedule, only each episode's last; give at most {episode_length} ({episode_length} "
            f"scores each episode's last step alone), or a longer env.episode_length",
        )
    if needs.terminal_state is not None and score_terminal_on == "reset_frame":
        raise FieldError(
            "score_terminal_on",
            f"reset_frame reproduces the paper's one-frame rewards, and {needs.terminal_state}; use "
            "score_terminal_on: terminal_state",
        )
    if defer_rewards and needs.scored_as_it_steps is not None:
        raise ValueError(
            f"defer_rewards (rl.episode_batch) scores single frames after the rollout; {needs.scored_as_it_steps}: "
            "leave defer_rewards off (rl.episode_batch: false)"
        )
    if defer_rewards and not schedule.every_step:
        raise ValueError(
            f"defer_rewards (episode-batch scoring) scores every step's frame later; the reward model scores "
            f"{schedule.describe()}: give it score_every=1, or leave defer_rewards off"
        )


def _encoder_batch(
    reward: RewardModelSpec | RewardModel,
    env: EnvSpec,
    device: torch.device,
    ranges: tuple[slice, ...],
    defer_rewards: bool,
    rollout_steps: int | None,
) -> int:
    """The frames per encoder batch: a loaded model's, the spec's, else the episode batch that fills the
    device (deferred rewards), else the largest range."""
    if not isinstance(reward, RewardModelSpec):
        return int(reward.chunk_size or max(r.stop - r.start for r in ranges))
    if reward.batch_size:
        return reward.batch_size
    if defer_rewards:
        from vlmrm_fast.reward.batch_scoring import episode_batch_size

        frames = rollout_steps * env.n_envs if rollout_steps else None
        return episode_batch_size(reward.model, device, frames_per_rollout=frames, frame_shape=env.frame_shape)
    return max(r.stop - r.start for r in ranges)


def _choose_physics(
    env: EnvSpec, task: TaskSpec, renderer: str | None, device: torch.device, simulator_env_only: bool = False
) -> str:
    """The physics that runs ``task`` for ``env.physics`` (a row, or "auto": the first of AUTO_ORDER that
    can, among the simulator-env rows where ``simulator_env_only``), ``renderer`` being the one that would draw the batch
    env's frames (None: none can here)."""
    requested = env.physics
    order = [name for name in AUTO_ORDER if PHYSICS[name].in_simulator_env or not simulator_env_only]
    passed: list[str] = []  # why "auto" passed over each row
    for name in order if requested == "auto" else (requested,):
        row = PHYSICS[name]
        task_problem = row.unavailable(task, device)
        drawing_problem = _renderer_problem(renderer, device) if row.in_simulator_env and task_problem is None else None
        pairing = row.in_simulator_env and not (task_problem or drawing_problem)
        pairing_problem = _pairing_problem(row, renderer, task, device, env.drawn_positions) if pairing else None
        if not (task_problem or drawing_problem or pairing_problem):
            return name
        if requested == "auto":
            passed.append(f"{name}: {task_problem or drawing_problem or pairing_problem}")
            continue
        if pairing_problem is not None:
            raise ValueError(pairing_problem)
        if drawing_problem is not None:
            raise RuntimeError(f"physics={name!r} draws with a batch renderer: {drawing_problem}")
        others = [n for n, other in PHYSICS.items() if n != name and other.unavailable(task, device) is None]
        raise ValueError(f"{task_problem}; use physics={' or '.join(map(repr, others))} (or 'auto')")
    raise RuntimeError(f"physics='auto': nothing can run task {task.name!r} here ({'; '.join(passed)})")


def _pairing_problem(
    physics: Physics, renderer: str | None, task: TaskSpec, device: torch.device, positions: str = "reached"
) -> str | None:
    """Why ``renderer`` cannot draw ``physics`` (it draws ``positions`` from none of the states its simulator
    offers), naming the renderers and the physics that would meet here, in one line; None when it can."""
    drawer = RENDERERS[renderer] if renderer is not None else None
    if drawer is None or drawer.state_for(physics.offers, positions) is not None:
        return None
    drawers = [
        name
        for name, row in RENDERERS.items()
        if row.unavailable(device) is None and row.state_for(physics.offers, positions) is not None
    ]
    drawn = [
        name
        for name, row in PHYSICS.items()
        if row.in_simulator_env
        and row.unavailable(task, device) is None
        and drawer.state_for(row.offers, positions) is not None
    ]
    instead = [f"renderer={' or '.join(map(repr, drawers))} with physics={physics.name!r}"] if drawers else []
    instead += [f"physics={' or '.join(map(repr, drawn))} with renderer={drawer.name!r}"] if drawn else []
    if positions != "reached":
        instead.append("drawn_positions='reached'")
        return (
            f"drawn_positions={positions!r} draws each simulation's data as its step left it, and renderer="
            f"{drawer.name!r} draws physics={physics.name!r} from its positions only; use " + ", or ".join(instead)
        )
    return (
        f"renderer={drawer.name!r} cannot draw physics={physics.name!r}: its simulator offers "
        f"{' or '.join(physics.offers)}, the renderer draws {' or '.join(drawer.draws)}; use "
        + (", or ".join(instead) or "another pair")
    )


def _drawing_renderer(requested: str | None, task: TaskSpec, device: torch.device) -> str | None:
    """The renderer that draws the task's gymnasium envs from their own data (the batched drawing) for
    ``requested`` (a row, "auto", or None: each env its own ``render()``): "auto" one that draws
    ``mujoco.Renderer``'s own pixels (EGL) where it is available
    and the task's envs are MuJoCo envs it can draw (its picture is their ``render()``'s; None otherwise: the
    generic path); a named one refused, in one line, where it cannot."""
    if requested is None:
        return None
    # "auto" draws exactly what each env's render() would: a renderer of mujoco.Renderer's own pixels first
    drawers = sorted(
        (name for name in RENDERERS if HOST_DATA in RENDERERS[name].draws), key=lambda n: not RENDERERS[n].mujoco_pixels
    )
    if requested == "auto":
        if task.drawing is None:
            return None
        return next((name for name in drawers if RENDERERS[name].unavailable(device) is None), None)
    if task.drawing is None:
        raise ValueError(
            f"renderer={requested!r} draws MuJoCo envs from their data, and task {task.name!r} runs envs that are not "
            "MuJoCo envs the batch renderers can draw (gymnasium's MujocoEnv, gymnasium-robotics, dm_control through "
            "shimmy): leave the renderer out, and they draw their own frames"
        )
    if requested not in drawers:
        raise ValueError(
            f"renderer={requested!r} draws a simulator env's simulations, not gymnasium envs' own data; task "
            f"{task.name!r} runs on its gymnasium envs: use renderer={' or '.join(map(repr, drawers))}, or 'auto'"
        )
    why = RENDERERS[requested].unavailable(device)
    if why is not None:
        raise RuntimeError(
            f"renderer={requested!r} needs {RENDERERS[requested].needs}: {why}; or leave the renderer out (the "
            "envs draw their own frames)"
        )
    return requested


def _choose_solver(env: EnvSpec, task: TaskSpec, row: Physics) -> str | None:
    """The solver the task's model runs with: the spec's, else the physics' default (None: the model's
    own); refused where the physics cannot run it, or the task has no MuJoCo model."""
    if env.solver is not None and task.vector_task is None:
        raise ValueError(f"solver={env.solver!r}: task {task.name!r} is no MuJoCo task; leave solver out")
    solver = row.solver_for(env.solver)
    if row.solvers is not None and solver not in row.solvers:
        others = [
            name
            for name, other in PHYSICS.items()
            if other.in_simulator_env and (other.solvers is None or solver in other.solvers)
        ]
        raise ValueError(
            f"physics={row.name!r} runs the {' or '.join(row.solvers)} solver, not {solver!r}; "
            f"solver={solver!r} runs with physics={' or '.join(map(repr, others))}"
        )
    return solver


def _renderer_problem(renderer: str | None, device: torch.device) -> str | None:
    """Why ``renderer`` (None: "auto" found none) cannot draw the simulator env's frames here, or None."""
    if renderer is None:
        reasons = "; ".join(f"{name}: {row.unavailable(device)}" for name, row in RENDERERS.items())
        return f"no renderer can draw here ({reasons})"
    why = RENDERERS[renderer].unavailable(device)
    if why is None:
        return None
    others = " or ".join(repr(name) for name in RENDERERS if name != renderer)
    return f"renderer={renderer!r} needs {RENDERERS[renderer].needs}: {why}; or use renderer={others}"


def build_stack(
    plan: StackPlan,
    reward: RewardModelSpec | RewardModel,
    *,
    env_kwargs: dict[str, Any] | None = None,
    vector: Callable[[list[Callable[[], gymnasium.Env]]], Any] | None = None,
) -> tuple[Any, RewardModel]:
    """The envs of ``plan`` (the simulator env, or the task's gymnasium envs recording their frames) and
    the reward model that scores them (``reward`` as loaded, or loaded from it for the plan). ``vector``
    holds the gymnasium envs, given their factories: SB3's ``DummyVecEnv`` unless it says otherwise
    (gymnasium's ``SyncVectorEnv``, for the gymnasium vector API)."""

    from vlmrm_fast.stack.simulator_env import SimulatorVecEnv
    from vlmrm_fast.stack.wrappers import RecordFrame

    if plan.in_simulator_env and env_kwargs:
        raise ValueError("env_kwargs apply to gymnasium envs; use physics='gym' to pass them")
    if (
        not plan.in_simulator_env and plan.env.frame_shape is not None
    ):  # (the simulator env checks its own, knowing the model)
        height, width = plan.env.frame_shape
        check_envs_fit(plan.env.n_envs, 3 * height * width, f"a recorded {height}x{width} RGB frame")
    model = load_for(plan, reward) if isinstance(reward, RewardModelSpec) else reward
    if plan.in_simulator_env:
        assert plan.task.vector_task is not None and plan.renderer is not None and plan.env.frame_shape is not None
        venv: Any = SimulatorVecEnv(
            plan.task.vector_task,
            plan.env.n_envs,
            render_size=plan.env.frame_shape,
            episode_length=plan.env.episode_length,
            time_limit=plan.env.time_limit,
            device=plan.device,
            renderer=plan.renderer,
            physics=plan.physics,
            solver=plan.solver,
            score_terminal_on=plan.env.score_terminal_on,
            drawn_positions=plan.env.drawn_positions,
        )
    elif plan.renderer is not None:  # the batched drawing
        from vlmrm_fast.envs.mujoco_drawing import RecordDrawState
        from vlmrm_fast.stack.drawn_env import DrawnVecEnv

        if vector is not None:
            raise ValueError(
                "gymnasium's vector API draws each sub-env's render(); the batched drawing runs under "
                "FastVLMRewardVecEnv: leave the renderer out (renderer=None)"
            )
        make = plan.env_factory(**(env_kwargs or {}))
        drawn: list[Callable[[], gymnasium.Env]] = [lambda: RecordDrawState(make())] * plan.env.n_envs
        venv = DrawnVecEnv(
            _vector_of(drawn, plan.env.env_processes),
            renderer=plan.renderer,
            device=plan.device,
            score_terminal_on=plan.env.score_terminal_on,
        )
    else:
        make = plan.env_factory(**(env_kwargs or {}))
        recording: list[Callable[[], gymnasium.Env]] = [
            lambda: RecordFrame(make())
        ] * plan.env.n_envs  # (the frame of each reached state in its info)
        venv = (vector or (lambda envs: _vector_of(envs, plan.env.env_processes)))(recording)
    return venv, model


def _vector_of(factories: list[Callable[[], gymnasium.Env]], processes: bool) -> Any:
    """SB3's vector env of the gymnasium envs ``factories`` make: all in this process (``DummyVecEnv``), or
    each in a worker process of its own (``processes``: ``SubprocVecEnv``, started with forkserver where
    the platform has it, as SB3 does)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    return SubprocVecEnv(factories) if processes else DummyVecEnv(factories)


def load_for(plan: StackPlan, spec: RewardModelSpec) -> RewardModel:
    """``spec``'s model for the plan: the task's prompts where the spec leaves them out, on the plan's
    device, its encoder built for the plan's batch."""
    from vlmrm_fast.reward import load_reward_model

    spec = spec.with_task_defaults(plan.task).replace(device=plan.device, batch_size=plan.encoder_batch)
    return load_reward_model(spec)


def specs_of_arguments(
    front: str, task: str, num_envs: int, arguments: dict[str, Any]
) -> tuple[EnvSpec, RewardModelSpec | RewardModel, dict[str, Any]]:
    """A keyword front's arguments (``front`` names it in errors) as (the env spec, the reward model:
    a spec to load or a loaded one, the :data:`OPTIONS` given), each checked once here."""
    arguments = dict(arguments)
    _check_names(front, arguments)
    options = {name: arguments.pop(name) for name in OPTIONS if name in arguments}
    env = EnvSpec(
        task,
        positive_int(num_envs, "num_envs"),  # named as the caller named it (n_envs in a config)
        **{name: arguments.pop(name) for name in ENV_ARGUMENTS if name in arguments},
    )
    model = arguments.pop("reward_model", None)
    spec = arguments.pop("reward_spec", None)
    if model is not None:
        if arguments or spec is not None:
            raise ValueError(
                f"reward_model= is already loaded; drop the reward model fields {sorted(arguments) or ['reward_spec']}"
            )
        return env, model, options
    if spec is None:
        return env, RewardModelSpec.from_kwargs(**arguments), options
    if arguments:
        raise ValueError(f"give reward_spec= alone, or its fields, not both (got {sorted(arguments)})")
    return env, spec, options


def _check_names(front: str, arguments: dict[str, Any]) -> None:
    """Refuses a keyword that is neither a front's, nor a reward model field or encoder option, naming the
    closest one of all of them."""
    from vlmrm_fast.encoders import BACKEND_OPTIONS

    known = {
        *ENV_ARGUMENTS,
        *OPTIONS,
        "reward_model",
        "reward_spec",
        *spec_fields(),
        *(o for opts in BACKEND_OPTIONS.values() for o in opts),
    }
    for key in arguments:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{front} got an unknown argument {key!r}{hint}")
