"""The batch engine for MuJoCo tasks: all envs stepped in the native core, drawn by a batch renderer.

A step comes in two parts, so that the VecEnv can score one range of envs while
it simulates the next: ``advance(actions, rows)`` steps envs ``rows``
(frame_skip x mj_step + rnePostConstraint on the simulator's threads) and draws
their reached states (``renderer="egl"``: scene updates on the simulator's
threads, one GL pass; ``"warp"``: qpos to the GPU, one MuJoCo Warp launch); the
frames stay with the renderer, which lends them in place (``lend``). Then
``finish()`` computes observations and the env's reward from the copied-out
fields (numpy, all envs at once) and resets finished envs.
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium
import numpy as np

from vlmrm_fast.profiling import NULL_TIMER, StageTimer
from vlmrm_fast.rendering import BatchRenderer
from vlmrm_fast.sim import BatchSimulator

RENDERERS = ("egl", "warp")


def make_renderer(kind: str, model, num_envs: int, render_size: tuple[int, int], camera, gpu: int | None):
    """A batch renderer of ``kind`` drawing ``num_envs`` frames of ``render_size`` (height, width)."""
    height, width = render_size
    if kind == "egl":
        return BatchRenderer(model, num_envs, width, height, camera=camera, gpu=gpu)
    if kind == "warp":
        from vlmrm_fast.warp_rendering import WarpBatchRenderer

        return WarpBatchRenderer(model, num_envs, width, height, camera=camera, device="cpu" if gpu is None else f"cuda:{gpu}")
    raise ValueError(f"renderer {kind!r} is unknown; use one of {RENDERERS}")


class BatchEnvView:
    """What ``get_attr``/``set_attr``/``env_method`` see of env ``index`` (no gymnasium object exists)."""

    def __init__(self, engine: "MujocoBatchSimulation", index: int):
        self._engine = engine
        self.index = index
        self.render_mode = "rgb_array"

    @property
    def unwrapped(self) -> "BatchEnvView":
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


class MujocoBatchSimulation:
    """``num_envs`` envs of a MuJoCo ``batch`` task (e.g. :class:`~vlmrm_fast.envs.humanoid.HumanoidBatch`)."""

    def __init__(
        self,
        batch: Any,
        num_envs: int,
        *,
        render_size: tuple[int, int],
        episode_length: int | None,
        gpu: int | None = None,
        renderer: str = "egl",
        nthread: int = 0,
    ):
        height, width = render_size
        self.batch = batch
        self.episode_length = episode_length
        self.model = batch.build_model(max(height, width))
        self.sim = BatchSimulator(
            self.model, num_envs, frame_skip=batch.frame_skip, outputs=batch.outputs, rne_post_constraint=True, nthread=nthread
        )
        self.renderer = make_renderer(renderer, self.model, num_envs, render_size, batch.camera, gpu)
        obs_dim = batch.observation(self.sim.outputs).shape[1]
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64)
        low, high = self.model.actuator_ctrlrange.copy().astype(np.float32).T
        self.action_space = gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)
        self.num_envs = num_envs
        self.views = [BatchEnvView(self, i) for i in range(num_envs)]
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._seeds: list[int | None] | None = None
        self._xy_before = np.zeros((num_envs, 2))
        self._actions: np.ndarray | None = None

    # ----------------------------------------------------------------- seeding
    def seed(self, seed: int | None) -> Sequence[int | None]:
        """Env ``i`` is seeded with ``seed + i`` at the next reset (as SB3's vector envs)."""
        self._seeds = None if seed is None else [seed + i for i in range(self.num_envs)]
        return self._seeds or [None] * self.num_envs

    def set_options(self, options: Any) -> None:
        if options:
            raise ValueError("the MuJoCo batch engine takes no reset options")

    # ------------------------------------------------------------------ stepping
    def reset(self) -> np.ndarray:
        self.sim.reset(seed=self._seeds, noise_scale=self.batch.reset_noise_scale)
        self._seeds = None
        self._steps[:] = 0
        return self.batch.observation(self.sim.outputs)

    def advance(self, actions: np.ndarray, rows: slice, stream=None, timer: StageTimer = NULL_TIMER) -> None:
        """Steps envs ``rows`` with their rows of ``actions`` and draws the states they reach."""
        with timer.stage("physics"):
            fields = self.sim.outputs
            self._xy_before[rows] = self.batch.mass_center_xy(self.model, {"xipos": fields["xipos"][rows]})
            self.sim.step(actions, rows)
            self._actions = actions
        with timer.stage("render"):
            self.renderer.draw(self.sim, rows, stream)

    def lend(self, rows: slice, stream=None):
        """The frames ``advance`` drew for envs ``rows``, in place (see ``BatchRenderer.lend``)."""
        return self.renderer.lend(rows, stream)

    def finish(self, timer: StageTimer = NULL_TIMER):
        """Observations, env rewards, dones and infos of the step; finished envs are reset."""
        with timer.stage("observe"):
            actions, self._actions = self._actions, None
            fields = self.sim.outputs
            obs = self.batch.observation(fields)
            env_rewards, terms = self.batch.reward(self.model, self.sim.dt, self._xy_before, fields, np.asarray(actions, np.float64))
            self._steps += 1
            truncated = self._steps >= self.episode_length if self.episode_length else np.zeros(self.num_envs, bool)
            dones = truncated.copy()
            infos = [{key: value[i] for key, value in terms.items()} for i in range(self.num_envs)]
            for i, info in enumerate(infos):
                info["TimeLimit.truncated"] = bool(truncated[i])
            if dones.any():
                ids = np.flatnonzero(dones)
                for i in ids:
                    infos[i]["terminal_observation"] = obs[i].copy()
                self.sim.reset(ids, noise_scale=self.batch.reset_noise_scale)
                self._steps[ids] = 0
                obs[ids] = self.batch.observation(self.sim.outputs)[ids]
        return obs, env_rewards.astype(np.float32), dones, infos

    def last_frames(self, device: Any = None):
        """The frames the last step drew, upright uint8 (N, H, W, 3): on ``device`` when the
        renderer draws on that GPU, else on the host."""
        on_gpu = device is not None and self.renderer.cuda_device is not None
        return self.renderer.frames(device if on_gpu else None)

    def get_images(self) -> list[np.ndarray]:
        frames = self.renderer.render_sim(self.sim)
        return list(frames)

    # ------------------------------------------------------- SB3 env access
    def _targets(self, indices) -> list[BatchEnvView]:
        if indices is None:
            return self.views
        if isinstance(indices, (int, np.integer)):
            return [self.views[int(indices)]]
        return [self.views[int(i)] for i in indices]

    def get_attr(self, name: str, indices=None) -> list[Any]:
        return [view.get_wrapper_attr(name) for view in self._targets(indices)]

    def set_attr(self, name: str, value: Any, indices=None) -> None:
        for view in self._targets(indices):
            view.set_wrapper_attr(name, value)

    def env_method(self, name: str, *args, indices=None, **kwargs) -> list[Any]:
        return [getattr(view, name)(*args, **kwargs) for view in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        return [False for _ in self._targets(indices)]

    def close(self) -> None:
        self.renderer.close()
        self.sim.close()
