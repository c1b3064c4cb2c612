"""Evaluating reward models: EPIC distance, labelled-state datasets, reward landscapes, precision-recall."""

from vlmrm_fast.evaluation.dataset import StateDataset, read_labels
from vlmrm_fast.evaluation.epic import Coverage, canonicalize, epic_distance, pearson_distance, state_epic_distance
from vlmrm_fast.evaluation.evaluate import Evaluation, ModelEvaluation, evaluate_models
from vlmrm_fast.evaluation.landscape import Landscape, reward_landscape, sweep_range, sweep_states
from vlmrm_fast.evaluation.precision_recall import PrecisionRecall, plot_precision_recall, precision_recall
from vlmrm_fast.evaluation.scoring import score_frames
from vlmrm_fast.evaluation.states import load_policy, render_states, sample_states, state_access

__all__ = [
    "Coverage",
    "Evaluation",
    "Landscape",
    "ModelEvaluation",
    "PrecisionRecall",
    "StateDataset",
    "canonicalize",
    "epic_distance",
    "evaluate_models",
    "load_policy",
    "pearson_distance",
    "plot_precision_recall",
    "precision_recall",
    "read_labels",
    "render_states",
    "reward_landscape",
    "sample_states",
    "score_frames",
    "state_access",
    "state_epic_distance",
    "sweep_range",
    "sweep_states",
]
