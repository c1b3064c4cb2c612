"""What the judges' fast paths rely on in transformers beyond its documented use, checked in one place.

A judge runs transformers' own models, with a few things reached below their usual entry points: the
language model run from cached keys and values with the vision tower's output passed in
(``mm_encoder_outputs``, ``cache``, ``logits_to_keep``, ``DynamicCache(ddp_cache_data=, config=)``, the
cache's ``layers[i].keys`` and ``.values``), Qwen's vision inputs computed once per batch size by
transformers' ``vision_utils`` helpers and handed to the tower under the names those helpers pop
(``position_ids``, ``cu_seqlens``, ``max_seqlen``, ``window_index``, ``cu_window_seqlens``,
``interp_indices``, ``interp_weights``), Qwen's ``get_rope_index``, ``smart_resize`` and
``QuickGELUActivation``, Qwen's vision attention's ``qkv``, ``proj``, ``num_heads``, ``head_dim`` and
``scaling`` (``qwen.PackedVisionAttention`` takes them over), Idefics3's ``SizeDict``.

:func:`contract_problems` lists what of that a transformers install lacks, each in a few words; a judge
refuses to load under one that lacks any (:func:`check_contract`, one line naming them and the release
they are tested with), so that a new transformers fails at the start and in one test
(``python_tests/test_judge.py``), not in the middle of a run or, worse, by a precomputed input silently
recomputed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from vlmrm_fast.models.errors import MissingDependencyError

#: The transformers release the judges' fast paths are tested with.
TESTED_TRANSFORMERS = "5.24"

#: The families whose vision tower takes precomputed inputs from transformers' ``vision_utils``.
QWEN_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
#: What ``reward/judge.py`` passes the language model's forward by name and must not be swallowed by its
#: ``**kwargs`` (``use_cache`` may be: transformers reads it from there).
FORWARD_ARGUMENTS = ("input_ids", "position_ids", "attention_mask", "cache", "mm_encoder_outputs", "logits_to_keep")
#: What ``qwen.PackedVisionAttention`` reads of transformers' Qwen vision attention.
VISION_ATTENTION = ("qkv", "proj", "num_heads", "head_dim", "scaling")


def _binds(function: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """Why ``function`` cannot be called with these arguments (a parameter renamed or gone), or None."""
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError as exc:
        return f"{getattr(function, '__qualname__', function)} no longer takes them ({exc})"
    return None


def _pops(name: str, function: Callable[..., Any], keys: tuple[str, ...], *args: Any) -> str | None:
    """Why ``function`` (transformers' ``name``) does not hand back the values precomputed under ``keys`` (it
    recomputes them, or errs), or None."""
    given = {key: object() for key in keys}
    try:
        out = function(*args, kwargs=dict(given))
    except Exception as exc:  # noqa: BLE001 - any failure is the contract broken; its words go in the line
        return f"{name}(kwargs={{{', '.join(map(repr, keys))}: ...}}) fails: {type(exc).__name__}: {exc}"
    returned = out if isinstance(out, tuple) else (out,)
    kept = len(returned) == len(keys) and all(value is given[key] for key, value in zip(keys, returned))
    return None if kept else f"{name} ignores a precomputed {' and '.join(map(repr, keys))}"


def _vision_utils_problems(model_type: str) -> list[str]:
    """What transformers' ``vision_utils`` lacks of what ``qwen.QwenAdapter.vision_inputs`` precomputes for the
    vision tower of ``model_type`` (Qwen2.5-VL's windows, Qwen3-VL's interpolated position grid besides every
    Qwen's positions and sequence boundaries)."""
    import torch

    try:
        from transformers import vision_utils as vu
        from transformers.utils.generic import get_max_seqlen
    except ImportError as exc:
        return [f"transformers.vision_utils or utils.generic.get_max_seqlen is gone ({exc})"]
    names = ["get_vision_position_ids", "get_vision_attention_seqlens", "get_vision_cu_seqlens"]
    names += ["get_vision_window_index"] if model_type == "qwen2_5_vl" else []
    names += ["get_vision_interpolation_indices_and_weights"] if model_type == "qwen3_vl" else []
    missing = [name for name in names if not callable(getattr(vu, name, None))]
    if missing:
        return [f"transformers.vision_utils lacks {', '.join(missing)}"]
    grid = torch.tensor([[1, 4, 4]])
    config = _AttentionConfig()
    checks = [
        _binds(vu.get_vision_position_ids, grid, 2, kwargs={}),
        _binds(vu.get_vision_attention_seqlens, grid, config, kwargs={}),
        _pops("get_vision_position_ids", vu.get_vision_position_ids, ("position_ids",), grid, 2),
        _pops("get_vision_cu_seqlens", vu.get_vision_cu_seqlens, ("cu_seqlens",), grid),
        _pops("get_max_seqlen", get_max_seqlen, ("max_seqlen",), grid, config),
    ]
    if model_type == "qwen2_5_vl":
        checks += [
            _binds(vu.get_vision_window_index, grid, 2, 8, 2, kwargs={}),
            _binds(get_max_seqlen, grid, config, kwargs={}, kwarg_name="max_window_seqlen"),
            _pops(
                "get_vision_window_index",
                vu.get_vision_window_index,
                ("window_index", "cu_window_seqlens"),
                grid,
                2,
                8,
                2,
            ),
        ]
    if model_type == "qwen3_vl":
        interpolation = vu.get_vision_interpolation_indices_and_weights
        checks += [
            _binds(interpolation, grid, 4, mode="bilinear", align_corners=False, spatial_merge_size=2, kwargs={}),
            _pops(
                "get_vision_interpolation_indices_and_weights",
                interpolation,
                ("interp_indices", "interp_weights"),
                grid,
                4,
            ),
        ]
    return [problem for problem in checks if problem]


class _AttentionConfig:
    """A config as the helpers read it: SDPA attention (no flash attention asked for)."""

    _attn_implementation = "sdpa"

    def get_text_config(self) -> _AttentionConfig:
        return self


def _family_problems(model_type: str) -> list[str]:
    """What the judge reaches in the model class of ``model_type`` that it lacks."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    name = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type)
    model_class = getattr(transformers, name, None) if name else None
    if name is None or model_class is None:
        return [f"transformers has no image-text-to-text model for {model_type!r}"]
    parameters = inspect.signature(model_class.forward).parameters
    missing = [argument for argument in FORWARD_ARGUMENTS if argument not in parameters]
    problems = [f"{name}.forward takes no {', '.join(missing)}"] if missing else []
    if model_type in QWEN_FAMILIES:
        inner = getattr(transformers, name.replace("ForConditionalGeneration", "Model"), None)
        rope = getattr(inner, "get_rope_index", None)
        if rope is None:
            problems.append(f"{name}'s model has no get_rope_index")
        else:
            problems.append(_binds(rope, None, input_ids=None, mm_token_type_ids=None, image_grid_thw=None) or "")
    return [problem for problem in problems if problem]


def _common_problems() -> list[str]:
    import torch

    problems = []
    try:
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=[(torch.zeros(1, 1, 2, 4), torch.ones(1, 1, 2, 4))], config=None)
        layer: Any = cache.layers[0]  # (the judge reads a full-attention layer's keys and values)
        if not (torch.equal(layer.keys, torch.zeros(1, 1, 2, 4)) and torch.equal(layer.values, torch.ones(1, 1, 2, 4))):
            problems.append("DynamicCache(ddp_cache_data=...) no longer holds the keys and values given")
    except Exception as exc:  # noqa: BLE001 - any failure is the contract broken; its words go in the line
        problems.append(f"DynamicCache(ddp_cache_data=, config=) and its layers' keys and values: {exc}")
    for module, attribute in (
        ("transformers.activations", "QuickGELUActivation"),
        ("transformers.models.qwen2_vl.image_processing_qwen2_vl", "smart_resize"),
        ("transformers.image_utils", "SizeDict"),
    ):
        try:
            getattr(__import__(module, fromlist=[attribute]), attribute)
        except (ImportError, AttributeError):
            problems.append(f"{module}.{attribute} is gone")
    return problems


@functools.cache
def contract_problems(model_type: str | None = None) -> tuple[str, ...]:
    """What the installed transformers lacks of what the judges rely on (see the module docstring): for the
    family of ``model_type``, or for every family (None). Empty: all there."""
    from vlmrm_fast.models.judge.families import JUDGE_FAMILIES

    types = tuple(JUDGE_FAMILIES) if model_type is None else (model_type,)
    problems = _common_problems()
    for t in types:
        problems += [p for p in _vision_utils_problems(t) if p not in problems] if t in QWEN_FAMILIES else []
        problems += _family_problems(t)
    return tuple(problems)


def vision_attention_problems(attention: Any) -> list[str]:
    """What a loaded Qwen vision block's attention lacks of what ``qwen.PackedVisionAttention`` takes over."""
    missing = [name for name in VISION_ATTENTION if not hasattr(attention, name)]
    return [f"{type(attention).__name__} has no {', '.join(missing)}"] if missing else []


def check_contract(model_id: str, model_type: str, problems: tuple[str, ...] | list[str] | None = None) -> None:
    """Refuses, in one line, a judge under a transformers that lacks what its fast paths rely on, naming each
    thing and the release they are tested with."""
    import transformers

    found = contract_problems(model_type) if problems is None else tuple(problems)
    if found:
        raise MissingDependencyError(
            f"{model_id}: transformers {transformers.__version__} changed what the judge's fast paths rely on "
            f"({'; '.join(found)}); they are tested with transformers {TESTED_TRANSFORMERS}: "
            f"pip install 'transformers=={TESTED_TRANSFORMERS}.*'"
        )
