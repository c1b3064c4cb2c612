"""What the batch renderers share, written once: the calls a user makes (``render``,
``render_sim``, ``draw``, ``frames``), their checks (positions, simulator, the device frames go
to), and closing.

A renderer (:class:`~vlmrm_fast.rendering.egl.EGLRenderer` on EGL,
:class:`~vlmrm_fast.rendering.warp.WarpRenderer` on MuJoCo Warp) says which states of a
simulator it draws (``draws``: ``vlmrm_fast.physics.simulator``'s names) and supplies how it draws
positions (``_draw_qpos``) and a simulator's envs from one of those states (``_draw_sim``), how it
lends frames in place (``lend``) and how it copies them out (``_fetch``). Both are
``frames.views.FrameSource``\\ s; ``for_simulator_env`` is how the simulator env makes one (its row names the class).
"""

from __future__ import annotations

import abc
import contextlib
from typing import TYPE_CHECKING, Any, ClassVar

import mujoco
import numpy as np

from vlmrm_fast.checks import one_of, positive_int
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.physics.simulator import DRAWN_POSITIONS, Simulator, states_for
from vlmrm_fast.runtime.device import no_gpu_reason

if TYPE_CHECKING:
    import torch


class RendererBase(abc.ABC):
    """``num_envs`` frames of ``model`` (height x width) per call; see the module docstring."""

    model: mujoco.MjModel
    #: the simulator states it draws (``vlmrm_fast.physics.simulator``'s names), read by its row
    draws: ClassVar[tuple[str, ...]]

    def __init__(self, model: mujoco.MjModel, num_envs: int, height: int, width: int) -> None:
        if not isinstance(model, mujoco.MjModel):
            raise TypeError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        positive_int(num_envs, "num_envs")
        positive_int(height, "height")
        positive_int(width, "width")
        self.model = model

    # ------------------------------------------------------------ what a renderer supplies
    @classmethod
    @abc.abstractmethod
    def for_simulator_env(
        cls, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], camera: Any, device: torch.device
    ) -> RendererBase:
        """The simulator env's renderer (its row of ``vlmrm_fast.rendering.RENDERERS``): ``num_envs`` frames of
        ``render_size`` (height, width) from ``camera``, for frames scored on ``device`` (the plan's: the CPU, or
        ``cuda:N``, where a renderer that draws on a GPU draws)."""

    @classmethod
    def for_env_data(
        cls, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], max_geom: int, device: torch.device
    ) -> RendererBase:
        """The batched drawing's renderer (``stack.drawn_env``): ``num_envs`` frames of ``render_size`` (height,
        width) of gymnasium envs' own MuJoCo data (``physics.simulator.HOST_DATA``), each from its env's camera,
        scenes of ``max_geom`` geoms at most (as the envs' own renderers), for frames scored on ``device``.
        Only a renderer that draws host data makes one."""
        raise TypeError(f"{cls.__name__} does not draw gymnasium envs' own data; renderer='egl' does")

    @property
    @abc.abstractmethod
    def num_envs(self) -> int: ...

    @property
    @abc.abstractmethod
    def width(self) -> int: ...

    @property
    @abc.abstractmethod
    def height(self) -> int: ...

    @property
    @abc.abstractmethod
    def cuda_device(self) -> int | None:
        """CUDA index of the GPU the frames are drawn on; None when they are drawn on the CPU."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool: ...

    @abc.abstractmethod
    def _draw_qpos(self, qpos: np.ndarray) -> None:
        """Draws every frame for positions ``qpos`` (checked: (num_envs, nq) float64, finite)."""

    @abc.abstractmethod
    def _draw_sim(self, sim: Any, state: str, start: int, count: int, stream: Any, kinematics: bool) -> None:
        """Draws frames ``start .. start + count - 1`` of ``sim``'s current states from ``state`` (one of
        :attr:`draws` that ``sim`` offers), on ``stream``; ``kinematics``: the poses computed from the positions
        first, else (only for a state of ``physics.simulator.STATES_AS_STEPPED``) the data drawn as it lies."""

    @abc.abstractmethod
    def lend(self, rows: slice | None = None, stream: Any = None) -> contextlib.AbstractContextManager[FrameView]:
        """Lends frames ``rows`` in place (see ``frames.views.FrameSource``)."""

    @abc.abstractmethod
    def _fetch(self, target: torch.device | None) -> Any:
        """The last drawn frames, upright uint8 (N, H, W, 3): numpy on the host (None), else a
        torch tensor on ``target``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Frees what the renderer holds (idempotent)."""

    def _drawn_on(self) -> str:
        """Where the frames are drawn, in words (for errors)."""
        return "the CPU" if self.cuda_device is None else f"cuda:{self.cuda_device}"

    # -------------------------------------------------------------------- the calls
    def render(self, qpos: np.ndarray, device: str | torch.device | None = None):
        """Frames for positions ``qpos`` (num_envs, nq); the rest of the state at model defaults.

        Returns uint8 (num_envs, height, width, 3), row 0 at the top, RGB: a numpy array on the
        host (``device`` None or "cpu"), or a torch tensor on the renderer's GPU (``device="cuda"``).
        """
        self._live()
        qpos = check_qpos(qpos, self.num_envs, self.model.nq)
        target = self._target(device)
        self._draw_qpos(qpos)
        return self._fetch(target)

    def render_sim(self, sim: Simulator, device: str | torch.device | None = None, *, positions: str = "reached"):
        """Frames of the current state of each of ``sim``'s simulations (as ``render``)."""
        target = self._target(device)
        self.draw(sim, positions=positions)
        return self._fetch(target)

    def draw(
        self, sim: Simulator, rows: slice | None = None, stream: Any = None, *, positions: str = "reached"
    ) -> None:
        """Draws frames ``rows`` (default all) of the current states of ``sim``'s simulations ``rows``
        (the other frames keep what they hold), on ``stream`` where the renderer uses one, from the first
        state ``sim`` offers that this renderer draws; ``positions``: the poses drawn, ``"reached"`` or
        ``"gymnasium"`` (``physics.simulator.DRAWN_POSITIONS``)."""
        self._live()
        one_of(positions, "positions", DRAWN_POSITIONS)
        offers = tuple(getattr(sim, "offers", ()))
        drawable = [s for s in self.draws if s in states_for(positions)]
        state = next((s for s in offers if s in drawable), None)
        if state is None:
            how = "" if positions == "reached" else f" as its step left it (positions={positions!r})"
            drawn_otherwise = [p for p in DRAWN_POSITIONS if set(offers) & set(self.draws) & set(states_for(p))]
            other = next((p for p in drawn_otherwise if p != positions), None)
            raise TypeError(
                f"{type(self).__name__} draws a simulator's {' or '.join(drawable) or 'positions only'}{how}; a "
                f"{type(sim).__name__} offers {' or '.join(offers) or 'none of them (no offers)'}: draw it with a "
                "renderer of those" + (f", or positions={other!r}" if other else "")
            )
        if sim.num_envs != self.num_envs or sim.model.nq != self.model.nq:
            raise ValueError(
                f"sim holds {sim.num_envs} simulations of a model with nq={sim.model.nq}; the renderer draws "
                f"{self.num_envs} of a model with nq={self.model.nq}: give it a simulator of its model and size"
            )
        start, count = sim.env_range(rows)
        self._draw_sim(sim, state, start, count, stream, kinematics=positions == "reached")

    def frames(self, device: str | torch.device | None = None):
        """The last drawn frames, as ``render`` returns them."""
        return self._fetch(self._target(device))

    # ------------------------------------------------------------------ life cycle
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _live(self) -> None:
        if self.closed:
            raise RuntimeError("the renderer is closed")

    def _target(self, device: str | torch.device | None) -> torch.device | None:
        """None for host frames, else this renderer's CUDA device; checked before drawing."""
        if device is None or (isinstance(device, str) and device == "cpu"):
            return None
        import torch

        try:
            requested = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device={device!r} is not a device; use None, 'cpu' or 'cuda[:N]'") from exc
        if requested.type == "cpu":
            return None
        if requested.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} requested, but {no_gpu_reason()}; use device=None for host frames")
        own = self.cuda_device
        if requested.type != "cuda" or own is None or requested.index not in (None, own):
            raise ValueError(
                f"device={device!r}: this renderer draws on {self._drawn_on()}; frames go to the host "
                f"(device=None){'' if own is None else f' or to cuda:{own}'}"
            )
        if not self._cuda_output_ready():
            raise RuntimeError(f"device={device!r} requested, but {no_gpu_reason()}; use device=None for host frames")
        return torch.device("cuda", own)

    def _cuda_output_ready(self) -> bool:
        """Whether frames can be handed over on this renderer's GPU, beyond torch's CUDA (checked first)."""
        return True


def check_qpos(qpos: Any, num_envs: int, nq: int) -> np.ndarray:
    """Positions for every env: (num_envs, nq) float64, finite."""
    qpos = np.asarray(qpos, dtype=np.float64)
    if qpos.shape != (num_envs, nq):
        raise ValueError(f"qpos must have shape {(num_envs, nq)}, got {qpos.shape}")
    if not np.isfinite(qpos).all():
        raise ValueError("qpos has non-finite values (NaN or inf)")
    return qpos
