"""vlmrm-fast: vision-language models as zero-shot reward models for RL, fast.

import vlmrm_fast
rm = vlmrm_fast.load_reward_model("ViT-L-14/laion2b_s32b_b82k",
                                  target_prompts="a humanoid robot kneeling",
                                  baseline_prompts="a humanoid robot", alpha=0.5)
rewards = rm(frames)   # uint8 (N, H, W, 3) -> (N,)
"""

import os as _os

# Headless rendering everywhere (gymnasium's MuJoCo renderer too) unless the user chose a backend.
_os.environ.setdefault("MUJOCO_GL", "egl")
if _os.environ["MUJOCO_GL"] == "egl":
    _os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
# Without a display, pygame (gymnasium's classic-control rgb_array rendering) probes for one and prints
# "XDG_RUNTIME_DIR is invalid"; its dummy video driver draws the same frames silently.
if not _os.environ.get("DISPLAY") and not _os.environ.get("WAYLAND_DISPLAY"):
    _os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import mujoco as _mujoco  # noqa: E402,F401  (loads libmujoco before the native core links to it)

try:
    from vlmrm_fast import _core  # noqa: E402,F401  (first: a broken install says how to fix it)
except ImportError as _exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"vlmrm_fast's native core could not be imported ({_exc}). Reinstall with `pip install .` "
        "(or tools/build_inplace.sh in a checkout)."
    ) from _exc

from vlmrm_fast.device import build_info
from vlmrm_fast.preprocess import FramePreprocessor, PreprocessSpec
from vlmrm_fast.rendering import BatchRenderer
from vlmrm_fast.reward import (
    TINY_MODEL,
    BinaryTask,
    GoalBaselineTask,
    PromptTruncatedWarning,
    RandomWeightsWarning,
    RewardModel,
    RewardModelSpec,
    VLMRewardModel,
    WeightsUnavailableError,
    load_reward_model,
)
from vlmrm_fast.sim import BatchSimulator
from vlmrm_fast.warp_rendering import WarpBatchRenderer  # imports MuJoCo Warp only when one is made

__version__ = "0.1.0"


# The RL-facing names pull in Stable-Baselines3: loaded on first use.
_LAZY = {
    "EnvSpec": "vlmrm_fast.envs.spec",
    "FastVLMRewardVecEnv": "vlmrm_fast.vec_env",
    "RecordFrame": "vlmrm_fast.wrappers",
    "VLMRewardVecEnvWrapper": "vlmrm_fast.wrappers",
    "VLMRewardVectorEnv": "vlmrm_fast.gym_vector",
    "VLMRewardVectorWrapper": "vlmrm_fast.gym_vector",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vlmrm_fast' has no attribute {name!r}")


__all__ = [
    "TINY_MODEL",
    "BatchRenderer",
    "BatchSimulator",
    "BinaryTask",
    "EnvSpec",
    "FastVLMRewardVecEnv",
    "FramePreprocessor",
    "GoalBaselineTask",
    "PreprocessSpec",
    "PromptTruncatedWarning",
    "RandomWeightsWarning",
    "RecordFrame",
    "RewardModel",
    "RewardModelSpec",
    "VLMRewardModel",
    "VLMRewardVecEnvWrapper",
    "VLMRewardVectorEnv",
    "VLMRewardVectorWrapper",
    "WarpBatchRenderer",
    "WeightsUnavailableError",
    "build_info",
    "load_reward_model",
]
