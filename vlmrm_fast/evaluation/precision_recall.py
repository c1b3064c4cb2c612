"""Precision-recall of a binary reward (Baumli et al., 2023) against boolean labels.

The score is the binary task's goal probability ``p``; the reward is
``1[p > threshold]``. The curve sweeps the threshold over every distinct score;
its area is the average precision ``AP = sum_k (R_k - R_{k-1}) P_k`` (the step
interpolation, which never over-states the area as the trapezoid rule can).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from vlmrm_fast.evaluation.epic import _to_numpy
from vlmrm_fast.evaluation.plotting import new_figure, palette, save_figure


@dataclasses.dataclass(frozen=True)
class PrecisionRecall:
    """A precision-recall curve, from the highest threshold down, and its area."""

    precision: np.ndarray  # (T,) at each threshold
    recall: np.ndarray  # (T,)
    thresholds: np.ndarray  # (T,) distinct scores, descending: predicted positive when score >= threshold
    average_precision: float
    positive_rate: float  # fraction of positive labels: the precision of a random guess

    @property
    def auc(self) -> float:
        """The area under the curve (average precision)."""
        return self.average_precision

    def at_threshold(self, threshold: float) -> dict[str, float]:
        """Precision, recall and F1 of the binary reward ``1[score > threshold]`` (NaN where undefined)."""
        # The curve's thresholds are >=; the binary reward is a strict >: take the first one above.
        above = np.nonzero(self.thresholds > threshold)[0]
        if above.size == 0:
            return {"threshold": float(threshold), "precision": math.nan, "recall": 0.0, "f1": math.nan}
        k = above[-1]
        p, r = float(self.precision[k]), float(self.recall[k])
        f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
        return {"threshold": float(threshold), "precision": p, "recall": r, "f1": f1}


def precision_recall(scores: Any, labels: Any) -> PrecisionRecall:
    """The precision-recall curve of ``scores`` (N,) against labels (N,) in {0, 1} (NaN = unlabelled, left out)."""
    scores = np.asarray(_to_numpy(scores), dtype=np.float64).reshape(-1)
    labels = np.asarray(_to_numpy(labels), dtype=np.float64).reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"scores and labels must have the same length, got {scores.shape[0]} and {labels.shape[0]}")
    keep = ~np.isnan(labels)
    scores, labels = scores[keep], labels[keep]
    if not np.isin(labels, (0.0, 1.0)).all():
        raise ValueError("precision-recall needs boolean labels (0/1, true/false); these labels hold other values")
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN or infinity")
    positives = labels.sum()
    if positives == 0:
        raise ValueError("no positive label: precision-recall is undefined")
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    last_of_value = np.r_[np.nonzero(np.diff(scores))[0], scores.size - 1]  # the last index of each distinct score
    tp = np.cumsum(labels)[last_of_value]
    predicted = last_of_value + 1.0
    precision = tp / predicted
    recall = tp / positives
    ap = float(np.sum(np.diff(np.r_[0.0, recall]) * precision))
    return PrecisionRecall(precision, recall, scores[last_of_value], ap, float(positives / labels.size))


def plot_precision_recall(
    curves: Mapping[str, PrecisionRecall],
    path: str | pathlib.Path,
    *,
    threshold: float | None = 0.5,
    title: str = "Binary reward: precision-recall against labels",
) -> pathlib.Path:
    """One curve per name, the binary reward's operating point at ``threshold`` marked; writes a PNG."""
    if not curves:
        raise ValueError("no curve to plot")
    fig, ax = new_figure((6.4, 5.2))
    colors = palette(len(curves), "tab10")
    for (name, curve), color in zip(curves.items(), colors):
        # The points where recall grows, as steps: the area under the drawn line is the AP.
        grows = np.diff(np.r_[0.0, curve.recall]) > 0
        recall = np.r_[0.0, curve.recall[grows]]
        precision = np.r_[curve.precision[grows][0], curve.precision[grows]]
        ax.step(recall, precision, where="pre", color=color, lw=2, label=f"{name} (AP {curve.average_precision:.3f})")
        if threshold is not None:
            op = curve.at_threshold(threshold)
            if not math.isnan(op["precision"]):
                ax.plot(op["recall"], op["precision"], "o", color=color, ms=7, mec="black", zorder=5)
    rate = next(iter(curves.values())).positive_rate
    ax.axhline(rate, color="grey", ls="--", lw=1, label=f"chance ({rate:.2f})")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    suffix = f"; dots: reward 1[p > {threshold:g}]" if threshold is not None else ""
    ax.set_title(title + suffix, fontsize=10)
    ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
    return save_figure(fig, path)
