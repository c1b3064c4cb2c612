"""Figures without pyplot: no global backend is switched and no window opens (Agg canvas)."""

from __future__ import annotations

import pathlib
from typing import Any

from matplotlib.figure import Figure

DPI = 150


def new_figure(figsize: tuple[float, float], nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Figure, Any]:
    """A constrained-layout figure and its axes (one, or an array as ``Figure.subplots`` returns)."""
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kwargs)
    for ax in axes.flat:
        ax.grid(True, color="#dddddd", lw=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, axes[0, 0] if axes.size == 1 else axes.squeeze()


def palette(n: int, name: str = "viridis") -> list[Any]:
    """``n`` colours from a colormap; sequential maps skip their palest end."""
    import matplotlib

    cmap = matplotlib.colormaps[name]
    if name == "tab10":
        return [cmap(i % 10) for i in range(n)]
    return [cmap(0.85 * i / max(1, n - 1)) for i in range(n)]


def save_figure(fig: Figure, path: str | pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path
