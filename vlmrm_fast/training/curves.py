"""The learning curves a user looks at first, as files in the run folder: ``learning_curves.csv`` and
``learning_curves.png`` (episode return, VLM reward, ground-truth reward, success), written at each
checkpoint and at the end.

:class:`LearningCurves` is an SB3 output format: it sees every write of the run's logger, at the step
TensorBoard gets it, and keeps the curves' keys. A resumed run reads the CSV back and drops the rows past
its checkpoint, as TensorBoard's ``purge_step`` hides them there.
"""

from __future__ import annotations

import csv
import math
import numbers
import pathlib
from typing import Any

from stable_baselines3.common.logger import KVWriter

from vlmrm_fast.envs.success import LAST_STEP_RATE, RATE_NAMES

CURVES_CSV = "learning_curves.csv"
CURVES_PNG = "learning_curves.png"

#: The curves, by their log key: the title of each panel.
CURVES = {
    "rollout/ep_rew_mean": "episode return (the reward trained on)",
    "rollout/ep_vlm_reward_mean": "VLM reward per episode",
    "rollout/ep_gt_reward_mean": "ground-truth reward per episode",
}
#: The success rates a task may log (its own rule's first), shown in the fourth panel.
SUCCESS_KEYS = tuple(f"rollout/{name}" for name in (*RATE_NAMES.values(), LAST_STEP_RATE))
COLUMNS = ("step", *CURVES, *SUCCESS_KEYS)


class LearningCurves(KVWriter):
    """Collects the curves' values from each write of the logger; :meth:`save` writes the CSV and the PNG."""

    def __init__(self, run_dir: pathlib.Path, start_steps: int = 0):
        self.run_dir = pathlib.Path(run_dir)
        self.rows: list[dict[str, float]] = [
            row for row in _read(self.run_dir / CURVES_CSV) if row["step"] <= start_steps
        ]

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        values = {
            key: float(value) for key, value in key_values.items() if key in COLUMNS and isinstance(value, numbers.Real)
        }
        if not values:
            return
        if self.rows and self.rows[-1]["step"] == step:  # a second write at one step adds what the first lacked
            self.rows[-1] = {**values, **self.rows[-1]}
        else:
            self.rows.append({"step": float(step), **values})

    def close(self) -> None:
        pass

    def save(self) -> tuple[pathlib.Path, pathlib.Path]:
        """Writes ``learning_curves.csv`` and ``learning_curves.png`` into the run folder (each atomically, on
        the run's record of its files)."""
        from vlmrm_fast.training.run_files import RunFiles

        files = RunFiles(self.run_dir)
        files.write_text(CURVES_CSV, _csv_text(self.rows))
        figure = plot(self.rows)
        files.write(CURVES_PNG, lambda f: figure.savefig(f, format="png", dpi=100))
        return self.run_dir / CURVES_CSV, self.run_dir / CURVES_PNG


def _csv_text(rows: list[dict[str, float]]) -> str:
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([int(row["step"])] + [_cell(row.get(key)) for key in COLUMNS[1:]])
    return out.getvalue()


def _cell(value: float | None) -> str:
    return "" if value is None else repr(value)


def _read(path: pathlib.Path) -> list[dict[str, float]]:
    """The rows of a curves CSV written by an earlier process of the run (none if there is no such file)."""
    try:
        with open(path, newline="") as f:
            return [
                {key: float(value) for key, value in row.items() if key in COLUMNS and value not in ("", None)}
                for row in csv.DictReader(f)
                if row.get("step")
            ]
    except (OSError, ValueError):
        return []


def plot(rows: list[dict[str, float]]) -> Any:
    """A 2x2 figure: episode return, VLM reward, ground-truth reward and success rate against env steps."""
    from vlmrm_fast.evaluation.plotting import new_figure

    figure, axes = new_figure((10, 6.5), 2, 2, sharex=True)
    panels = [*CURVES.items(), ("success", "success rate")]
    for ax, (key, title) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=10)
        keys = [k for k in SUCCESS_KEYS if any(k in row for row in rows)] if key == "success" else [key]
        for k in keys:
            points = [(row["step"], row[k]) for row in rows if k in row and math.isfinite(row[k])]
            if points:
                ax.plot(*zip(*points), marker="." if len(points) < 30 else None, label=k.removeprefix("rollout/"))
        if key == "success" and not keys:
            ax.text(0.5, 0.5, "this task defines no success", ha="center", va="center", transform=ax.transAxes)
        elif not ax.get_lines():
            ax.text(0.5, 0.5, "no episode finished yet", ha="center", va="center", transform=ax.transAxes)
        if key == "success" and keys:
            ax.set_ylim(-0.05, 1.05)
            ax.legend(fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("env steps")
    return figure
