"""The reward formulas in plain torch (docs/reward.md).

The fused kernels compute the same; this module prepares their text-side
inputs and is the fallback where no kernel runs (a CUDA tensor with a core
built without CUDA).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
    """``1 - 0.5 |P (x - g)|^2`` for normalized ``x`` (N, D), in O(D) per row."""
    v = x - g
    vv = (v * v).sum(dim=-1)
    vu = v @ u
    return 1.0 - 0.5 * ((1.0 - alpha) ** 2 * vv + (2.0 * alpha - alpha**2) * vu * vu)


def binary_probability(x: torch.Tensor, goal: torch.Tensor, negatives: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale [x.goal, x.n_1, ..])[:, 0]`` for normalized ``x``."""
    logits = scale * (x @ torch.cat([goal[None], negatives]).T)
    return torch.softmax(logits, dim=-1)[:, 0]


def normalize(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x.float(), dim=-1)
