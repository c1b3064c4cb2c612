"""Reward landscapes: the CLIP reward along one state variable, for several alphas (the paper's Figure 2).

Every other variable stays at the task's initial state (``reset(seed)``); the
frames of the sweep are encoded once and scored for all alphas together. A model that asks questions (a
generative VLM judge) has no alpha: its landscape has one curve per question (docs/judge.md).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from vlmrm_fast.envs import TaskSpec, get_task
from vlmrm_fast.evaluation.plotting import new_figure, palette, save_figure
from vlmrm_fast.evaluation.scoring import (
    alpha_criteria,
    asks_questions,
    check_evaluable,
    question_criteria,
    score_frames,
)
from vlmrm_fast.evaluation.states import StateAccess, initial_state, make_task_env, render_states, state_access
from vlmrm_fast.reward.protocol import RewardModel

DEFAULT_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
_AUTO = object()

# (variable, default range, goal) for the classic tasks; MuJoCo hinge and slide joints use their limits.
_CLASSIC_SWEEPS = {
    "pole_angle": ((-0.42, 0.42), 0.0),  # twice CartPole's termination angle; upright is the goal
    "cart_position": ((-2.4, 2.4), None),
    "position": ((-1.2, 0.6), "goal_position"),  # MountainCar: the flag's position
}


@dataclasses.dataclass
class Landscape:
    """Rewards (V, K) at V values of one state variable for K alphas (or, for a judge, K questions: ``alphas``
    is then empty and ``questions`` names the curves)."""

    task: str
    model: str
    variable: str
    values: np.ndarray  # (V,)
    alphas: tuple[float, ...]  # (K,)
    rewards: np.ndarray  # (V, K)
    goal: float | None = None
    frames: np.ndarray | None = dataclasses.field(default=None, repr=False)  # (V, H, W, 3), for the plot's strip
    random_weights: bool = False  # the model's weights are a random initialization: its rewards are noise
    questions: tuple[str, ...] = ()  # a judge's curves, by task name

    @property
    def curves(self) -> tuple[str, ...]:
        """One label per column: ``alpha=0.5``, or a judge's task name."""
        return self.questions or tuple(f"alpha={a:g}" for a in self.alphas)

    def normalized(self) -> np.ndarray:
        """Rewards min-max scaled to [0, 1] per alpha (a constant column becomes 0.5)."""
        low, high = self.rewards.min(axis=0), self.rewards.max(axis=0)
        span = np.where(high > low, high - low, 1.0)
        return np.where(high > low, (self.rewards - low) / span, 0.5)

    def save_csv(self, path: str | pathlib.Path) -> pathlib.Path:
        """Columns: the variable, then the raw reward for each alpha (``reward_alpha=0.5``) or question."""
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([self.variable] + [f"reward_{curve}" for curve in self.curves])
            for value, row in zip(self.values, self.rewards):
                writer.writerow([f"{value:.6g}"] + [f"{r:.8g}" for r in row])
        return path

    def spreads(self) -> np.ndarray:
        """Each alpha's range of rewards along the sweep (max - min), (K,)."""
        return self.rewards.max(axis=0) - self.rewards.min(axis=0)

    def plot(self, path: str | pathlib.Path, *, normalize: bool = False, thumbnails: int = 5) -> pathlib.Path:
        """Reward against the variable, one line per alpha, the goal marked; frames of the sweep below.

        The rewards keep their scale; ``normalize`` min-max scales each alpha's curve to [0, 1], which
        the axis says with each curve's true spread (a spread of 0.001 drawn as a full-height peak is
        noise). A model with random weights is marked as such on the plot."""
        strip = thumbnails > 0 and self.frames is not None
        if strip:
            fig, (ax, strip_ax) = new_figure((7.5, 6.4), 2, 1, height_ratios=(4, 1.3))
        else:
            fig, ax = new_figure((7.5, 4.8))
        y = self.normalized() if normalize else self.rewards
        spreads = self.spreads()
        names = self.questions or tuple(f"α = {a:g}" for a in self.alphas)
        kind = "judge reward" if self.questions else "CLIP reward"
        for k, (name, color) in enumerate(zip(names, palette(len(names)))):
            label = name + (f" (spread {spreads[k]:.2g})" if normalize else "")
            ax.plot(self.values, y[:, k], color=color, lw=2, label=label)
        if self.goal is not None:
            ax.axvline(self.goal, color="#d62728", ls="--", lw=1.5, label=f"goal ({self.variable} = {self.goal:g})")
        ax.set_xlim(self.values.min(), self.values.max())
        ax.set_xlabel(self.variable)
        ax.set_ylabel(f"{kind}, each curve scaled to [0, 1]\n(its true spread in the legend)" if normalize else kind)
        ax.set_title(f"{self.task}: reward landscape\n{self.model}", fontsize=10)
        if self.random_weights:
            ax.text(
                0.5,
                0.97,
                "random weights: these rewards are noise, not a judgement of the frames",
                transform=ax.transAxes,
                ha="center",
                va="top",
                fontsize=9,
                color="#d62728",
                bbox={"facecolor": "white", "edgecolor": "#d62728", "alpha": 0.9},
            )
        ax.legend(fontsize=8, framealpha=0.9, loc="best")
        if strip:
            self._thumbnail_strip(strip_ax, thumbnails)
        return save_figure(fig, path)

    def _thumbnail_strip(self, ax: Any, count: int) -> None:
        """Frames in ``count`` equal slots under the axis, each the sweep value nearest its slot's centre."""
        x0, x1 = float(self.values.min()), float(self.values.max())
        ax.set_xlim(x0, x1)
        ax.set_ylim(0, 1)
        ax.axis("off")
        count = min(count, len(self.values))
        slot = (x1 - x0) / count
        for k in range(count):
            centre = x0 + (k + 0.5) * slot
            i = int(np.argmin(np.abs(self.values - centre)))
            inset = ax.inset_axes((x0 + k * slot + 0.04 * slot, 0.0, 0.92 * slot, 0.85), transform=ax.transData)
            inset.imshow(self.frames[i])
            inset.set_xticks([])
            inset.set_yticks([])
            inset.set_title(f"{self.variable} = {self.values[i]:.3g}", fontsize=6.5, pad=2)


def sweep_range(task: str | TaskSpec, variable: str) -> tuple[tuple[float, float], float | None]:
    """The default (low, high) range and goal of ``variable``, or a ValueError asking for a range."""
    env, _ = make_task_env(task, render=False)
    try:
        env.reset(seed=0)
        access = state_access(env)
        access.index(variable)  # a clear error for unknown names
        base = env.unwrapped
        if access.kind == "classic" and variable in _CLASSIC_SWEEPS:
            span, goal = _CLASSIC_SWEEPS[variable]
            if isinstance(goal, str):
                goal = getattr(base, goal, None)
                span = (float(getattr(base, "min_position", span[0])), float(getattr(base, "max_position", span[1])))
            return span, None if goal is None else float(goal)
        if access.kind == "mujoco" and variable.startswith("qpos:") and variable.count(":") == 1:
            import mujoco

            joint = mujoco.mj_name2id(base.model, mujoco.mjtObj.mjOBJ_JOINT, variable[len("qpos:") :])
            if joint >= 0 and base.model.jnt_limited[joint]:
                low, high = base.model.jnt_range[joint]
                return (float(low), float(high)), None
    finally:
        env.close()
    raise ValueError(f"no default range for {variable!r}: give one (values=... or --range LOW HIGH)")


def sweep_states(task: str | TaskSpec, variable: str, values: Any, *, seed: int = 0) -> tuple[np.ndarray, StateAccess]:
    """States (V, S): the initial state with ``variable`` set to each of ``values``."""
    base, access = initial_state(task, seed)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size < 2 or not np.isfinite(values).all():
        raise ValueError("a sweep needs at least 2 finite values")
    states = np.repeat(base[None], values.size, axis=0)
    states[:, access.index(variable)] = values
    return states, access


def reward_landscape(
    model: RewardModel,
    task: str | TaskSpec,
    variable: str,
    values: Any = None,
    *,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    target_prompts: Any = None,
    baseline_prompts: Any = None,
    goal: Any = _AUTO,
    n_points: int = 41,
    size: tuple[int, int] | None = None,
    seed: int = 0,
    progress: bool = False,
) -> Landscape:
    """The reward of ``model`` along ``variable`` of ``task`` for each alpha (a model that asks questions: for
    each of its questions, or one about each target prompt given).

    ``values`` defaults to ``n_points`` points over the variable's default range
    (:func:`sweep_range`); prompts default to the task's; ``goal`` to the task's
    goal value for the variable (upright pole, the MountainCar flag) or none.
    """
    spec = get_task(task)
    targets = target_prompts if target_prompts is not None else spec.target_prompts
    baselines = baseline_prompts if baseline_prompts is not None else spec.baseline_prompts
    if not targets:
        raise ValueError(f"task {spec.name!r} has no prompts: give target_prompts (and baseline_prompts for alpha > 0)")
    default_goal = None
    if values is None:
        if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 2:
            raise ValueError(f"n_points must be an integer >= 2, got {n_points!r}")
        (low, high), default_goal = sweep_range(spec, variable)
        values = np.linspace(low, high, n_points)
        values[np.abs(values) < 1e-12 * (high - low)] = 0.0  # an exact 0 where the grid crosses it
    elif goal is _AUTO:
        try:
            default_goal = sweep_range(spec, variable)[1]
        except ValueError:
            default_goal = None
    check_evaluable(model)
    questions = asks_questions(model.criterion_kinds)
    criteria = question_criteria(model, target_prompts) if questions else alpha_criteria(targets, baselines, alphas)
    states, access = sweep_states(spec, variable, values, seed=seed)
    frames = render_states(spec, states, size=size, progress=progress)
    rewards = score_frames(model, frames, criteria, progress=progress)
    goal_value = default_goal if goal is _AUTO else (None if goal is None else float(goal))
    if goal_value is not None and not math.isfinite(goal_value):
        raise ValueError(f"goal must be finite, got {goal_value}")
    values = states[:, access.index(variable)]
    return Landscape(
        spec.name,
        model.name,
        variable,
        values,
        () if questions else tuple(c.alpha for c in criteria),
        rewards,
        goal_value,
        frames,
        random_weights=model.random_init,
        questions=tuple(str(c.name) for c in criteria) if questions else (),
    )
