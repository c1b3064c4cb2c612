"""The judge families: which transformers model types this package scores frames with, how each one's
frames become pixel input (its adapter), and the refusal of a model that is no judge.

A family is a row of :data:`JUDGE_FAMILIES`, keyed by the ``model_type`` of its ``config.json``. What
differs between families is small and lives in the adapters (``qwen.py``, ``idefics.py``): the image
processor's steps and the vision tower's arguments, the positions of the language model (Qwen's
multimodal RoPE), and whether the answer follows the prompt with a space.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
from collections.abc import Callable
from typing import Any

from vlmrm_fast.models.errors import MissingDependencyError

#: The transformers release the adapters are written and tested against.
MIN_TRANSFORMERS = "5.24"
INSTALL = "pip install 'vlmrm-fast[judge]' (from a checkout: pip install '.[judge]')"


@dataclasses.dataclass(frozen=True)
class JudgeFamily:
    """``adapter(model, processor, image_size)`` -> the family's :class:`~vlmrm_fast.models.judge.adapter.Adapter`;
    ``answer_lead``: what the template puts between the prompt and the answer word (SmolVLM's
    ``Assistant:`` is followed by a space, Qwen's ``assistant\\n`` by the word itself); ``packages``: the
    packages beyond transformers that its processor imports; ``tiles``: its processor cuts a frame into
    tiles (``do_image_splitting``) after resizing its longest edge (``size``); ``window_input``: how its
    template takes a window of frames (``"video"``: one video item, Qwen's; ``"images"``: an image per frame),
    None where it takes one image per prompt (a window judge is refused)."""

    model_type: str
    name: str
    example: str
    adapter: Callable[..., Any]
    answer_lead: str = ""
    packages: tuple[str, ...] = ()
    tiles: bool = False
    window_input: str | None = None


def _qwen(model, processor, image_size):
    from vlmrm_fast.models.judge.qwen import QwenAdapter

    return QwenAdapter(model, processor, image_size)


def _idefics(model, processor, image_size):
    from vlmrm_fast.models.judge.idefics import IdeficsAdapter

    return IdeficsAdapter(model, processor, image_size)


JUDGE_FAMILIES: dict[str, JudgeFamily] = {
    row.model_type: row
    for row in (
        JudgeFamily("qwen2_vl", "Qwen2-VL", "Qwen/Qwen2-VL-2B-Instruct", _qwen, window_input="video"),
        JudgeFamily("qwen2_5_vl", "Qwen2.5-VL", "Qwen/Qwen2.5-VL-3B-Instruct", _qwen, window_input="video"),
        JudgeFamily("qwen3_vl", "Qwen3-VL", "Qwen/Qwen3-VL-2B-Instruct", _qwen, window_input="video"),
        JudgeFamily(
            "smolvlm",
            "SmolVLM",
            "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
            _idefics,
            " ",
            packages=("num2words",),
            tiles=True,
            window_input="images",
        ),
        # SmolVLM's first release (HuggingFaceTB/SmolVLM-256M-Instruct, -500M-, SmolVLM-Instruct) is an Idefics3.
        JudgeFamily(
            "idefics3", "Idefics3", "HuggingFaceM4/Idefics3-8B-Llama3", _idefics, " ", tiles=True, window_input="images"
        ),
    )
}
SUPPORTED = ", ".join(row.name for row in JUDGE_FAMILIES.values())
EXAMPLE = JUDGE_FAMILIES["qwen2_vl"].example

#: model_types of contrastive image-text models: they embed, they do not answer.
_CONTRASTIVE = ("clip", "siglip", "siglip2", "chinese_clip", "altclip", "blip", "owlvit", "align", "metaclip_2")


def judge_family(config: Any, model_id: str) -> JudgeFamily:
    """The family of a transformers config (a ``PretrainedConfig`` or the dict of a ``config.json``);
    one line naming the fix for a model that is no judge here (a CLIP, a text-only language model, a
    vision-language model without an adapter)."""
    read = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    model_type = str(read("model_type", "") or "")
    row = JUDGE_FAMILIES.get(model_type)
    if row is not None:
        return row
    use = f"use one of {SUPPORTED} (e.g. model={EXAMPLE!r})"
    if model_type in _CONTRASTIVE:
        raise ValueError(
            f"model {model_id!r} is a contrastive image-text model (model_type {model_type!r}), not a generative "
            f"VLM: it cannot answer a question. For question criteria {use}; for CLIP rewards use an open_clip model "
            f"with goal_baseline or binary criteria (e.g. 'ViT-L-14/laion2b_s32b_b82k')"
        )
    if read("vision_config") is None:
        raise ValueError(
            f"model {model_id!r} is a text-only language model (model_type {model_type!r}): a judge looks at "
            f"frames; {use}"
        )
    raise ValueError(
        f"model {model_id!r} is a vision-language model of type {model_type!r}, which has no judge adapter here; {use}"
    )


def transformers_problem() -> str | None:
    """Why the judges cannot run with the installed transformers (absent, or older than
    :data:`MIN_TRANSFORMERS`), or None."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed"
    version = importlib.metadata.version("transformers")
    if _release(version) < _release(MIN_TRANSFORMERS):
        return f"transformers {version} is installed, older than {MIN_TRANSFORMERS}"
    return None


def require_judge_packages(model_id: str, family: JudgeFamily | None = None) -> None:
    """Raises :class:`MissingDependencyError` naming the extra when a judge cannot import what it needs."""
    problem = transformers_problem()
    if problem is None and family is not None:
        missing = [p for p in family.packages if importlib.util.find_spec(p) is None]
        if missing:
            problem = f"{family.name}'s processor needs {', '.join(missing)}, which is not installed"
    if problem:
        raise MissingDependencyError(
            f"{model_id} is a generative VLM judge, which runs through transformers >= {MIN_TRANSFORMERS}; "
            f"{problem}: {INSTALL}"
        )


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)
