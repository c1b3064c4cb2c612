"""vlmrm-fast: vision-language models as zero-shot reward models for RL, fast.

import vlmrm_fast
rm = vlmrm_fast.load_reward_model("ViT-L-14/laion2b_s32b_b82k",
                                  target_prompts="a humanoid robot kneeling",
                                  baseline_prompts="a humanoid robot", alpha=0.5)
rewards = rm(frames)   # uint8 (N, H, W, 3) -> (N,)
"""

import os as _os
from typing import TYPE_CHECKING, Any

# Headless rendering everywhere (gymnasium's MuJoCo renderer too) unless the user chose a backend.
_os.environ.setdefault("MUJOCO_GL", "egl")
if _os.environ["MUJOCO_GL"] == "egl":
    _os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
# Without a display, pygame (gymnasium's classic-control rgb_array rendering) probes for one and prints
# "XDG_RUNTIME_DIR is invalid"; its dummy video driver draws the same frames silently.
if not _os.environ.get("DISPLAY") and not _os.environ.get("WAYLAND_DISPLAY"):
    _os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def _source_tree_without_core() -> str | None:
    """One line naming the fix when this package is a source tree whose native core was never built.

    A clone's ``vlmrm_fast/_core/`` holds only the core's ``.pyi`` stubs: imported from the clone's root
    (``python3 -m pytest`` there puts it first on ``sys.path``), that folder would pass for the core
    until its first submodule is looked up. Found without loading anything, so ``vlmrm-fast --help``
    stays fast.
    """
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec(f"{__name__}._core")
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin and origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        return None
    return (
        f"vlmrm_fast: {_os.path.dirname(__file__)} is a source tree without its compiled native core "
        "(vlmrm_fast/_core/ holds only .pyi stubs): install it with `pip install -e .` (the developer "
        "install), or, with the package installed by `pip install .`, run Python outside the clone or "
        "with `python3 -P` so the installed package is imported"
    )


_missing_core = _source_tree_without_core()
if _missing_core is not None:
    raise ImportError(_missing_core)

__version__ = "0.1.0"

# Everything is loaded on first use: `import vlmrm_fast` (and `vlmrm-fast --help`) imports neither the
# native core, torch nor Stable-Baselines3. vlmrm_fast.runtime.native loads the core (libmujoco first).
if TYPE_CHECKING:  # the public names, one import each: the type checker reads them, and so does _public()
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec
    from vlmrm_fast.physics.batch import BatchSimulator
    from vlmrm_fast.rendering.egl import EGLRenderer
    from vlmrm_fast.rendering.warp import WarpRenderer  # imports MuJoCo Warp only when one is made
    from vlmrm_fast.reward import (
        TINY_MODEL,
        BinaryCriterion,
        GoalBaselineCriterion,
        JudgeRewardModel,
        PromptTruncatedWarning,
        QuestionCriterion,
        RandomWeightsWarning,
        RewardModel,
        RewardModelSpec,
        VLMRewardModel,
        WeightsUnavailableError,
        load_reward_model,
    )
    from vlmrm_fast.runtime.device import build_info
    from vlmrm_fast.stack.gym_vector import VLMRewardVectorEnv, VLMRewardVectorWrapper
    from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv
    from vlmrm_fast.stack.wrappers import RecordFrame, VLMRewardVecEnvWrapper

_PUBLIC: dict[str, str] = {}


def _public() -> dict[str, str]:
    """Each public name -> the module that defines it, read once from the imports above (their one list)."""
    if not _PUBLIC:
        import ast

        with open(__file__, encoding="utf-8") as source:
            tree = ast.parse(source.read())
        (block,) = [
            node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        ]
        for node in block.body:
            assert isinstance(node, ast.ImportFrom) and node.module is not None
            _PUBLIC.update((alias.name, node.module) for alias in node.names)
    return _PUBLIC


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("_core", "_cuda_emulation"):  # `from vlmrm_fast import _core`: the native modules, libmujoco first
        importlib.import_module("vlmrm_fast.runtime.native")
        return importlib.import_module(f"{__name__}.{name}")
    if name == "__all__":
        return sorted(_public())
    if name in _public():
        value = getattr(importlib.import_module(_public()[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vlmrm_fast' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_public()))
