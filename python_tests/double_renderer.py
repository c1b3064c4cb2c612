"""A test double of a renderer: all that a new renderer is, one module and one row.

:class:`FlatRenderer` paints each env's frame in one colour, a function of the root's position
(:func:`colour`), from a simulator's positions on the host: a picture a test can compute. :data:`ROW`
is its row of ``vlmrm_fast.rendering.RENDERERS``; a test registers it
(``monkeypatch.setitem(RENDERERS, ROW.name, ROW)``) and the plan and the simulator env take it from there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import mujoco
import numpy as np
import torch

from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.physics.simulator import HOST_POSITIONS
from vlmrm_fast.rendering import Renderer
from vlmrm_fast.rendering.base import RendererBase


def colour(qpos: np.ndarray) -> np.ndarray:
    """uint8 (..., 3): the frame colour of positions ``qpos`` (..., nq), from the root's x, y, z."""
    return np.clip(np.round(128 + 100 * np.asarray(qpos)[..., :3]), 0, 255).astype(np.uint8)


class FlatRenderer(RendererBase):
    draws = (HOST_POSITIONS,)

    def __init__(self, model: mujoco.MjModel, num_envs: int, height: int, width: int):
        super().__init__(model, num_envs, height, width)
        self._frames = torch.zeros((num_envs, height, width, 3), dtype=torch.uint8)
        self._closed = False

    @classmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], camera: Any, device: torch.device
    ) -> FlatRenderer:
        height, width = render_size
        return cls(model, num_envs, height, width)

    @property
    def num_envs(self) -> int:
        return self._frames.shape[0]

    @property
    def height(self) -> int:
        return self._frames.shape[1]

    @property
    def width(self) -> int:
        return self._frames.shape[2]

    @property
    def cuda_device(self) -> int | None:
        return None

    @property
    def closed(self) -> bool:
        return self._closed

    def _draw_qpos(self, qpos: np.ndarray) -> None:
        self._frames.numpy()[:] = colour(qpos)[:, None, None, :]

    def _draw_sim(self, sim: Any, state: str, start: int, count: int, stream: Any, kinematics: bool) -> None:
        rows = slice(start, start + count)
        self._frames.numpy()[rows] = colour(sim.qpos[rows])[:, None, None, :]

    @contextlib.contextmanager
    def lend(self, rows: slice | None = None, stream: Any = None) -> Iterator[FrameView]:
        self._live()
        yield FrameView.of(self._frames[rows if rows is not None else slice(None)])

    def _fetch(self, target: torch.device | None) -> Any:
        return self._frames.numpy().copy()

    def close(self) -> None:
        self._closed = True


ROW = Renderer(
    "flat",
    "a test double: each frame one colour, from the root's position (python_tests/double_renderer.py)",
    "nothing",
    overlaps_encoder=True,
    unavailable=lambda device: None,
    implementation="double_renderer:FlatRenderer",
)
