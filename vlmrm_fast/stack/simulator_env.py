"""The simulator env: a MuJoCo task's envs as one SB3 VecEnv, held by one simulator of a physics row and drawn
by one renderer of a renderer row.

:class:`SimulatorVecEnv` is a plain ``VecEnv`` whose reward is the task's own. It is also a
frame source in ranges (:class:`~vlmrm_fast.frames.views.SteppedFrameSource`), so that the VLM reward
wrapper can score one range of envs while the next is simulated: ``step_in_ranges(actions, ranges,
stream, on_frames)`` takes the whole step, range by range: it steps envs ``rows`` with the simulator
(``physics.PHYSICS``: frame_skip physics steps and gymnasium's ``mj_rnePostConstraint``), draws the states
they reach with the renderer (``rendering.RENDERERS``, from a state the simulator offers) and lends their
frames in place to ``on_frames``; then it computes observations and rewards from the copied-out fields
(numpy, all envs at once) and resets finished envs. The simulator env alone holds a step's state;
``step_wait`` is the same step in one range. It knows a backend by its row alone: what it offers a
renderer, the memory one env needs and where (``Physics.env_bytes``), and whether its outputs are kept on
a device (``Physics.device_observations``).

What the simulator env needs of a task is a :class:`~vlmrm_fast.envs.vector_task.VectorTask` (the task's
rules over every env at once: observations, terminations, reset noise, and a ``StepReward`` holding the
task's own per-env state), e.g. :class:`~vlmrm_fast.envs.humanoid.HumanoidVectorTask`.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

from vlmrm_fast.checks import one_of
from vlmrm_fast.envs.time_limits import SCORE_TERMINAL_ON, TIME_LIMITS
from vlmrm_fast.envs.vector_task import VectorTask
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.physics import PHYSICS
from vlmrm_fast.physics.simulator import DRAWN_POSITIONS
from vlmrm_fast.physics.solver import with_solver
from vlmrm_fast.rendering import RENDERERS
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.memory import check_envs_fit
from vlmrm_fast.runtime.profiling import NULL_TIMER
from vlmrm_fast.stack.actions import check_actions


class SimulatorEnvView:
    """What ``get_attr``/``set_attr``/``env_method`` see of env ``index`` (no gymnasium object exists)."""

    def __init__(self, simulator_env: SimulatorVecEnv, index: int):
        # A proxy, not a reference: views and the simulator env in a cycle would keep the simulator env's simulator and
        # renderer alive after close() until the garbage collector's next full pass.
        self._simulator_env = weakref.proxy(simulator_env)
        self.index = index
        self.render_mode = "rgb_array"

    @property
    def unwrapped(self) -> SimulatorEnvView:
        return self

    @property
    def observation_space(self) -> gymnasium.Space:
        return self._simulator_env.observation_space

    @property
    def action_space(self) -> gymnasium.Space:
        return self._simulator_env.action_space

    @property
    def dt(self) -> float:
        return self._simulator_env.sim.dt

    @property
    def episode_length(self) -> int | None:
        return self._simulator_env.episode_length

    @property
    def qpos(self) -> np.ndarray:
        return self._simulator_env.sim.qpos[self.index].copy()

    @property
    def qvel(self) -> np.ndarray:
        return self._simulator_env.sim.qvel[self.index].copy()

    def get_wrapper_attr(self, name: str) -> Any:
        return getattr(self, name)

    def set_wrapper_attr(self, name: str, value: Any) -> None:
        setattr(self, name, value)

    def render(self) -> np.ndarray:
        return self._simulator_env.get_images()[self.index]


class SimulatorVecEnv(VecEnv):
    """``num_envs`` envs of a MuJoCo task (its :class:`VectorTask`, ``vector_task``), simulated by
    ``physics`` and drawn by ``renderer`` (rows of ``vlmrm_fast.physics.PHYSICS`` and
    ``vlmrm_fast.rendering.RENDERERS``, as :mod:`vlmrm_fast.stack.plan` chose them) for frames scored on
    ``device`` (the CPU, or ``cuda:N``, where a GPU renderer draws and a physics whose state lives on a device runs);
    ``solver``: the constraint solver the task's model runs with (None: its own).

    Env ``i`` is seeded with ``seed + i`` at the next reset, as SB3's vector envs do; the
    episode ends after ``episode_length`` steps, as ``time_limit`` says: a truncation
    (``TimeLimit.truncated``, SB3 bootstraps) or a termination (the paper's code; no bootstrap).

    Finished envs are reset inside ``step_wait`` (SB3's convention, gymnasium's
    ``AutoresetMode.SAME_STEP``: the final observation goes to ``info["terminal_observation"]``).
    With ``reset_on_next_step = True`` (gymnasium's default ``AutoresetMode.NEXT_STEP``, set by
    :class:`~vlmrm_fast.stack.gym_vector.VLMRewardVectorEnv`) a finished env returns its final
    observation and is reset by the next step instead, whose action it ignores: that step returns
    the reset observation with reward 0, not done, and its frame is drawn from the reset state
    (``autoreset_envs`` marks those envs).

    ``score_terminal_on``: the frame drawn for an episode's last step: ``"terminal_state"``, the state
    that ended it; ``"reset_frame"``, the next episode's reset state, as SB3's vector envs showed the
    paper's code (they reset a finished env before ``get_images()``): finished envs are then reset
    before their range is drawn, their observation and reward still those of the state that ended the
    episode (``envs.spec.SCORE_TERMINAL_ON``; same-step resets only).

    ``drawn_positions``: the poses a step's frame shows, ``"reached"`` (the positions the step reached) or
    ``"gymnasium"`` (each simulation's data as its step left it, as gymnasium's ``render()`` draws it:
    ``physics.simulator.DRAWN_POSITIONS``; a renderer that draws the simulator's data where it lies).
    An episode also ends where the task terminates it (``VectorTask.terminated``), as gymnasium's env does.
    """

    def __init__(
        self,
        vector_task: VectorTask,
        num_envs: int,
        *,
        render_size: tuple[int, int],
        episode_length: int | None,
        time_limit: str = "truncate",
        device: torch.device | str = "cpu",
        renderer: str = "egl",
        physics: str = "batch",
        solver: str | None = None,
        score_terminal_on: str = "terminal_state",
        drawn_positions: str = "reached",
    ):
        height, width = render_size
        device = resolve_device(device)
        self.vector_task = vector_task
        self._closed = False
        self.episode_length = episode_length
        self.time_limit = one_of(time_limit, "time_limit", TIME_LIMITS)
        self.score_terminal_on = one_of(score_terminal_on, "score_terminal_on", SCORE_TERMINAL_ON)
        self.physics = one_of(physics, "physics", [name for name, row in PHYSICS.items() if row.in_simulator_env])
        self.renderer = one_of(renderer, "renderer", tuple(RENDERERS))
        self.drawn_positions = one_of(drawn_positions, "drawn_positions", DRAWN_POSITIONS)
        row = PHYSICS[self.physics]
        if RENDERERS[self.renderer].state_for(row.offers, self.drawn_positions) is None:
            drawers = [name for name, other in RENDERERS.items() if other.state_for(row.offers, self.drawn_positions)]
            raise ValueError(
                f"drawn_positions={self.drawn_positions!r}: renderer={self.renderer!r} cannot draw physics="
                f"{self.physics!r}'s data as its step left it (it draws positions); use renderer="
                f"{' or '.join(map(repr, drawers)) or 'one that draws it'}, or drawn_positions='reached'"
            )
        self.model = vector_task.build_model(max(height, width))
        if solver is not None:  # the plan's: one model for the physics and the drawing
            self.model = with_solver(self.model, solver)
        need = row.env_bytes(self.model, render_size, device)  # refused before anything is allocated
        check_envs_fit(num_envs, need.count, need.what, need.device)
        self.sim = row.make_simulator(self.model, num_envs, vector_task.frame_skip, vector_task.outputs, device)
        self._device_observations = row.device_observations
        self.frame_source = RENDERERS[self.renderer].make(self.model, num_envs, render_size, vector_task.camera, device)
        obs_dim = vector_task.observation(self.sim.outputs).shape[1]
        low, high = self.model.actuator_ctrlrange.copy().astype(np.float32).T
        self.views = [
            SimulatorEnvView(self, i) for i in range(num_envs)
        ]  # before the base class asks their render_mode
        super().__init__(
            num_envs,
            gymnasium.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64),
            gymnasium.spaces.Box(low=low, high=high, dtype=np.float32),
        )
        self.render_mode = "rgb_array"
        self.timer = NULL_TIMER
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._step_reward = vector_task.step_reward(self.model, num_envs)
        self._actions: np.ndarray | None = None
        self.reset_on_next_step = False
        self._reset_next = np.zeros(num_envs, dtype=bool)  # envs the next step resets (next-step autoreset)
        self.autoreset_envs = np.zeros(num_envs, dtype=bool)  # envs the last step reset instead of stepping
        self._ended: dict[int, dict[str, np.ndarray]] = {}  # reset_frame: the outputs of the states that ended envs

    # ------------------------------------------------------------------ VecEnv API
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the env was closed (close() was called): make a new one to reset or step it")

    def reset(self) -> np.ndarray:
        self._check_open()
        if any(self._options):
            raise ValueError("the simulator env takes no reset options")
        seeds = None if all(s is None for s in self._seeds) else [int(s) for s in self._seeds if s is not None]
        self.sim.reset(seed=seeds, noise=self.vector_task.reset_noise)
        self._reset_seeds()
        self._steps[:] = 0
        self._ended.clear()
        self._reset_next[:] = False
        self.autoreset_envs[:] = False
        return self.vector_task.observation(self.sim.outputs)

    def seed(self, seed: int | Sequence[int] | None = None) -> Sequence[int | None]:
        """Env ``i`` is seeded with ``seed + i`` at the next reset, or with ``seed[i]`` given one seed per env
        (gymnasium's ``reset(seed=[...])``); None: unseeded (see base class)."""
        if seed is None or isinstance(seed, (int, np.integer)):
            self._seeds = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [int(s) for s in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed: {len(seeds)} seeds for {self.num_envs} envs; give one per env, or an int")
            self._seeds = list(seeds)
        return self._seeds

    def step_async(self, actions: np.ndarray) -> None:
        self._check_open()
        self._actions = check_actions(actions, self.action_space, self.num_envs)

    def step_wait(self):
        self._check_open()
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        actions, self._actions = self._actions, None
        return self.step_in_ranges(actions, [slice(0, self.num_envs)])

    # ----------------------------------------------- a step in ranges (SteppedFrameSource)
    def step_in_ranges(
        self,
        actions: np.ndarray,
        ranges: Sequence[slice],
        stream: Any = None,
        on_frames: Callable[[slice, contextlib.AbstractContextManager[FrameView]], None] | None = None,
    ):
        """One step of every env with ``actions`` (checked), taken range by range: each range of ``ranges``
        (consecutive, covering the envs) is simulated and drawn on ``stream``, then its frames are lent
        to ``on_frames(rows, lent)`` before the next range is simulated (the VLM reward wrapper scores
        them meanwhile). Then the observations, the task's rewards and the resets of finished envs, as
        ``step_wait`` returns them."""
        self._check_open()
        if ranges[0].start != 0 or ranges[-1].stop != self.num_envs:
            raise ValueError(f"the ranges of a step must cover envs 0..{self.num_envs - 1}, got {list(ranges)}")
        for rows in ranges:
            self._advance(actions, rows, stream)
            if on_frames is not None:
                on_frames(rows, self.frame_source.lend(rows, stream))
        return self._observe(actions)

    def _advance(self, actions: np.ndarray, rows: slice, stream: Any) -> None:
        """Steps envs ``rows`` and draws the states they reach."""
        with self.timer.stage("physics"):
            self._step_reward.before_step(self.sim.outputs, rows)
            self.sim.step(actions, rows)
            resets = np.flatnonzero(self._reset_next[rows]) + rows.start
            if resets.size:  # next-step autoreset: the step of a finished env is its reset
                self.sim.reset(resets, noise=self.vector_task.reset_noise)
            if self.score_terminal_on == "reset_frame":
                self._reset_ended(rows)
        with self.timer.stage("render"):
            self.frame_source.draw(self.sim, rows, stream, positions=self.drawn_positions)

    def _reset_ended(self, rows: slice) -> None:
        """Resets the envs of ``rows`` whose episode this step ends (the time limit or the task's termination)
        before they are drawn, keeping the outputs of the states that ended them for the step's observations
        and rewards."""
        if self.reset_on_next_step:
            raise ValueError(
                "score_terminal_on='reset_frame' draws the reset that ends a step (SB3's vector envs); with next-step "
                "autoreset the reset comes a step later: use same-step autoreset, or score_terminal_on='terminal_state'"
            )
        outputs = self.sim.outputs
        ending = self.vector_task.terminated({key: value[rows] for key, value in outputs.items()})
        if self.episode_length:
            ending = ending | (self._steps[rows] + 1 >= self.episode_length)
        ended = np.flatnonzero(ending) + rows.start
        if ended.size:
            self._ended.update({int(env): {k: v[env].copy() for k, v in outputs.items()} for env in ended})
            self.sim.reset(ended, noise=self.vector_task.reset_noise)

    def _observe(self, actions: np.ndarray):
        """Observations and rewards from the copied-out fields (all envs at once), then the resets."""
        with self.timer.stage("observe"):
            fields = self.sim.outputs
            if self._ended:  # envs reset before they were drawn: the step is that of the states that ended them
                fields = {key: value.copy() for key, value in fields.items()}
                for row, ended in self._ended.items():
                    for key, value in ended.items():
                        fields[key][row] = value
            obs = self.vector_task.observation(fields)
            terminated = self.vector_task.terminated(fields)
            rewards, terms = self._step_reward(fields, actions, self.sim.dt)
            self._steps += 1
            reset_now = self._reset_next.copy()  # next-step autoreset: these envs were reset by _advance()
            self._steps[reset_now] = 0
            rewards[reset_now] = 0.0
            terminated[reset_now] = False
            self.autoreset_envs[:] = reset_now
            at_limit = self._steps >= self.episode_length if self.episode_length else np.zeros(self.num_envs, bool)
            dones = at_limit | terminated
            # gymnasium's TimeLimit and SB3: a step the task ends is a termination, whatever the clock says
            truncated = at_limit & ~terminated if self.time_limit == "truncate" else np.zeros(self.num_envs, bool)
            infos = [{key: value[i] for key, value in terms.items()} for i in range(self.num_envs)]
            for i, info in enumerate(infos):
                info["TimeLimit.truncated"] = bool(truncated[i])
            if self.reset_on_next_step:
                self._reset_next[:] = dones
            elif dones.any():
                ids = np.flatnonzero(dones)
                for env in ids:
                    infos[env]["terminal_observation"] = obs[env].copy()
                unreset = ids[[int(env) not in self._ended for env in ids]]  # (reset_frame: reset before drawing)
                if unreset.size:
                    self.sim.reset(unreset, noise=self.vector_task.reset_noise)
                self._ended.clear()
                self._steps[ids] = 0
                obs[ids] = self.vector_task.observation(self.sim.outputs)[ids]
        return obs, rewards.astype(np.float32), dones, infos

    def device_observation(self, device: Any) -> Any:
        """Every env's observation of the current state (what the last ``reset`` or step returned) as a
        torch tensor on ``device``: computed where the state lies when the physics keeps its outputs there
        (its row's ``device_observations``: the simulator's ``torch_outputs`` on its ``device``), else the host's
        observation copied there."""
        if self._device_observations and self.sim.device == torch.device(device):
            return self.vector_task.observation(self.sim.torch_outputs)
        return torch.as_tensor(self.vector_task.observation(self.sim.outputs), device=device)

    def last_frames(self, device: Any = None):
        """The frames the last step drew, upright uint8 (N, H, W, 3): on ``device`` when the
        renderer draws on that GPU, else on the host."""
        on_gpu = device is not None and self.frame_source.cuda_device is not None
        return self.frame_source.frames(device if on_gpu else None)

    def get_images(self) -> list[np.ndarray]:
        return list(self.frame_source.render_sim(self.sim, positions=self.drawn_positions))

    # ------------------------------------------------------- SB3 env access
    def _targets(self, indices) -> list[SimulatorEnvView]:
        return [self.views[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [view.get_wrapper_attr(attr_name) for view in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        for view in self._targets(indices):
            view.set_wrapper_attr(attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        return [getattr(view, method_name)(*method_args, **method_kwargs) for view in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        return [False for _ in self._targets(indices)]

    def close(self) -> None:
        self._closed = True
        self.frame_source.close()
        self.sim.close()
