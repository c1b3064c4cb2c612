"""Reward models: CLIP's and generative VLM judges', prompts and criteria, model loading, the reward formulas."""

from vlmrm_fast.models import RandomWeightsWarning, WeightsUnavailableError
from vlmrm_fast.models.clip import TINY_MODEL, PromptTruncatedWarning, load_clip, register_builtin_configs
from vlmrm_fast.reward.families import load_reward_model
from vlmrm_fast.reward.judge import JudgeRewardModel
from vlmrm_fast.reward.kinds import BinaryCriterion, GoalBaselineCriterion, QuestionCriterion
from vlmrm_fast.reward.model import VLMRewardModel
from vlmrm_fast.reward.protocol import RewardModel
from vlmrm_fast.reward.spec import RewardModelSpec

register_builtin_configs()

__all__ = [
    "TINY_MODEL",
    "BinaryCriterion",
    "GoalBaselineCriterion",
    "JudgeRewardModel",
    "PromptTruncatedWarning",
    "QuestionCriterion",
    "RandomWeightsWarning",
    "RewardModel",
    "RewardModelSpec",
    "VLMRewardModel",
    "WeightsUnavailableError",
    "load_clip",
    "load_reward_model",
]
