"""What draws the simulator env's frames: one row per renderer, and what ``renderer="auto"`` picks.

Each renderer is a :class:`~vlmrm_fast.rendering.base.RendererBase` in a module of this package
(``egl.py``: OpenGL through headless EGL; ``warp.py``: MuJoCo Warp's ray tracer) and one row of
:data:`RENDERERS`: what it needs, whether it can draw here, whether its drawing may run beside the
encoder's CUDA work, and its class, which says which states of a simulator it draws
(:attr:`Renderer.draws`). Adding a renderer is a new module and a row (docs/architecture.md, "Where to
add things"). Only :mod:`vlmrm_fast.stack.plan` chooses among them.

Nothing here imports a renderer's module until one is asked for: ``import vlmrm_fast.rendering`` is light.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vlmrm_fast.lazy import named

if TYPE_CHECKING:
    import mujoco
    import torch

    from vlmrm_fast.frames.views import FrameSource


def _egl_unavailable(device: torch.device) -> str | None:
    from vlmrm_fast.rendering.egl import egl_unavailable

    return egl_unavailable()


def _warp_unavailable(device: torch.device) -> str | None:
    from vlmrm_fast.runtime import warp as warp_runtime

    return warp_runtime.warp_available()


@dataclasses.dataclass(frozen=True)
class Renderer:
    """One renderer: its name (``EnvSpec.renderer``), what it is, and how it is made.

    ``overlaps_encoder``: its drawing may run while the encoder runs on the same GPU, so that a step
    split into ranges (``pipeline_chunks``) hides drawing behind encoding. A renderer whose drawing
    time-slices the GPU against CUDA's work (OpenGL in its own context) gains nothing from ranges and
    loses the context switches: ``pipeline_chunks="auto"`` gives it one range.
    ``unavailable(device)``: why it cannot draw here for frames scored on ``device`` (the CPU or
    ``cuda:N``), or None. ``implementation``: ``"module:Class"`` of its ``RendererBase``, imported when
    the row is asked what it draws or to make one. ``mujoco_pixels``: its frames are ``mujoco.Renderer``'s own
    pixels (what a gymnasium MuJoCo env's ``render()`` draws), so that ``"auto"`` prefers it for drawing
    gymnasium envs' own data.
    """

    name: str
    description: str
    needs: str
    overlaps_encoder: bool
    unavailable: Callable[[torch.device], str | None]
    implementation: str
    mujoco_pixels: bool = False

    @property
    def draws(self) -> tuple[str, ...]:
        """The simulator states it draws (``vlmrm_fast.physics.simulator``'s names): its class's ``draws``."""
        return tuple(named(self.implementation).draws)

    def state_for(self, offers: tuple[str, ...], positions: str = "reached") -> str | None:
        """The first of the states a simulator ``offers`` that this renderer draws ``positions`` from
        (``physics.simulator.DRAWN_POSITIONS``); None: it cannot draw it so."""
        from vlmrm_fast.physics.simulator import states_for

        return next((state for state in offers if state in self.draws and state in states_for(positions)), None)

    def make(
        self, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], camera: Any, device: torch.device
    ) -> FrameSource:
        """A renderer drawing ``num_envs`` frames of ``render_size`` (height, width) from ``camera``, for
        frames scored on ``device``."""
        return named(self.implementation).for_simulator_env(model, num_envs, render_size, camera, device)

    def make_for_env_data(
        self, model: mujoco.MjModel, num_envs: int, render_size: tuple[int, int], max_geom: int, device: torch.device
    ) -> FrameSource:
        """A renderer drawing ``num_envs`` gymnasium envs' own data (the batched drawing; ``draws`` holds
        ``physics.simulator.HOST_DATA``), scenes of ``max_geom`` geoms at most."""
        return named(self.implementation).for_env_data(model, num_envs, render_size, max_geom, device)


RENDERERS: dict[str, Renderer] = {
    renderer.name: renderer
    for renderer in (
        Renderer(
            "egl",
            "OpenGL through headless EGL: mujoco.Renderer's own pixels, into a buffer CUDA maps in place",
            "headless EGL (Mesa's on a CPU, the NVIDIA driver's on a GPU)",
            overlaps_encoder=False,
            unavailable=_egl_unavailable,
            implementation="vlmrm_fast.rendering.egl:EGLRenderer",
            mujoco_pixels=True,
        ),
        Renderer(
            "warp",
            "MuJoCo Warp's ray tracer: all envs' frames in one launch (a CUDA graph on a GPU)",
            "MuJoCo Warp (pip install 'vlmrm-fast[warp]')",
            overlaps_encoder=True,
            unavailable=_warp_unavailable,
            implementation="vlmrm_fast.rendering.warp:WarpRenderer",
        ),
    )
}

#: What ``renderer="auto"`` tries, in order, for frames scored on the CPU and on a GPU. On the CPU,
#: Warp's CPU backend draws the humanoid several times faster than Mesa's llvmpipe (bench/RESULTS.md);
#: on a GPU, EGL draws mujoco.Renderer's own pixels and is what a plain ``pip install .`` has.
AUTO_ORDER = {"cpu": ("warp", "egl"), "cuda": ("egl", "warp")}


def choose_renderer(
    requested: str, device: torch.device, offers: tuple[str, ...] | None = None, positions: str = "reached"
) -> str | None:
    """The renderer that draws for ``requested`` (a row of :data:`RENDERERS`, or ``"auto"``) when frames
    are scored on ``device`` (the CPU or ``cuda:N``): a named one as it is (made later, its errors
    then; whether it can draw the physics is the plan's to say), ``"auto"`` the first available of
    :data:`AUTO_ORDER` that draws ``positions`` from one of the states ``offers`` (None: any), None when
    none is."""
    from vlmrm_fast.checks import one_of

    if one_of(requested, "renderer", ("auto", *RENDERERS)) != "auto":
        return requested
    for name in AUTO_ORDER[device.type]:
        row = RENDERERS[name]
        if (offers is None or row.state_for(offers, positions) is not None) and row.unavailable(device) is None:
            return name
    return None


__all__ = ["AUTO_ORDER", "RENDERERS", "Renderer", "choose_renderer"]
