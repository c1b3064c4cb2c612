"""RewardModelSpec: everything that picks a reward model, checked once and passed whole.

As open_clip passes its ``PreprocessCfg``, the package passes one frozen spec from the VecEnv,
the training config (its ``reward:`` section is this spec) and the export command down to
:func:`load_reward_model`, instead of spelling the same dozen arguments out in each signature.
Fields left None take the task's defaults where a task is known (:meth:`with_task_defaults`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from vlmrm_fast.checks import FieldError, FieldTypeError, boolean, non_negative_int, number, one_of, positive_int
from vlmrm_fast.encoders import BACKEND_OPTIONS, BACKENDS, PRECISION_NAMES
from vlmrm_fast.frames.preprocess import RESIZE_MODES
from vlmrm_fast.models.judge.prompt import PROMPT_ORDERS
from vlmrm_fast.reward.episode_scorer import PrefixSpec
from vlmrm_fast.reward.families import REWARD_FAMILIES, RewardFamily, family_of
from vlmrm_fast.reward.kinds import Criterion, GoalBaselineCriterion, as_criteria, normalize_prompts
from vlmrm_fast.reward.preference_spec import PreferenceSpec
from vlmrm_fast.reward.schedule import ScoreSchedule
from vlmrm_fast.reward.window import WindowSpec

if TYPE_CHECKING:
    from vlmrm_fast.reward.protocol import RewardNeeds


class TaskDefaults(Protocol):
    """What a reward spec takes from a task (an ``envs.TaskSpec``, above the reward): its name, its prompts and
    its preprocessing."""

    @property
    def name(self) -> str: ...

    @property
    def target_prompts(self) -> tuple[str, ...]: ...

    @property
    def baseline_prompts(self) -> tuple[str, ...]: ...

    @property
    def resize_mode(self) -> str | None: ...


#: The model when none is named: the paper's largest CLIP.
DEFAULT_MODEL = "ViT-bigG-14/laion2b_s39b_b160k"
#: ``also_score``'s name for the target prompts' own criterion.
TARGET_CRITERION = "target"


@dataclasses.dataclass(frozen=True)
class RewardModelSpec:
    """A CLIP reward model: which weights, which prompts (one goal-baseline criterion, ``criteria``, or the
    target prompts plus ``also_score``'s prompt sets), where and how the image tower runs.

    ``baseline_prompts`` None: the task's (none without a task); ``()``: none. ``also_score``:
    ``{name: prompt or [prompts]}``, more goal-baseline criteria with the same baseline prompts and
    alpha, scored from the same encoder pass (the target prompts are then the criterion named
    "target"). ``batch_size``: frames per encoder batch (the fixed batch of the compile and
    TensorRT backends; episode-batch scoring's batch). ``tokenizer``: a folder holding the Hugging
    Face tokenizer of a model whose tokenizer lives on the hub (SigLIP), instead of the cache
    (docs/models.md). ``encoder_options`` go to the backend (``compile_mode``, ``attention``,
    ``engine_cache_dir``, FP8's ``fp8_scaling`` and ``fp8_calibration``, a path in a config; see
    ``encoders.make_image_encoder``). ``score_every``: score each env on every n-th step of its
    episode (and on its last step); ``between_scores``: the reward of the other steps, "zero" or
    "hold" (the env's last score; ``reward/schedule.py``). ``window``: score a window of each env's
    frames (a :class:`~vlmrm_fast.reward.window.WindowSpec`: ``{frames: 8, timing: streamed,
    embedding: video}``) with a video model, or with the mean of a frame model's embeddings
    (docs/video-rewards.md), or with a generative VLM judge asked about the window's frames at once (the window
    judge, docs/judge.md). ``prefix``: a judge asked about each env's episode so far at every step (a
    :class:`~vlmrm_fast.reward.episode_scorer.PrefixSpec`: ``{max_frames: 64}``; TOPReward's progress, streamed;
    docs/judge.md).

    Each field but those of :data:`COMMON_FIELDS` belongs to the families that take it (``reward/families.py``:
    each row's ``fields``); the spec's family (:attr:`family`, the first row that claims its model, criteria and
    window) checks their values, and a field set for a family that does not take it is refused, naming the
    family.

    A generative VLM judge (docs/judge.md) is named the same way (``model``: a hub repository such as
    ``Qwen/Qwen2-VL-2B-Instruct``, a folder, or ``vlmrm-tiny-qwen2-vl``) and asks ``criteria`` of kind
    ``question`` (or one question about the target prompt); ``image_size`` (pixels, or [height, width])
    is its input size, to which frames are resized (default 224); ``prompt_order`` ``image_first`` (the
    default: the frame, then the question, as the models' authors ask) or ``question_first`` (the
    question cached ahead of the frame: fewer tokens per frame); ``do_image_splitting`` and
    ``longest_edge`` set SmolVLM's and Idefics3's processor (tiles of the frame, and the longest edge it
    is resized to before they are cut; None: the processor's own).

    ``preference``: a reward learned from the judge's preferences between two frames (RL-VLM-F; a
    :class:`~vlmrm_fast.reward.preference_spec.PreferenceSpec`: ``{goal: ..., label_every: 256, pairs: 64}``;
    docs/judge.md): the env's reward is a small network's, trained online with the Bradley-Terry loss.
    """

    model: str = DEFAULT_MODEL
    pretrained: str | None = None
    checkpoint: str | None = None
    target_prompts: tuple[str, ...] | None = None
    baseline_prompts: tuple[str, ...] | None = None
    alpha: float = 0.0
    criteria: tuple[Any, ...] | None = None
    also_score: Mapping[str, Any] | None = None
    device: Any = "auto"
    backend: str = "auto"
    precision: str = "auto"
    batch_size: int | None = None
    cache_dir: str | None = None
    seed: int = 0
    resize_mode: str | None = None
    tokenizer: str | None = None
    score_every: int = 1
    between_scores: str = "zero"
    window: WindowSpec | None = None
    prefix: PrefixSpec | None = None
    image_size: Any = None
    prompt_order: str | None = None
    do_image_splitting: bool | None = None
    longest_edge: int | None = None
    preference: PreferenceSpec | None = None
    encoder_options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if not isinstance(self.model, str) or not self.model:
            raise FieldError(
                "model",
                f"must be a model name such as 'ViT-L-14/laion2b_s32b_b82k' or 'vlmrm-tiny', got {self.model!r}",
            )
        for name in ("pretrained", "checkpoint", "cache_dir", "tokenizer"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise FieldTypeError(name, f"must be a string or null, got {value!r}")
        if self.target_prompts is not None:
            put("target_prompts", normalize_prompts(self.target_prompts, "target_prompts"))
        if self.baseline_prompts is not None:
            put("baseline_prompts", normalize_prompts(self.baseline_prompts, "baseline_prompts", allow_empty=True))
        put("alpha", number(self.alpha, "alpha", low=0.0, high=1.0))
        if self.criteria is not None:
            if self.target_prompts is not None or self.baseline_prompts or self.alpha or self.also_score:
                raise FieldError(
                    "criteria", "give either target_prompts/baseline_prompts/alpha/also_score or criteria, not both"
                )
            put("criteria", tuple(as_criteria(self.criteria)))
        if self.also_score is not None:
            put("also_score", _prompt_sets(self.also_score))
        one_of(self.backend, "backend", BACKENDS)
        one_of(self.precision, "precision", PRECISION_NAMES)
        put("batch_size", positive_int(self.batch_size, "batch_size", allow_none=True))
        put("seed", non_negative_int(self.seed, "seed"))
        if self.resize_mode is not None:
            one_of(self.resize_mode, "resize_mode", RESIZE_MODES)
        if self.image_size is not None:
            put("image_size", _image_size(self.image_size))
        if self.prompt_order is not None:
            one_of(self.prompt_order, "prompt_order", PROMPT_ORDERS)
        if self.do_image_splitting is not None:
            put("do_image_splitting", boolean(self.do_image_splitting, "do_image_splitting"))
        put("longest_edge", positive_int(self.longest_edge, "longest_edge", allow_none=True))
        put("preference", PreferenceSpec.of(self.preference))
        put("score_every", self.schedule.score_every)  # checked there, named as the field
        if not isinstance(self.encoder_options, Mapping):
            raise FieldTypeError("encoder_options", f"must be a mapping of option names, got {self.encoder_options!r}")
        put("encoder_options", dict(self.encoder_options))  # a copy (a spec pickles to other ranks)
        put("window", WindowSpec.of(self.window))
        put("prefix", PrefixSpec.of(self.prefix))
        family = self.family
        _refuse_other_families_fields(self, family)
        family.check(self)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> RewardModelSpec:
        """A spec from keyword arguments: the spec's own fields, the rest encoder options (an unknown
        name is refused with the closest field or option)."""
        names = spec_fields()
        fields = {key: value for key, value in kwargs.items() if key in names}
        options = {
            **kwargs.get("encoder_options", {}),
            **{k: v for k, v in kwargs.items() if k not in names and k != "encoder_options"},
        }
        known_options = {o for opts in BACKEND_OPTIONS.values() for o in opts}
        for key in options:
            if key not in known_options:
                close = difflib.get_close_matches(key, sorted(names | known_options), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise FieldTypeError(key, f"is neither a reward model field nor an encoder option{hint}")
        return cls(**fields, encoder_options=options)

    @property
    def family(self) -> RewardFamily:
        """The reward family of this spec (``reward.families.REWARD_FAMILIES``): the first that claims its model,
        criteria and window."""
        return family_of(self.model, self.criteria, self.window, self.prefix, self.preference)

    @property
    def needs(self) -> RewardNeeds:
        """What this spec's model will ask of a stack (``reward.protocol.RewardNeeds``), before it is loaded."""
        return self.family.needs(self)

    @property
    def schedule(self) -> ScoreSchedule:
        """Which steps the model scores (``score_every``, ``between_scores``)."""
        return ScoreSchedule(self.score_every, self.between_scores)

    def replace(self, **changes: Any) -> RewardModelSpec:
        return dataclasses.replace(self, **changes)

    def with_task_defaults(self, task: TaskDefaults) -> RewardModelSpec:
        """The task's prompts and preprocessing where this spec leaves them None (the preprocessing only for a
        family that takes a task's: a video model keeps its own)."""
        changes: dict[str, Any] = {}
        if self.criteria is None and self.target_prompts is None:
            if not task.target_prompts:
                raise FieldError("target_prompts", f"is required: task {task.name!r} has no default prompts")
            changes["target_prompts"] = task.target_prompts
        if self.criteria is None and self.baseline_prompts is None:
            changes["baseline_prompts"] = task.baseline_prompts
        if self.resize_mode is None and task.resize_mode is not None and self.family.takes_task_resize_mode:
            changes["resize_mode"] = task.resize_mode
        return self.replace(**changes) if changes else self

    def reward_criteria(self) -> tuple[tuple[Criterion, ...], bool]:
        """(the criteria, whether the model returns one column per criterion) for this spec."""
        if self.criteria is not None:
            return self.criteria, True
        if self.target_prompts is None:
            raise FieldError("target_prompts", "is required (e.g. 'a humanoid robot kneeling'), or pass criteria=[...]")
        baselines = self.baseline_prompts or ()
        if self.also_score:
            sets = {TARGET_CRITERION: self.target_prompts, **self.also_score}
            return tuple(GoalBaselineCriterion(p, baselines, self.alpha, name=name) for name, p in sets.items()), True
        return (GoalBaselineCriterion(self.target_prompts, baselines, self.alpha),), False


#: The fields every reward family takes: the model, its criteria, where and how often it scores. Each other
#: field of a RewardModelSpec is taken by the families whose rows name it (``reward/families.py``).
COMMON_FIELDS = (
    "model",
    "target_prompts",
    "baseline_prompts",
    "alpha",
    "criteria",
    "also_score",
    "device",
    "precision",
    "batch_size",
    "cache_dir",
    "seed",
    "score_every",
    "between_scores",
)


def _refuse_other_families_fields(spec: RewardModelSpec, family: RewardFamily) -> None:
    """The one refusal of a field set (not left at its default) that ``spec``'s family does not take, naming the
    family and what the field sets."""
    for field in dataclasses.fields(spec):
        if field.name in COMMON_FIELDS or field.name in family.fields:
            continue
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        if getattr(spec, field.name) == default:
            continue
        takers = [row.name for row in REWARD_FAMILIES.values() if field.name in row.fields]
        sets = REWARD_FAMILIES[takers[0]].fields[field.name] if takers else "nothing any family reads"
        owners = f", a field of the {_and(takers)} famil{'ies' if len(takers) > 1 else 'y'}" if takers else ""
        raise FieldError(
            field.name,
            f"sets {sets}{owners}; {spec.model!r} is {family.description} (the {family.name} family), which does "
            "not take it: leave it out",
        )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def spec_fields() -> set[str]:
    """The names of a RewardModelSpec's fields but ``encoder_options``."""
    return {field.name for field in dataclasses.fields(RewardModelSpec)} - {"encoder_options"}


def _image_size(value: Any) -> tuple[int, int]:
    """``224`` or ``[224, 336]`` -> (height, width)."""
    sizes = [value] * 2 if not isinstance(value, (list, tuple)) else list(value)
    if len(sizes) != 2:
        raise FieldError("image_size", f"must be a size in pixels or [height, width], got {value!r}")
    return positive_int(sizes[0], "image_size"), positive_int(sizes[1], "image_size")


def _prompt_sets(sets: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(sets, Mapping) or not sets:
        raise FieldError("also_score", f"must be a mapping of names to prompts, got {sets!r}")
    if TARGET_CRITERION in sets:
        raise FieldError(
            f"also_score.{TARGET_CRITERION}", "the name 'target' is the target prompts' own; choose another"
        )
    return {str(name): normalize_prompts(prompts, f"also_score.{name}") for name, prompts in sets.items()}
