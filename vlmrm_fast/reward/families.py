"""The reward families: one row per kind of reward model, and the one place a spec becomes a model.

A family is a module of ``reward/`` with a class keeping :class:`~vlmrm_fast.reward.protocol.RewardModel`
and a row of :data:`REWARD_FAMILIES`: its name, what it is, which specs it claims (a model's name, its
criteria, its window, episode prefix or preference settings: a :class:`Claim`), the fields of :class:`~vlmrm_fast.reward.spec.RewardModelSpec` it takes beyond every
family's (:data:`~vlmrm_fast.reward.spec.COMMON_FIELDS`), the window it scores when evaluated with a window
size, and its class as ``"module:Class"``, which loads a model from a spec (``from_spec``), checks the values
of the fields it takes (``check_spec``), says what a spec's model will ask of a stack (``needs_of``) and
whether its weights can be had now (``require_weights``).

The first row that claims a spec is its family (``RewardModelSpec.family``); the spec refuses, in one place,
a field its family does not take, naming the family. Adding a reward family is a module and a row
(docs/architecture.md, "Where to add things"): nothing above ``reward/`` names a family.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from vlmrm_fast.lazy import named

if TYPE_CHECKING:
    from vlmrm_fast.reward.protocol import RewardModel, RewardNeeds
    from vlmrm_fast.reward.spec import RewardModelSpec


@dataclasses.dataclass(frozen=True)
class Claim:
    """What a row reads of a spec to claim it: the model's name, its criteria (None: the target prompts'), its
    window, episode prefix and preference settings (None where the spec sets none). A family that claims specs
    by a new spec field reads it here."""

    model: str
    criteria: tuple[Any, ...] | None = None
    window: Any = None
    prefix: Any = None
    preference: Any = None


def _names_a_judge(claim: Claim) -> bool:
    from vlmrm_fast.models.judge.judge_models import is_judge_name
    from vlmrm_fast.reward.kinds import QuestionCriterion

    return is_judge_name(claim.model) or any(isinstance(c, QuestionCriterion) for c in claim.criteria or ())


def _learns_preferences(claim: Claim) -> bool:
    return claim.preference is not None


def _a_judge_of_windows(claim: Claim) -> bool:
    return claim.window is not None and _names_a_judge(claim)


def _a_judge_of_prefixes(claim: Claim) -> bool:
    return claim.prefix is not None and _names_a_judge(claim)


def _names_a_video_model(claim: Claim) -> bool:
    from vlmrm_fast.models.video import known_video_models

    return claim.model in known_video_models()


def _has_a_window(claim: Claim) -> bool:
    return claim.window is not None


def _any(claim: Claim) -> bool:
    return True


def _video_window(model: str, frames: int | None) -> dict[str, Any]:
    from vlmrm_fast.models.video import video_model_info

    return {"frames": frames or video_model_info(model).num_frames}


def _mean_of_frames_window(model: str, frames: int | None) -> dict[str, Any] | None:
    return None if frames is None else {"frames": frames, "embedding": "mean_of_frames"}


def _a_window(model: str, frames: int | None) -> dict[str, Any] | None:
    return None if frames is None else {"frames": frames}


def _no_window(model: str, frames: int | None) -> dict[str, Any] | None:
    return None


@dataclasses.dataclass(frozen=True)
class RewardFamily:
    """One reward family (see the module docstring).

    ``claims(claim)``: whether a spec of that :class:`Claim` (its model name, criteria, window, episode prefix and
    preference settings) is this family's. ``fields``: the spec fields it takes beyond every family's, each
    with what it sets (the refusal of a field another family takes reads it). ``window_for(model, frames)``:
    the window fields a model of this family is evaluated with for a window size (None: its own; the result
    None: no window). ``implementation``: ``"module:Class"`` of its reward model class.
    ``task_preprocessing``: a task's frame preprocessing (``TaskSpec.resize_mode``) becomes its spec's where the
    spec sets none (False: a video model keeps the preprocessing it was trained with).
    """

    name: str
    description: str
    claims: Callable[[Claim], bool]
    fields: Mapping[str, str]
    implementation: str
    window_for: Callable[[str, int | None], dict[str, Any] | None] = _a_window
    task_preprocessing: bool = True

    def load(self, spec: RewardModelSpec) -> RewardModel:
        """The reward model of ``spec`` (a spec of this family)."""
        return named(self.implementation).from_spec(spec)

    def check(self, spec: RewardModelSpec) -> None:
        """The values of the fields this family takes, checked (a FieldError naming the field and the fix)."""
        named(self.implementation).check_spec(spec)

    def needs(self, spec: RewardModelSpec) -> RewardNeeds:
        """What the model of ``spec`` will ask of a stack (before it is loaded)."""
        return named(self.implementation).needs_of(spec)

    def require_weights(self, spec: RewardModelSpec) -> None:
        """Fails in a line when the weights of ``spec``'s model are neither here nor downloadable now."""
        named(self.implementation).require_weights(spec)

    @property
    def takes_task_resize_mode(self) -> bool:
        """Whether a task's ``resize_mode`` becomes the spec's where it sets none (see ``task_preprocessing``)."""
        return "resize_mode" in self.fields and self.task_preprocessing

    @property
    def criterion_kinds(self) -> tuple[str, ...]:
        """The kinds of criteria its models score (its class's ``criterion_kinds_of()``)."""
        return tuple(named(self.implementation).criterion_kinds_of())


_CLIP_FIELDS = {
    "pretrained": "an open_clip model's pretrained weights (a tag)",
    "checkpoint": "a local weights file",
    "tokenizer": "the folder of a CLIP's Hugging Face tokenizer",
    "resize_mode": "how a frame is resized to the model's input",
    "backend": "how the image tower runs",
    "encoder_options": "the image tower backend's own options",
}
_WINDOW = {"window": "a window of each env's frames (docs/video-rewards.md)"}
_JUDGE_FIELDS = {
    "image_size": "a generative VLM judge's input size",
    "prompt_order": "the order of a generative VLM judge's question and frame",
    "do_image_splitting": "whether a SmolVLM or Idefics3 judge cuts a frame into tiles",
    "longest_edge": "the edge a SmolVLM or Idefics3 judge resizes a frame to",
    "resize_mode": _CLIP_FIELDS["resize_mode"],
    "backend": _CLIP_FIELDS["backend"],
}

#: The reward families, in the order they claim a spec: the first that claims it is its family (``clip``, the
#: :data:`FALLBACK`, is asked last, so that a row added to the table claims its names before it).
REWARD_FAMILIES: dict[str, RewardFamily] = {
    family.name: family
    for family in (
        RewardFamily(
            "preference",
            "a reward learned from a generative VLM judge's preferences between two frames",
            _learns_preferences,
            {**_JUDGE_FIELDS, "preference": "a reward learned from a judge's preferences (RL-VLM-F, docs/judge.md)"},
            "vlmrm_fast.reward.preference_model:PreferenceRewardModel",
            window_for=_no_window,
        ),
        RewardFamily(
            "window_judge",
            "a generative VLM judge of each env's last frames",
            _a_judge_of_windows,
            {**_JUDGE_FIELDS, **_WINDOW},
            "vlmrm_fast.reward.window_judge:WindowJudge",
        ),
        RewardFamily(
            "prefix_judge",
            "a generative VLM judge of each env's episode so far",
            _a_judge_of_prefixes,
            {**_JUDGE_FIELDS, "prefix": "the episode so far asked about at every step (docs/judge.md)"},
            "vlmrm_fast.reward.prefix_judge:PrefixJudge",
            window_for=_no_window,
        ),
        RewardFamily(
            "judge",
            "a generative VLM judge",
            _names_a_judge,
            _JUDGE_FIELDS,
            "vlmrm_fast.reward.judge:JudgeRewardModel",
        ),
        RewardFamily(
            "video",
            "a video model",
            _names_a_video_model,
            {
                **{name: _CLIP_FIELDS[name] for name in ("checkpoint", "resize_mode", "backend", "encoder_options")},
                **_WINDOW,
            },
            "vlmrm_fast.reward.window_model:VideoWindowModel",
            window_for=_video_window,
            task_preprocessing=False,
        ),
        RewardFamily(
            "mean_of_frames",
            "a CLIP scoring the mean of a window's frame embeddings",
            _has_a_window,
            {**_CLIP_FIELDS, **_WINDOW},
            "vlmrm_fast.reward.window_model:MeanOfFramesModel",
            window_for=_mean_of_frames_window,
        ),
        RewardFamily(
            "clip",
            "a CLIP frame model",
            _any,
            _CLIP_FIELDS,
            "vlmrm_fast.reward.model:VLMRewardModel",
            window_for=_mean_of_frames_window,
        ),
    )
}


#: The family of a spec no other row claims (any other name is an open_clip model's), asked last.
FALLBACK = "clip"


def family_of(
    model: str,
    criteria: tuple[Any, ...] | None = None,
    window: Any = None,
    prefix: Any = None,
    preference: Any = None,
) -> RewardFamily:
    """The family of a model named ``model`` with those criteria, window, episode prefix and preference settings:
    the first row that claims it, in the table's order, the :data:`FALLBACK` row last."""
    claim = Claim(model, criteria, window, prefix, preference)
    rows = [row for name, row in REWARD_FAMILIES.items() if name != FALLBACK] + [REWARD_FAMILIES[FALLBACK]]
    for family in rows:
        if family.claims(claim):
            return family
    raise ValueError(f"no reward family claims model {model!r}; families are {', '.join(REWARD_FAMILIES)}")


def load_reward_model(model: str | RewardModelSpec, pretrained: str | None = None, **fields: Any) -> RewardModel:
    """Loads the reward model of a :class:`~vlmrm_fast.reward.spec.RewardModelSpec`, or of its fields, by its
    family (:data:`REWARD_FAMILIES`): a CLIP frame model, a generative VLM judge (for a judge's name or
    question criteria, docs/judge.md), a model of windows (a video model's name, or a ``window``;
    docs/video-rewards.md).

    ``model`` is an open_clip name (``"ViT-bigG-14"``), ``"name/tag"``
    (``"ViT-L-14/laion2b_s32b_b82k"``), ``"hf-hub:org/repo"`` or ``"vlmrm-tiny"``, a judge's (a hub repository
    such as ``"Qwen/Qwen2-VL-2B-Instruct"``, a folder, ``"vlmrm-tiny-qwen2-vl"``) or a video model's
    (``"viclip-b16"``); ``checkpoint`` a local weights file. Give ``target_prompts`` (with optional
    ``baseline_prompts`` and ``alpha``) for one criterion, or ``criteria=[...]`` (:class:`GoalBaselineCriterion`,
    :class:`BinaryCriterion`, :class:`QuestionCriterion` or dicts) for several; the model then returns (N, K) rewards.
    ``resize_mode="squash"`` resizes frames to the encoder's square input instead of open_clip's
    shortest-side resize and centre crop (keeps wide frames whole); ``resize_mode="paper"`` does what the
    paper's code did (a squash by PyTorch's float bicubic without antialiasing, OpenAI's mean and std; see
    ``vlmrm_fast.frames.preprocess``). Other keywords are encoder options (see :class:`RewardModelSpec`).
    """
    from vlmrm_fast.models.judge.judge_models import check_model_name
    from vlmrm_fast.reward.spec import RewardModelSpec

    if isinstance(model, RewardModelSpec):
        if pretrained is not None or fields:
            raise ValueError("give a RewardModelSpec alone, or its fields as arguments, not both")
        spec = model
    else:
        spec = RewardModelSpec.from_kwargs(model=model, pretrained=pretrained, **fields)
    check_model_name(spec.model, spec.cache_dir)
    return spec.family.load(spec)
