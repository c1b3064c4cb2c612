"""Scoring frames for many reward tasks with one image-encoder pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vlmrm_fast.progress import progress_iter
from vlmrm_fast.reward import BinaryTask, GoalBaselineTask, JudgeRewardModel, QuestionTask, VLMRewardModel
from vlmrm_fast.reward.kinds import normalize_prompts
from vlmrm_fast.reward.window import paper_windows
from vlmrm_fast.reward.window_model import MeanOfFramesModel, VideoWindowModel, WindowRewardModel


def score_frames(
    model: VLMRewardModel | JudgeRewardModel, frames: Any, tasks: Sequence[Any], *, progress: bool = False
) -> np.ndarray:
    """Rewards (N, K) float64 of frames (N, H, W, 3) for K tasks; the frames are encoded once (a judge's
    vision tower runs once per frame for all its questions).

    The model's own tasks are restored afterwards.
    """
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[0] == 0:
        raise ValueError(f"frames must be (N, H, W, 3) with N >= 1, got shape {frames.shape}")
    chunk = model.chunk_size
    batches = progress_iter(range(0, frames.shape[0], chunk), desc="encode", unit="batch", enabled=progress)
    previous, previous_multi = model.tasks, model.multi_task
    if isinstance(model, JudgeRewardModel):
        model.set_tasks(tasks, multi_task=True)
        try:
            rewards = [model(frames[start : start + chunk]) for start in batches]
            return torch.cat(rewards).double().cpu().numpy()
        finally:
            model.set_tasks(previous, multi_task=previous_multi)
    embeddings = torch.cat([model.embed_images(frames[start : start + chunk]) for start in batches])
    model.set_tasks(tasks, multi_task=True)
    try:
        return model.reward_from_embeddings(embeddings).double().cpu().numpy()
    finally:
        model.set_tasks(previous, multi_task=previous_multi)


def is_judge(model: Any) -> bool:
    """Whether ``model`` is a generative VLM judge (its tasks are questions; it has no alpha)."""
    return isinstance(model, JudgeRewardModel)


def judge_evaluation_tasks(model: JudgeRewardModel, target_prompts: Any = None) -> list[QuestionTask]:
    """What a judge is evaluated on: one question about each target prompt given, else its own questions."""
    if target_prompts is None:
        return list(model.tasks)
    return [QuestionTask.about(p) for p in normalize_prompts(target_prompts, "target_prompts")]


def model_name(model: VLMRewardModel | JudgeRewardModel | WindowRewardModel) -> str:
    if isinstance(model, JudgeRewardModel):
        return model.judge.model_id
    return model.name if isinstance(model, WindowRewardModel) else model.clip.model_id


def random_weights(model: VLMRewardModel | JudgeRewardModel) -> bool:
    """Whether the model's weights are a random initialization (its rewards are noise)."""
    weights = model.judge.weights if isinstance(model, JudgeRewardModel) else model.clip.weights
    return weights.startswith("random init")


def score_episode_windows(
    model: Any,
    frames: Any,
    episodes: Sequence[np.ndarray],
    tasks: Sequence[Any],
    *,
    window_size: int,
    window_step: int = 1,
) -> np.ndarray:
    """Rewards (N, K) float64 of frames (N, H, W, 3) for K tasks by a window reward model: the paper
    code's windows of ``window_size`` frames every ``window_step`` frames inside each episode (``episodes``:
    each one's frame indices, in order), each window's reward on its last frame; NaN on the frames that end
    no window. Each frame is encoded once, each window embedded once for every task."""
    windows = [idx[paper_windows(len(idx), window_size, window_step)] for idx in episodes if len(idx) >= window_size]
    if not windows:
        longest = max((len(idx) for idx in episodes), default=0)
        raise ValueError(
            f"window_size {window_size} is longer than every episode (the longest has {longest} frames); give at "
            f"most {longest}"
        )
    stacked = np.concatenate(windows)
    rewards = model.score_windows(frames, stacked, tasks).double().cpu().numpy()
    out = np.full((np.asarray(frames).shape[0], rewards.shape[1]), np.nan)
    out[stacked[:, -1]] = rewards
    return out


def alpha_tasks(target_prompts: Any, baseline_prompts: Any, alphas: Sequence[float]) -> list[GoalBaselineTask]:
    """One goal-baseline task per alpha, with the same prompts."""
    alphas = check_alphas(alphas)
    return [GoalBaselineTask(target_prompts, baseline_prompts, a, name=f"alpha={a:g}") for a in alphas]


def binary_task(target_prompts: Any, negative_prompts: Any, threshold: float = 0.5) -> BinaryTask:
    """The binary task scoring the first target prompt against negatives, returning the probability."""
    goal = normalize_prompts(target_prompts, "target_prompts")[0]
    negatives = tuple(p for p in normalize_prompts(negative_prompts, "negative_prompts") if p != goal)
    return BinaryTask(goal, negatives, threshold=threshold, probability=True)


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


def parameter_count(model: VLMRewardModel | JudgeRewardModel | WindowRewardModel) -> int:
    """Parameters of the whole model (CLIP's image and text towers, a video model's, a judge's vision tower and
    language model)."""
    if isinstance(model, JudgeRewardModel):
        network = model.judge.model
    elif isinstance(model, VideoWindowModel):
        network = model.video
    else:  # CLIP, or the CLIP whose frame embeddings a mean-of-frames window model averages
        network = (model.frames if isinstance(model, MeanOfFramesModel) else model).clip.model
    return int(sum(p.numel() for p in network.parameters()))
