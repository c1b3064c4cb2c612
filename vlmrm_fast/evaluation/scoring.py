"""Scoring frames for many reward criteria with one pass of a model's towers, through the reward-model protocol
(``reward/protocol.py``): what a model is evaluated on follows from the criterion kinds it scores, never from
which family it is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vlmrm_fast.reward.kinds import BinaryCriterion, GoalBaselineCriterion, QuestionCriterion, normalize_prompts
from vlmrm_fast.reward.protocol import RewardModel


def score_frames(model: RewardModel, frames: Any, criteria: Sequence[Any], *, progress: bool = False) -> np.ndarray:
    """Rewards (N, K) float64 of frames (N, H, W, 3) for K criteria, each frame scored on its own; the frames pass
    the model's towers once (a judge's vision tower once per frame for all its questions). The model's own
    criteria stay."""
    return model.score_frames(frames, None, criteria, progress=progress).double().cpu().numpy()


def asks_questions(criterion_kinds: Sequence[str]) -> bool:
    """Whether a model of these criterion kinds is evaluated by questions (a generative VLM judge: no alpha to
    sweep, one question about a target prompt) rather than by goal-baseline criteria."""
    return "goal_baseline" not in criterion_kinds and "question" in criterion_kinds


def check_evaluable(model: RewardModel) -> None:
    """Refuses a model that scores neither goal-baseline criteria nor questions, the two evaluation compares."""
    kinds = model.criterion_kinds
    if "goal_baseline" not in kinds and "question" not in kinds:
        raise ValueError(
            f"{model.name} scores {', '.join(kinds) or 'no criterion kind'}; evaluation compares goal-baseline "
            "criteria (an alpha sweep) or questions"
        )


def question_criteria(model: RewardModel, target_prompts: Any = None) -> list[Any]:
    """What a model that asks questions is evaluated on: one question about each target prompt given, else its
    own questions."""
    if target_prompts is None:
        return list(model.criteria)
    return [QuestionCriterion.about(p) for p in normalize_prompts(target_prompts, "target_prompts")]


def alpha_criteria(target_prompts: Any, baseline_prompts: Any, alphas: Sequence[float]) -> list[GoalBaselineCriterion]:
    """One goal-baseline criterion per alpha, with the same prompts."""
    alphas = check_alphas(alphas)
    return [GoalBaselineCriterion(target_prompts, baseline_prompts, a, name=f"alpha={a:g}") for a in alphas]


def binary_criterion(target_prompts: Any, negative_prompts: Any, threshold: float = 0.5) -> BinaryCriterion:
    """The binary criterion scoring the first target prompt against negatives, returning the probability."""
    goal = normalize_prompts(target_prompts, "target_prompts")[0]
    negatives = tuple(p for p in normalize_prompts(negative_prompts, "negative_prompts") if p != goal)
    return BinaryCriterion(goal, negatives, threshold=threshold, probability=True)


def check_alphas(alphas: Sequence[float]) -> tuple[float, ...]:
    try:
        out = tuple(float(a) for a in alphas)
    except (TypeError, ValueError):
        raise TypeError(f"alphas must be a list of numbers in [0, 1], got {alphas!r}") from None
    if not out:
        raise ValueError("alphas is empty; give at least one, e.g. [0, 0.5, 1]")
    if len(set(out)) != len(out):
        raise ValueError(f"alphas contain duplicates: {list(out)}")
    return out
