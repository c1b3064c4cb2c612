"""MuJoCo tasks as one SB3 VecEnv: all envs stepped in the native core, drawn by a batch renderer.

:class:`MujocoBatchVecEnv` is a plain ``VecEnv`` whose reward is the task's own. It is
also a frame source in ranges (:class:`~vlmrm_fast.frames.SteppedFrameSource`), so that
the VLM reward wrapper can score one range of envs while the next is simulated:
``advance(rows)`` steps envs ``rows`` with the actions of ``step_async``
(frame_skip x mj_step + rnePostConstraint on the simulator's threads) and draws the
states they reach (``renderer="egl"``: scene updates on the simulator's threads, one GL
pass; ``"warp"``: qpos to the device, one MuJoCo Warp launch); ``lend(rows)`` hands the
frames over in place. ``step_wait`` advances whatever was not advanced, then computes
observations and rewards from the copied-out fields (numpy, all envs at once) and resets
finished envs.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import gymnasium
import mujoco
import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from vlmrm_fast.actions import check_actions
from vlmrm_fast.checks import one_of
from vlmrm_fast.envs.spec import RENDERERS
from vlmrm_fast.envs.time_limits import TIME_LIMITS
from vlmrm_fast.frames import FrameSource
from vlmrm_fast.memory import check_envs_fit, env_bytes
from vlmrm_fast.profiling import NULL_TIMER
from vlmrm_fast.rendering import BatchRenderer
from vlmrm_fast.sim import BatchSimulator


class StepReward(Protocol):
    """A task's own reward for the engine's envs, with whatever per-env state it needs."""

    def before_step(self, fields: dict[str, np.ndarray], rows: slice) -> None:
        """Envs ``rows`` are about to step; ``fields`` are the simulator's outputs of their current state."""

    def __call__(
        self, fields: dict[str, np.ndarray], ctrl: np.ndarray, dt: float
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(rewards (N,), per-env info arrays) of the step every env took with controls ``ctrl``."""
        ...


class BatchTask(Protocol):
    """What the batch engine needs of a MuJoCo task (e.g. :class:`~vlmrm_fast.envs.humanoid.HumanoidBatch`)."""

    frame_skip: int
    reset_noise_scale: float
    outputs: tuple[str, ...]  # the mjData fields the simulator copies out after each step

    @property
    def camera(self) -> str: ...

    def build_model(self, render_size: int) -> mujoco.MjModel: ...

    def observation(self, fields: dict[str, np.ndarray]) -> np.ndarray: ...

    def step_reward(self, model: mujoco.MjModel, num_envs: int) -> StepReward: ...


def choose_renderer(renderer: str, gpu: int | None) -> str:
    """The renderer that draws for ``renderer`` (one of ``envs.spec.RENDERERS``) when frames are scored on
    CUDA device ``gpu`` (None: the CPU). ``"auto"`` is ``"warp"`` on the CPU when MuJoCo Warp is installed
    (Warp's CPU backend draws the humanoid several times faster than Mesa's llvmpipe, bench/RESULTS.md),
    and ``"egl"`` otherwise: on a GPU, EGL draws ``mujoco.Renderer``'s own pixels into CUDA memory."""
    if one_of(renderer, "renderer", RENDERERS) != "auto":
        return renderer
    if gpu is None:
        from vlmrm_fast.warp_rendering import warp_available

        if warp_available() is None:
            return "warp"
    return "egl"


def make_renderer(
    kind: str, model, num_envs: int, render_size: tuple[int, int], camera, gpu: int | None
) -> FrameSource:
    """A batch renderer of ``kind`` (``"egl"`` or ``"warp"``, as :func:`choose_renderer` resolved it) drawing ``num_envs`` frames of
    ``render_size`` (height, width)."""
    height, width = render_size
    if kind == "egl":  # already chosen: "auto" resolved by choose_renderer
        return BatchRenderer(model, num_envs, width, height, camera=camera, gpu=gpu)
    from vlmrm_fast.warp_rendering import WarpBatchRenderer

    return WarpBatchRenderer(
        model, num_envs, width, height, camera=camera, device="cpu" if gpu is None else f"cuda:{gpu}"
    )


class BatchEnvView:
    """What ``get_attr``/``set_attr``/``env_method`` see of env ``index`` (no gymnasium object exists)."""

    def __init__(self, engine: MujocoBatchVecEnv, index: int):
        # A proxy, not a reference: views and engine in a cycle would keep the engine's simulator and
        # renderer alive after close() until the garbage collector's next full pass.
        self._engine = weakref.proxy(engine)
        self.index = index
        self.render_mode = "rgb_array"

    @property
    def unwrapped(self) -> BatchEnvView:
        return self

    @property
    def observation_space(self) -> gymnasium.Space:
        return self._engine.observation_space

    @property
    def action_space(self) -> gymnasium.Space:
        return self._engine.action_space

    @property
    def dt(self) -> float:
        return self._engine.sim.dt

    @property
    def episode_length(self) -> int | None:
        return self._engine.episode_length

    @property
    def qpos(self) -> np.ndarray:
        return self._engine.sim.qpos[self.index].copy()

    @property
    def qvel(self) -> np.ndarray:
        return self._engine.sim.qvel[self.index].copy()

    def get_wrapper_attr(self, name: str) -> Any:
        return getattr(self, name)

    def set_wrapper_attr(self, name: str, value: Any) -> None:
        setattr(self, name, value)

    def render(self) -> np.ndarray:
        return self._engine.get_images()[self.index]


class MujocoBatchVecEnv(VecEnv):
    """``num_envs`` envs of a MuJoCo task (its :class:`BatchTask` glue, ``batch``).

    Env ``i`` is seeded with ``seed + i`` at the next reset, as SB3's vector envs do; the
    episode ends after ``episode_length`` steps, as ``time_limit`` says: a truncation
    (``TimeLimit.truncated``, SB3 bootstraps) or a termination (the paper's code; no bootstrap).

    Finished envs are reset inside ``step_wait`` (SB3's convention, gymnasium's
    ``AutoresetMode.SAME_STEP``: the final observation goes to ``info["terminal_observation"]``).
    With ``reset_on_next_step = True`` (gymnasium's default ``AutoresetMode.NEXT_STEP``, set by
    :class:`~vlmrm_fast.gym_vector.VLMRewardVectorEnv`) a finished env returns its final
    observation and is reset by the next step instead, whose action it ignores: that step returns
    the reset observation with reward 0, not done, and its frame is drawn from the reset state
    (``autoreset_envs`` marks those envs).
    """

    def __init__(
        self,
        batch: BatchTask,
        num_envs: int,
        *,
        render_size: tuple[int, int],
        episode_length: int | None,
        time_limit: str = "truncate",
        gpu: int | None = None,
        renderer: str = "egl",
        nthread: int = 0,
    ):
        height, width = render_size
        self.batch = batch
        self.episode_length = episode_length
        self.time_limit = one_of(time_limit, "time_limit", TIME_LIMITS)
        self.model = batch.build_model(max(height, width))
        frames_on_host = (height, width) if gpu is None else None  # on a GPU they are in its memory
        each = "MuJoCo's data" + (f" and a {height}x{width} RGBA frame" if frames_on_host else "")
        check_envs_fit(num_envs, env_bytes(self.model, frames_on_host), each)
        self.sim = BatchSimulator(
            self.model,
            num_envs,
            frame_skip=batch.frame_skip,
            outputs=batch.outputs,
            rne_post_constraint=True,
            nthread=nthread,
        )
        self.renderer = choose_renderer(renderer, gpu)  # its name ("auto" resolved); what draws is frame_source
        self.frame_source = make_renderer(self.renderer, self.model, num_envs, render_size, batch.camera, gpu)
        obs_dim = batch.observation(self.sim.outputs).shape[1]
        low, high = self.model.actuator_ctrlrange.copy().astype(np.float32).T
        self.views = [BatchEnvView(self, i) for i in range(num_envs)]  # before the base class asks their render_mode
        super().__init__(
            num_envs,
            gymnasium.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64),
            gymnasium.spaces.Box(low=low, high=high, dtype=np.float32),
        )
        self.render_mode = "rgb_array"
        self.timer = NULL_TIMER
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._step_reward = batch.step_reward(self.model, num_envs)
        self._actions: np.ndarray | None = None
        self._advanced = 0  # envs [0, _advanced) of the pending step have been advanced
        self.reset_on_next_step = False
        self._reset_next = np.zeros(num_envs, dtype=bool)  # envs the next step resets (next-step autoreset)
        self.autoreset_envs = np.zeros(num_envs, dtype=bool)  # envs the last step reset instead of stepping

    # ------------------------------------------------------------------ VecEnv API
    def reset(self) -> np.ndarray:
        if any(self._options):
            raise ValueError("the MuJoCo batch engine takes no reset options")
        seeds = None if all(s is None for s in self._seeds) else [int(s) for s in self._seeds if s is not None]
        self.sim.reset(seed=seeds, noise_scale=self.batch.reset_noise_scale)
        self._reset_seeds()
        self._steps[:] = 0
        self._reset_next[:] = False
        self.autoreset_envs[:] = False
        return self.batch.observation(self.sim.outputs)

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Env ``i`` is seeded with ``seed + i`` at the next reset; None: unseeded (see base class)."""
        self._seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        return self._seeds

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = check_actions(actions, self.action_space, self.num_envs)
        self._advanced = 0

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        if self._advanced < self.num_envs:
            self.advance(slice(self._advanced, self.num_envs))
        with self.timer.stage("observe"):
            actions, self._actions = self._actions, None
            fields = self.sim.outputs
            obs = self.batch.observation(fields)
            rewards, terms = self._step_reward(fields, np.asarray(actions, np.float64), self.sim.dt)
            self._steps += 1
            reset_now = self._reset_next.copy()  # next-step autoreset: these envs were reset by advance()
            self._steps[reset_now] = 0
            rewards[reset_now] = 0.0
            self.autoreset_envs[:] = reset_now
            at_limit = self._steps >= self.episode_length if self.episode_length else np.zeros(self.num_envs, bool)
            dones = at_limit.copy()
            truncated = at_limit if self.time_limit == "truncate" else np.zeros(self.num_envs, bool)
            infos = [{key: value[i] for key, value in terms.items()} for i in range(self.num_envs)]
            for i, info in enumerate(infos):
                info["TimeLimit.truncated"] = bool(truncated[i])
            if self.reset_on_next_step:
                self._reset_next[:] = dones
            elif dones.any():
                ids = np.flatnonzero(dones)
                for i in ids:
                    infos[i]["terminal_observation"] = obs[i].copy()
                self.sim.reset(ids, noise_scale=self.batch.reset_noise_scale)
                self._steps[ids] = 0
                obs[ids] = self.batch.observation(self.sim.outputs)[ids]
        return obs, rewards.astype(np.float32), dones, infos

    # ----------------------------------------------- ranges of a step (SteppedFrameSource)
    def advance(self, rows: slice, stream=None) -> None:
        """Steps envs ``rows`` (the next range of the pending step) and draws the states they reach."""
        if self._actions is None:
            raise RuntimeError("advance() needs the actions of step_async() first")
        if rows.start != self._advanced or rows.stop <= rows.start:
            raise ValueError(f"advance envs in order: the next range starts at env {self._advanced}, got {rows}")
        with self.timer.stage("physics"):
            self._step_reward.before_step(self.sim.outputs, rows)
            self.sim.step(self._actions, rows)
            resets = np.flatnonzero(self._reset_next[rows]) + rows.start
            if resets.size:  # next-step autoreset: the step of a finished env is its reset
                self.sim.reset(resets, noise_scale=self.batch.reset_noise_scale)
        with self.timer.stage("render"):
            self.frame_source.draw(self.sim, rows, stream)
        self._advanced = rows.stop

    def lend(self, rows: slice, stream=None):
        """The frames ``advance`` drew for envs ``rows``, in place (see ``BatchRenderer.lend``)."""
        return self.frame_source.lend(rows, stream)

    def last_frames(self, device: Any = None):
        """The frames the last step drew, upright uint8 (N, H, W, 3): on ``device`` when the
        renderer draws on that GPU, else on the host."""
        on_gpu = device is not None and self.frame_source.cuda_device is not None
        return self.frame_source.frames(device if on_gpu else None)

    def get_images(self) -> list[np.ndarray]:
        return list(self.frame_source.render_sim(self.sim))

    # ------------------------------------------------------- SB3 env access
    def _targets(self, indices) -> list[BatchEnvView]:
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
        self.frame_source.close()
        self.sim.close()
