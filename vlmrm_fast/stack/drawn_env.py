"""The batched drawing: gymnasium MuJoCo envs that step themselves, their frames drawn all at once.

Between the simulator env (a task written for it: physics and drawing in the native core) and the generic
path (any gymnasium env, one ``render()`` per env) stands this path, for an env the batch renderers can
draw (``envs.mujoco_drawing``: gymnasium's ``MujocoEnv``, gymnasium-robotics' envs, dm_control through
shimmy). Each env keeps its own ``step()``, so its observations, rewards, terminations and resets are
its own; SB3's vector env holds them, in this process (``DummyVecEnv``) or in worker processes
(``SubprocVecEnv``, ``EnvSpec.env_processes``), each wrapped in ``RecordDrawState``, which puts the packed
fields of the data its frame is drawn from in the step's info (from a worker, only those come back
beside the step's usual results). :class:`DrawnVecEnv` writes them into an ``mjData`` per env of its
own and a batch renderer draws every env's frame in one call (``rendering.egl``: the scenes on the
CPU's threads, one GL pass), from each env's own camera, as its ``render()`` would: each data as its
step left it (``positions="gymnasium"``, a state of ``physics.simulator.STATES_AS_STEPPED``).

    venv = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(make_env())] * 8), renderer="egl")
    obs, rewards, dones, infos = venv.step(actions)
    with venv.lend_frames(slice(0, 8)) as view: ...     # the step's frames, in place
"""

from __future__ import annotations

import contextlib
from typing import Any

import mujoco
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from vlmrm_fast.checks import one_of
from vlmrm_fast.envs.mujoco_drawing import DRAW_STATE_KEY, DrawLayout, DrawSetup
from vlmrm_fast.envs.time_limits import SCORE_TERMINAL_ON
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.physics.simulator import HOST_DATA
from vlmrm_fast.rendering import RENDERERS
from vlmrm_fast.runtime.profiling import NULL_TIMER


class EnvData:
    """Every env's drawn state as a renderer draws it (``physics.simulator.HOST_DATA``): a model and an
    ``mjData`` per env, the packed draw states written into them, each env's camera and the options."""

    offers = (HOST_DATA,)

    def __init__(self, setups: list[DrawSetup]) -> None:
        first = setups[0]
        for i, setup in enumerate(setups):
            if (setup.family, setup.height, setup.width) != (first.family, first.height, first.width):
                raise ValueError(
                    f"env {i} draws {setup.family} frames of {setup.height}x{setup.width}, env 0 {first.family} frames "
                    f"of {first.height}x{first.width}: the envs of one batched drawing must draw alike"
                )
            if setup.option != first.option or setup.max_geom != first.max_geom:
                raise ValueError(
                    f"env {i} draws with other visual options or scene capacity than env 0: the envs of one batched "
                    "drawing must draw alike"
                )
        self.setups = setups
        self.models = [setup.model for setup in setups]
        self.datas = [mujoco.MjData(model) for model in self.models]
        layouts: dict[int, DrawLayout] = {}
        self.layouts = [layouts.setdefault(id(model), DrawLayout(model)) for model in self.models]
        self.model_addresses = [model._address for model in self.models]
        self.data_addresses = [data._address for data in self.datas]
        self.option = first.option

    @property
    def num_envs(self) -> int:
        return len(self.models)

    @property
    def model(self) -> mujoco.MjModel:
        return self.models[0]

    def env_range(self, rows: slice | None) -> tuple[int, int]:
        if rows is None:
            return 0, self.num_envs
        start, stop, _ = rows.indices(self.num_envs)
        return start, stop - start

    def camera(self, env: int) -> dict[str, Any]:
        """Env ``env``'s camera as its ``render()`` makes it, from the state it holds now (its first draw)."""
        return self.setups[env].camera.camera(self.models[env], self.datas[env])

    def write(self, env: int, state: tuple[np.ndarray, np.ndarray]) -> None:
        self.layouts[env].unpack(state, self.datas[env])


class DrawnVecEnv(VecEnvWrapper):
    """An SB3 VecEnv of gymnasium MuJoCo envs (``venv``, each wrapped in ``RecordDrawState``) whose frames
    ``renderer`` (a row of ``rendering.RENDERERS`` that draws host data) draws all at once after each step,
    for frames scored on ``device`` (see the module docstring). ``score_terminal_on``: the frame of an
    episode's last step, the state that ended it or (``"reset_frame"``) the next episode's first, which
    the vector env reset it to."""

    def __init__(
        self,
        venv: VecEnv,
        *,
        renderer: str = "egl",
        device: torch.device | str = "cpu",
        score_terminal_on: str = "terminal_state",
    ) -> None:
        super().__init__(venv)
        self.score_terminal_on = one_of(score_terminal_on, "score_terminal_on", SCORE_TERMINAL_ON)
        row = RENDERERS[one_of(renderer, "renderer", tuple(RENDERERS))]
        if HOST_DATA not in row.draws:
            drawers = [name for name, other in RENDERERS.items() if HOST_DATA in other.draws]
            raise ValueError(
                f"renderer={renderer!r} cannot draw gymnasium envs' own data; renderer={' or '.join(map(repr, drawers))} "
                "can (or leave the renderer unset: the envs draw their own frames)"
            )
        self.renderer = renderer
        self.env_data = EnvData(list(venv.env_method("draw_setup")))
        setup = self.env_data.setups[0]
        self.frame_source: Any = row.make_for_env_data(
            self.env_data.model, self.num_envs, (setup.height, setup.width), setup.max_geom, torch.device(device)
        )
        self.render_mode = "rgb_array"
        self.timer = NULL_TIMER

    def reset(self):
        obs = self.venv.reset()
        self._write([info.pop(DRAW_STATE_KEY) for info in self.venv.reset_infos])
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self.venv.step_async(actions)

    def step_wait(self):
        """The envs' step, then every env's frame of the state it reached drawn (or, ``reset_frame``, of the
        state a finished env was reset to)."""
        with self.timer.stage("physics"):
            obs, rewards, dones, infos = self.venv.step_wait()
        with self.timer.stage("render"):
            states = [info.pop(DRAW_STATE_KEY) for info in infos]
            for env in np.flatnonzero(dones):  # the vector env reset it: its reset state came in its reset info
                reset_state = self.venv.reset_infos[env].pop(DRAW_STATE_KEY)
                if self.score_terminal_on == "reset_frame":
                    states[env] = reset_state
            self._write(states)
            self.frame_source.draw(self.env_data, positions="gymnasium")
        return obs, rewards, dones, infos

    def _write(self, states: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for env, state in enumerate(states):
            self.env_data.write(env, state)

    def lend_frames(self, rows: slice, stream: Any = None) -> contextlib.AbstractContextManager[FrameView]:
        """Frames ``rows`` of the last step, lent in place (``frames.views.DrawnFrameSource``)."""
        return self.frame_source.lend(rows, stream)

    def last_frames(self, device: Any = None):
        """The frames the last step drew, upright uint8 (N, H, W, 3): on ``device`` when the renderer draws on
        that GPU, else on the host."""
        on_gpu = device is not None and self.frame_source.cuda_device is not None
        return self.frame_source.frames(device if on_gpu else None)

    def get_images(self) -> list[np.ndarray]:
        """Every env's frame of its current state, drawn in one call (not one ``render()`` per env)."""
        self.frame_source.draw(self.env_data, positions="gymnasium")
        return list(self.frame_source.frames())

    def close(self) -> None:
        self.frame_source.close()
        self.venv.close()
