"""Scoring reward models against a labelled-state dataset: EPIC per (model, alpha), precision-recall.

Each model encodes the dataset's frames once; all alphas (and the binary task)
are scored from those embeddings. The state-only EPIC distance to the labels is
the Pearson distance over the labelled states (:func:`state_epic_distance`).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from vlmrm_fast.envs import get_task
from vlmrm_fast.evaluation.dataset import StateDataset
from vlmrm_fast.evaluation.epic import state_epic_distance
from vlmrm_fast.evaluation.plotting import new_figure, palette, save_figure
from vlmrm_fast.evaluation.precision_recall import PrecisionRecall, plot_precision_recall, precision_recall
from vlmrm_fast.evaluation.scoring import (
    alpha_criteria,
    asks_questions,
    binary_criterion,
    check_alphas,
    check_evaluable,
)
from vlmrm_fast.progress import progress_iter
from vlmrm_fast.reward.families import family_of, load_reward_model
from vlmrm_fast.reward.kinds import QuestionCriterion, normalize_prompts
from vlmrm_fast.reward.protocol import RewardModel


@dataclasses.dataclass
class ModelEvaluation:
    """One model's scores on a dataset."""

    model: str
    parameters: int
    alphas: tuple[float, ...]
    epic: np.ndarray  # (K,) state-only EPIC distance to the labels, per alpha
    rewards: np.ndarray  # (N, K) rewards of every state, per alpha
    binary: PrecisionRecall | None = None  # the binary reward against boolean labels
    threshold: float = 0.5


@dataclasses.dataclass
class Evaluation:
    """The scores of several models on one dataset."""

    task: str
    n_labelled: int
    models: list[ModelEvaluation]

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for m in self.models:
            for alpha, d in zip(m.alphas, m.epic):
                row = {"model": m.model, "parameters": m.parameters, "alpha": alpha, "epic_distance": float(d)}
                if m.binary is not None:
                    row["binary_average_precision"] = m.binary.average_precision
                out.append(row)
        return out

    def save_csv(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = self.rows()
        fields = list(dict.fromkeys(k for row in rows for k in row))
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields + ["n_labelled"])
            writer.writeheader()
            for row in rows:
                writer.writerow({**{k: _csv_value(v) for k, v in row.items()}, "n_labelled": self.n_labelled})
        return path

    def table(self) -> Any:
        """A rich Table: one row per model, one column per alpha (EPIC distance; lower is better)."""
        from rich.table import Table

        alphas = list(dict.fromkeys(a for m in self.models for a in m.alphas))
        table = Table(
            title=f"EPIC distance to human labels: {self.task} ({self.n_labelled} labelled states; lower is better)"
        )
        table.add_column("model", overflow="fold")
        table.add_column("params", justify="right", no_wrap=True)
        for a in alphas:
            table.add_column(f"α={a:g}", justify="right", no_wrap=True)
        has_binary = any(m.binary is not None for m in self.models)
        if has_binary:
            table.add_column("binary AP", justify="right")
        for m in self.models:
            by_alpha = dict(zip(m.alphas, m.epic))
            best = min(m.epic)
            cells = []
            for a in alphas:
                text = f"{by_alpha[a]:.4f}" if a in by_alpha else ""
                cells.append(f"[bold]{text}[/bold]" if a in by_alpha and by_alpha[a] == best else text)
            if has_binary:
                cells.append(f"{m.binary.average_precision:.4f}" if m.binary is not None else "")
            table.add_row(m.model, _human_count(m.parameters), *cells)
        return table

    def plot(self, path: str | pathlib.Path) -> pathlib.Path:
        """Left: EPIC against model size, one line per alpha (the paper's model-size figure). Right: against alpha."""
        fig, (by_size, by_alpha) = new_figure((11.0, 4.6), 1, 2)
        models = sorted(self.models, key=lambda m: m.parameters)
        alphas = list(dict.fromkeys(a for m in models for a in m.alphas))
        sizes = [m.parameters for m in models]
        for alpha, color in zip(alphas, palette(len(alphas))):
            points = [(m.parameters, dict(zip(m.alphas, m.epic))[alpha]) for m in models if alpha in m.alphas]
            xs, ys = zip(*points)
            by_size.plot(xs, ys, "o-", color=color, lw=2, ms=6, label=f"α = {alpha:g}")
        by_size.set_xscale("log")
        by_size.set_xticks(sizes)
        by_size.set_xticklabels([f"{m.model}\n{_human_count(m.parameters)}" for m in models], fontsize=7, rotation=0)
        by_size.minorticks_off()
        if len(set(sizes)) == 1:
            by_size.set_xlim(sizes[0] / 2, sizes[0] * 2)
        by_size.set_xlabel("model (parameters)")
        by_size.set_ylabel("EPIC distance to labels (lower is better)")
        by_size.set_title("EPIC distance vs. model size", fontsize=10)
        by_size.legend(fontsize=8, framealpha=0.9)
        for m, color in zip(models, palette(len(models), "tab10")):
            by_alpha.plot(m.alphas, m.epic, "o-", color=color, lw=2, ms=5, label=m.model)
        by_alpha.set_xlabel("α (goal-baseline projection strength)")
        by_alpha.set_ylabel("EPIC distance to labels")
        by_alpha.set_title("EPIC distance vs. α", fontsize=10)
        by_alpha.legend(fontsize=8, framealpha=0.9)
        fig.suptitle(f"{self.task}: reward models against {self.n_labelled} labelled states", fontsize=11)
        return save_figure(fig, path)

    def plot_precision_recall(self, path: str | pathlib.Path) -> pathlib.Path | None:
        curves = {m.model: m.binary for m in self.models if m.binary is not None}
        if not curves:
            return None
        threshold = next(m.threshold for m in self.models if m.binary is not None)
        return plot_precision_recall(curves, path, threshold=threshold, title=f"{self.task}: binary reward vs. labels")


def evaluate_models(
    dataset: StateDataset,
    models: Sequence[str | RewardModel],
    alphas: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    *,
    target_prompts: Any = None,
    baseline_prompts: Any = None,
    negative_prompts: Any = None,
    threshold: float = 0.5,
    device: str = "auto",
    batch_size: int | None = None,
    progress: bool = False,
    window_size: int | None = None,
    window_step: int = 1,
) -> Evaluation:
    """EPIC distance of each model's reward to the labels for each alpha, and the binary reward's precision-recall.

    ``models`` are names for :func:`load_reward_model` (loaded one at a time) or
    loaded models (any :class:`~vlmrm_fast.reward.protocol.RewardModel`). Prompts default to the dataset
    task's. Precision-recall is computed when the labels are boolean: the first target prompt against
    ``negative_prompts`` (default: the baseline prompts). A model that asks questions rather than scoring
    goal-baseline criteria (a generative VLM judge) has no alpha: it is scored once, on P(yes) / (P(yes) + P(no))
    for the question about the first target prompt (its row's alpha 0), which is also the probability its
    precision-recall reads.

    A model whose reward reads earlier frames of its episode (``needs.episodes``) scores a dataset of whole
    episodes (``StateDataset.sample_episodes``); a window model (``needs.frames`` > 1) as the paper's code
    did: windows of ``window_size`` frames
    (default its own) every ``window_step`` frames inside each episode, each window's reward on its last frame;
    only the labelled states that end a window count. A name is loaded with the window its family scores for
    ``window_size`` (``RewardFamily.window_for``): a video model's (default the model's frame count), a frame
    model's mean of the window's frame embeddings when ``window_size`` is given.
    """
    if not models:
        raise ValueError("models is empty; give at least one, e.g. ['ViT-L-14/laion2b_s32b_b82k']")
    alphas = check_alphas(alphas)
    n_labelled = int(dataset.labelled.sum())
    if n_labelled < 2:
        raise ValueError(
            f"the dataset has {n_labelled} labelled states; label at least 2 (import a CSV with `vlmrm-fast dataset label`)"
        )
    spec = get_task(dataset.task)
    targets = target_prompts if target_prompts is not None else spec.target_prompts
    baselines = baseline_prompts if baseline_prompts is not None else spec.baseline_prompts
    if not targets:
        raise ValueError(f"task {spec.name!r} has no prompts: give target_prompts")
    criteria: list[Any] = alpha_criteria(targets, baselines, alphas)
    negatives = negative_prompts if negative_prompts is not None else baselines
    labels = dataset.labels
    boolean = np.isin(labels[dataset.labelled], (0.0, 1.0)).all() and 0 < np.nansum(labels) < n_labelled
    if boolean and negatives:
        criteria.append(binary_criterion(targets, negatives, threshold))
    first_target = normalize_prompts(targets, "target_prompts")[:1]
    results = []
    for entry in progress_iter(models, desc="models", unit="model", enabled=progress and len(models) >= 2):
        model = _load(entry, targets, first_target, device, batch_size, spec.resize_mode, window_size)
        try:
            check_evaluable(model)
            questions = asks_questions(model.criterion_kinds)
            # One column, P(yes) about the first target prompt, its own probability too; else the alphas (+ binary).
            scored = [QuestionCriterion.about(first_target[0])] if questions else criteria
            columns = (0.0,) if questions else alphas
            windowed = model.needs.frames > 1
            rewards = (
                model.score_frames(
                    dataset.frames,
                    dataset.episode_ranges() if model.needs.episodes else None,
                    scored,
                    window_size=window_size,
                    window_step=window_step,
                    progress=progress,
                )
                .double()
                .cpu()
                .numpy()
            )
            scored_labels = np.where(np.isnan(rewards[:, 0]), np.nan, labels)  # the states a reward lands on
            size = window_size or model.needs.frames
            if int((~np.isnan(scored_labels)).sum()) < 2:
                raise ValueError(
                    f"fewer than 2 labelled states end a window of {size} frames every {window_step}: label the "
                    "states that end windows, or give a smaller window_size or window_step"
                    if windowed
                    else f"fewer than 2 labelled states get a reward of {model.name}: label more states"
                )
            if questions:  # the question's probability is its binary reward
                binary_column = 0 if boolean else None
            else:  # the binary task, appended after the alphas for boolean labels
                binary_column = len(alphas) if len(scored) > len(alphas) else None
            binary = None if binary_column is None else precision_recall(rewards[:, binary_column], scored_labels)
            results.append(
                ModelEvaluation(
                    f"{model.name} (window {size})" if windowed else model.name,
                    model.parameter_count(),
                    columns,
                    state_epic_distance(rewards[:, : len(columns)], scored_labels),
                    rewards[:, : len(columns)],
                    binary,
                    threshold,
                )
            )
        finally:
            if isinstance(entry, str):
                model.close()
    return Evaluation(spec.name, n_labelled, results)


def _load(
    entry: str | RewardModel,
    targets: Any,
    first_target: tuple[str, ...],
    device: str,
    batch_size: int | None,
    resize_mode: str | None,
    window_size: int | None,
) -> RewardModel:
    """``entry`` itself when loaded; else the model it names, with the window its family scores for
    ``window_size``, asked about the first target prompt where it asks questions."""
    if not isinstance(entry, str):
        return entry
    family = family_of(entry)
    return load_reward_model(
        entry,
        target_prompts=first_target if asks_questions(family.criterion_kinds) else targets,
        device=device,
        batch_size=batch_size,
        resize_mode=resize_mode if family.takes_task_resize_mode else None,  # as the stack gives it the task's
        window=family.window_for(entry, window_size),
    )


def _human_count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _csv_value(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) and not math.isnan(v) else v
