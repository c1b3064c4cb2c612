"""The reward formulas, each written once in plain torch: the reference the fused kernels are tested
against, and the path wherever no kernel runs (docs/reward.md gives the math).

A formula is made from its criterion (``reward/kinds.py``) and the text side (normalized prompt
embeddings, the model's logit scale): it keeps the text-side tensors it needs and computes the
rewards of normalized image embeddings with :meth:`Formula.reward`. A formula the fused kernel
knows also gives its row of the kernel's criterion table (:meth:`Formula.kernel_entry`); the kernel (C++
twin on the CPU, CUDA on a GPU) then computes the same in one pass over the embeddings for every
criterion. Each kind of criterion names its formula in its row of ``reward.kinds.CRITERION_KINDS``: adding a reward is a
criterion dataclass, a formula and that row; a kernel entry only where speed asks for one.

A generative judge's question criteria read their reward from the answer's logits instead of an
embedding: :func:`answer_reward` is that formula (docs/judge.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from vlmrm_fast.lazy import named
from vlmrm_fast.reward.kinds import CRITERION_KINDS, BinaryCriterion, GoalBaselineCriterion, kind_of
from vlmrm_fast.runtime import kernels

TextEmbedding = Callable[[str], torch.Tensor]  # prompt -> normalized (D,) float32 embedding


def normalize(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length, in float32."""
    return F.normalize(x.float(), dim=-1)


def goal_and_direction(target: torch.Tensor, baseline: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean target embedding ``g`` (not renormalized) and unit ``u = (g - b) / |g - b|``.

    ``target`` (T, D) and ``baseline`` (B, D) are normalized prompt embeddings.
    Without a baseline ``u`` is zero (only alpha = 0 is allowed then).
    """
    g = target.mean(dim=0)
    if baseline is None or baseline.shape[0] == 0:
        return g, torch.zeros_like(g)
    d = g - baseline.mean(dim=0)
    norm = d.norm()
    if norm <= 1e-6:
        raise ValueError(
            "the baseline and target prompts embed to the same point; the goal-baseline direction is undefined"
        )
    return g, d / norm


def goal_baseline_reward(x: torch.Tensor, g: torch.Tensor, u: torch.Tensor, alpha: float) -> torch.Tensor:
    """``1 - 0.5 |P (x - g)|^2`` with ``P = alpha u u^T + (1 - alpha) I``, for normalized ``x`` (N, D), in
    O(D) per row: ``1 - 0.5 ((1 - alpha)^2 |v|^2 + (2 alpha - alpha^2) (v.u)^2)``, ``v = x - g``."""
    v = x - g
    vv = (v * v).sum(dim=-1)
    vu = v @ u
    return 1.0 - 0.5 * ((1.0 - alpha) ** 2 * vv + (2.0 * alpha - alpha**2) * vu * vu)


def binary_probability(x: torch.Tensor, goal: torch.Tensor, negatives: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale [x.goal, x.n_1, ..])[:, 0]`` for normalized ``x``."""
    logits = scale * (x @ torch.cat([goal[None], negatives]).T)
    return torch.softmax(logits, dim=-1)[:, 0]


def answer_reward(logits: torch.Tensor, yes: int, no: int, score: str) -> torch.Tensor:
    """A question criterion's reward from the logits (N, V) of the answer's first token, in float32:
    ``yes_vs_no`` P(yes) / (P(yes) + P(no)), ``log_p_yes`` log P(yes), ``log_odds`` l_yes - l_no."""
    logits = logits.float()
    if score == "yes_vs_no":  # the vocabulary's normalizer cancels: exp(l_yes) / (exp(l_yes) + exp(l_no))
        return torch.sigmoid(logits[:, yes] - logits[:, no])
    if score == "log_p_yes":
        return torch.log_softmax(logits, dim=-1)[:, yes]
    if score == "log_odds":
        return logits[:, yes] - logits[:, no]
    raise ValueError(f"score {score!r} is unknown")


class Formula(Protocol):
    """A criterion's reward: its text side, made once, and its formula over image embeddings."""

    def reward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalized image embeddings (N, D) float32 -> rewards (N,) float32."""
        ...

    def kernel_entry(self, first_row: int) -> tuple[Any, list[torch.Tensor]] | None:
        """(the fused kernel's criterion entry, the text rows it reads from ``first_row`` on), or None when
        the kernel does not know this formula."""
        ...


class GoalBaseline:
    """Rocamonde et al. (2024): the goal-baseline projection of strength alpha (docs/reward.md)."""

    def __init__(self, criterion: GoalBaselineCriterion, text_embedding: TextEmbedding, logit_scale: float):
        target = torch.stack([text_embedding(p) for p in criterion.target_prompts])
        baseline = (
            torch.stack([text_embedding(p) for p in criterion.baseline_prompts]) if criterion.baseline_prompts else None
        )
        self.g, self.u = goal_and_direction(target, baseline)
        self.alpha = criterion.alpha

    def reward(self, x: torch.Tensor) -> torch.Tensor:
        return goal_baseline_reward(x, self.g.to(x.device), self.u.to(x.device), self.alpha)

    def kernel_entry(self, first_row: int) -> tuple[Any, list[torch.Tensor]]:
        entry = kernels.RewardTask()
        entry.kind = kernels.RewardKind.goal_baseline
        entry.first_row, entry.num_rows = first_row, 2
        entry.alpha = self.alpha
        entry.g_norm2 = float(self.g @ self.g)
        entry.g_dot_u = float(self.g @ self.u)
        return entry, [self.g, self.u]


class Binary:
    """Baumli et al. (2023): the goal prompt's softmax probability against negative prompts, thresholded
    (or the probability itself)."""

    def __init__(self, criterion: BinaryCriterion, text_embedding: TextEmbedding, logit_scale: float):
        self.embeddings = [text_embedding(p) for p in criterion.prompts]  # the goal first
        self.scale = logit_scale if criterion.temperature is None else 1.0 / criterion.temperature
        self.threshold = criterion.threshold
        self.probability = criterion.probability

    def reward(self, x: torch.Tensor) -> torch.Tensor:
        goal, negatives = self.embeddings[0].to(x.device), torch.stack(self.embeddings[1:]).to(x.device)
        p = binary_probability(x, goal, negatives, self.scale)
        return p if self.probability else (p > self.threshold).float()

    def kernel_entry(self, first_row: int) -> tuple[Any, list[torch.Tensor]]:
        entry = kernels.RewardTask()
        entry.kind = kernels.RewardKind.binary
        entry.first_row, entry.num_rows = first_row, len(self.embeddings)
        entry.scale = self.scale
        entry.threshold = self.threshold
        entry.probability = self.probability
        return entry, list(self.embeddings)


def formula_of(criterion: Any, text_embedding: TextEmbedding, logit_scale: float) -> Formula:
    """The formula of ``criterion`` (its kind's, ``reward.kinds.CRITERION_KINDS``) with its text side computed."""
    kind = CRITERION_KINDS.get(kind_of(criterion) or "")
    if kind is None or kind.formula is None:
        known = ", ".join(k.criterion.__name__ for k in CRITERION_KINDS.values() if k.formula is not None)
        raise TypeError(f"no reward formula from image embeddings for {type(criterion).__name__}; known: {known}")
    return named(kind.formula)(criterion, text_embedding, logit_scale)
