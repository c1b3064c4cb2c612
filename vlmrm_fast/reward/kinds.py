"""What a reward asks of a model: prompts and parameters, checked on construction.

Two kinds for CLIP, both scored from one image-embedding pass (docs/reward.md):

* :class:`GoalBaselineCriterion` (Rocamonde et al., 2024): ``1 - 0.5 |P (x - g)|^2``
  with ``g`` the mean target embedding and ``P`` the goal-baseline projection of
  strength ``alpha``.
* :class:`BinaryCriterion` (Baumli et al., 2023): the softmax probability of the goal
  prompt against negative prompts, thresholded (or the probability itself).

One for a generative VLM (a judge, docs/judge.md), several scored from one vision pass:

* :class:`QuestionCriterion`: a yes/no question about the frame; the reward is read from the
  answer word's logits (``score``: P(yes) against P(no), log P(yes), or the log-odds).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from vlmrm_fast.checks import FieldError, FieldTypeError, number


def normalize_prompts(prompts: Any, what: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    """A string or a sequence of strings -> tuple of non-empty, stripped prompts."""
    if prompts is None:
        prompts = ()
    if isinstance(prompts, str):
        prompts = (prompts,)
    if isinstance(prompts, Mapping):
        raise FieldTypeError(what, f"must be a string or a list of strings, got a mapping {dict(prompts)!r}")
    try:
        items = tuple(prompts)
    except TypeError:
        raise FieldTypeError(what, f"must be a string or a list of strings, got {type(prompts).__name__}") from None
    out = []
    for p in items:
        if not isinstance(p, str):
            raise FieldTypeError(what, f"must contain strings, got {type(p).__name__}: {p!r}")
        if not p.strip():
            raise FieldError(what, "contains an empty prompt; write a sentence such as 'a humanoid robot kneeling'")
        out.append(p.strip())
    if not out and not allow_empty:
        raise FieldError(what, "is empty; give at least one prompt, e.g. 'a humanoid robot kneeling'")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class GoalBaselineCriterion:
    """The VLM-RM reward: target prompts, optional baseline prompts, alpha in [0, 1]."""

    target_prompts: tuple[str, ...]
    baseline_prompts: tuple[str, ...] = ()
    alpha: float = 0.0
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_prompts", normalize_prompts(self.target_prompts, "target_prompts"))
        object.__setattr__(
            self, "baseline_prompts", normalize_prompts(self.baseline_prompts, "baseline_prompts", allow_empty=True)
        )
        alpha = number(self.alpha, "alpha", low=0.0, high=1.0)
        if alpha > 0.0 and not self.baseline_prompts:
            raise FieldError(
                "alpha",
                f"{alpha} needs baseline_prompts (e.g. 'a humanoid robot'): the projection runs along the "
                "baseline -> target direction; with no baseline use alpha=0",
            )
        if self.baseline_prompts and set(self.baseline_prompts) == set(self.target_prompts) and alpha > 0:
            raise FieldError("baseline_prompts", "equal target_prompts: the goal-baseline direction is undefined")
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "name", self.name or self.target_prompts[0])

    @property
    def prompts(self) -> tuple[str, ...]:
        return self.target_prompts + self.baseline_prompts


@dataclasses.dataclass(frozen=True)
class BinaryCriterion:
    """Baumli et al.: ``p = softmax(s [x.g, x.n_1, ..])[0]``; reward ``1[p > threshold]`` or ``p``.

    ``temperature=None`` uses the model's learned logit scale ``s``; otherwise
    ``s = 1 / temperature``.
    """

    goal_prompt: str
    negative_prompts: tuple[str, ...]
    threshold: float = 0.5
    temperature: float | None = None
    probability: bool = False
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.goal_prompt, str):
            raise TypeError(f"goal_prompt must be one string, got {type(self.goal_prompt).__name__}")
        (goal,) = normalize_prompts(self.goal_prompt, "goal_prompt")
        object.__setattr__(self, "goal_prompt", goal)
        negatives = normalize_prompts(self.negative_prompts, "negative_prompts")
        if goal in negatives:
            raise ValueError(f"negative_prompts contains the goal prompt {goal!r}")
        if len(negatives) > 63:
            raise ValueError(f"at most 63 negative prompts are supported, got {len(negatives)}")
        object.__setattr__(self, "negative_prompts", negatives)
        object.__setattr__(self, "threshold", number(self.threshold, "threshold", low=0.0, high=1.0))
        if self.temperature is not None:
            temperature = number(self.temperature, "temperature")
            if temperature <= 0:
                raise FieldError("temperature", f"must be positive, got {temperature}")
            object.__setattr__(self, "temperature", temperature)
        object.__setattr__(self, "probability", bool(self.probability))
        object.__setattr__(self, "name", self.name or f"binary: {goal}")

    @property
    def prompts(self) -> tuple[str, ...]:
        return (self.goal_prompt,) + self.negative_prompts


#: What a question criterion's reward reads from the answer's logits ``l`` (docs/judge.md):
#: ``yes_vs_no`` = P(yes) / (P(yes) + P(no)) in [0, 1]; ``log_p_yes`` = log P(yes) over the whole
#: vocabulary, at most 0; ``log_odds`` = l_yes - l_no = log(P(yes) / P(no)), unbounded.
ANSWER_SCORES = ("yes_vs_no", "log_p_yes", "log_odds")


@dataclasses.dataclass(frozen=True)
class QuestionCriterion:
    """A question a generative VLM answers about each frame; the reward is read from the probability it
    gives the answer words ``yes`` and ``no`` (each one token of its tokenizer) as its first word.

    ``score`` (:data:`ANSWER_SCORES`): ``"yes_vs_no"`` (default) the probability of ``yes`` among the two
    answers, bounded, for PPO as it comes; ``"log_p_yes"`` LeRobot TOPReward's log-probability of ``yes``,
    which also falls when the model would say something else; ``"log_odds"`` the logit margin, which does
    not saturate as the model grows sure.
    """

    question: str
    score: str = "yes_vs_no"
    yes: str = "Yes"
    no: str = "No"
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.question, str):
            raise FieldTypeError(
                "question", f"must be one string, got {type(self.question).__name__}{_yaml_boolean(self.question)}"
            )
        if not self.question.strip():
            raise FieldError("question", "is empty; ask about the frame, e.g. 'Is the pole upright?'")
        object.__setattr__(self, "question", self.question.strip())
        if isinstance(self.score, bool):
            raise FieldTypeError(
                "score", f"{_yaml_boolean(self.score)[2:]}; use one of {', '.join(map(repr, ANSWER_SCORES))}"
            )
        if self.score not in ANSWER_SCORES:
            raise FieldError("score", f"{self.score!r} is unknown; use one of {', '.join(map(repr, ANSWER_SCORES))}")
        for field in ("yes", "no"):
            word = getattr(self, field)
            if isinstance(word, bool):
                raise FieldTypeError(
                    field,
                    f"{_yaml_boolean(word)[2:]}, and the answer word's spelling with it (the token of 'Yes' is not "
                    f"that of 'yes'); quote the word: {field}: '{'Yes' if field == 'yes' else 'No'}'",
                )
            if not isinstance(word, str) or not word.strip() or word != word.strip():
                raise FieldError(field, f"must be one answer word without spaces around it, got {word!r}")
        if self.yes == self.no:
            raise FieldError("no", f"equals yes ({self.yes!r}): the two answers must differ")
        object.__setattr__(self, "name", self.name or f"question: {self.question}")

    @classmethod
    def about(cls, prompt: str, **fields: Any) -> QuestionCriterion:
        """The question a CLIP target prompt asks a judge: ``Does this image show <prompt>? Answer yes or no.``"""
        (prompt,) = normalize_prompts(prompt, "target_prompts")
        return cls(f"Does this image show {prompt}? Answer yes or no.", **fields)

    @property
    def prompts(self) -> tuple[str, ...]:
        return (self.question,)


def _yaml_boolean(value: Any) -> str:
    """Why a boolean stands where text was meant (``; YAML read ... as the boolean true``), or nothing."""
    if not isinstance(value, bool):
        return ""
    return (
        f"; YAML read the value as the boolean {str(value).lower()} (unquoted yes, no, true, false, on and off are "
        "booleans in YAML)"
    )


class Criterion(Protocol):
    """What every reward criterion is: a frozen dataclass of its prompts and parameters, checked on construction,
    with the ``name`` it is logged under and the ``prompts`` a model embeds or asks for it."""

    @property
    def name(self) -> str | None: ...

    @property
    def prompts(self) -> tuple[str, ...]: ...


@dataclasses.dataclass(frozen=True)
class CriterionKind:
    """A kind of reward criterion: ``criterion``, its dataclass (a :class:`Criterion`), and ``formula``, what scores it from
    image embeddings as ``"module:Class"`` (a ``reward.formulas.Formula``, imported on first use; None: not
    scored from embeddings, as a judge's question, read from the answer's logits)."""

    criterion: type
    formula: str | None = None

    def required(self) -> list[str]:
        """The fields a criterion of this kind must be given."""
        return [
            f.name
            for f in dataclasses.fields(self.criterion)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]


#: The kinds of reward criterion by the name a config gives them (``kind:``), read wherever a criterion is taken: a
#: new kind is its dataclass, its formula and one row here (docs/architecture.md, "Where to add things").
CRITERION_KINDS: dict[str, CriterionKind] = {
    "goal_baseline": CriterionKind(GoalBaselineCriterion, "vlmrm_fast.reward.formulas:GoalBaseline"),
    "binary": CriterionKind(BinaryCriterion, "vlmrm_fast.reward.formulas:Binary"),
    "question": CriterionKind(QuestionCriterion),
}


def kind_of(criterion: Any) -> str | None:
    """The name of ``criterion``'s kind in :data:`CRITERION_KINDS` (None: no kind's dataclass)."""
    return next((name for name, kind in CRITERION_KINDS.items() if type(criterion) is kind.criterion), None)


def as_criterion(spec: Any) -> Criterion:
    """A criterion object of a kind of :data:`CRITERION_KINDS`, or a mapping of its fields: ``kind:`` names its kind, else
    the fields say it (the first kind given one of its required fields, e.g. ``question`` or ``goal_prompt``;
    a goal-baseline criterion when none is). A :class:`~vlmrm_fast.checks.FieldError` names the field."""
    if kind_of(spec) is not None:
        return spec
    if not isinstance(spec, Mapping):
        classes = ", ".join(kind.criterion.__name__ for kind in CRITERION_KINDS.values())
        raise FieldTypeError("", f"a criterion must be one of {classes} or a mapping of its fields, got {spec!r}")
    fields = dict(spec)
    implied = next((name for name, kind in CRITERION_KINDS.items() if set(kind.required()) & set(fields)), None)
    name = fields.pop("kind", implied or next(iter(CRITERION_KINDS)))
    kind = CRITERION_KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise FieldError("kind", f"{name!r} is unknown; use one of {', '.join(map(repr, CRITERION_KINDS))}")
    names = [f.name for f in dataclasses.fields(kind.criterion)]
    for key in [key for key in fields if isinstance(key, bool)]:
        # YAML reads an unquoted key yes/no (and true/false, on/off) as a boolean: yes: 'Yes' gives {True: 'Yes'}.
        word = "yes" if key else "no"
        if word not in names or word in fields:
            raise FieldTypeError(
                str(key).lower(),
                f"YAML read this key as the boolean {str(key).lower()} (unquoted yes/no/true/false/on/off are "
                f"booleans in YAML); fields are {', '.join(names)}",
            )
        fields[word] = fields.pop(key)
    for key in fields:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"fields are {', '.join(names)}"
            raise FieldError(str(key), f"unknown field of a {name.replace('_', '-')} criterion; {hint}")
    missing = [field for field in kind.required() if field not in fields]
    if missing:
        raise FieldError(
            missing[0],
            f"required field is missing (a {name.replace('_', '-')} criterion needs {' and '.join(missing)})",
        )
    return kind.criterion(**fields)


def as_criteria(specs: Any) -> tuple[Criterion, ...]:
    """``specs`` (a list of criteria or of mappings of their fields) as criteria; an error names the criterion's place,
    ``criteria[1].score``."""
    if isinstance(specs, Mapping):
        raise FieldTypeError(
            "criteria",
            f"must be a list of criteria, got a mapping with keys {', '.join(map(str, specs))}: write each criterion as one "
            "item of a list ('- kind: question' in YAML, the criterion's other fields under it)",
        )
    if isinstance(specs, str) or not isinstance(specs, Iterable):
        raise FieldTypeError("criteria", f"must be a list of criteria, got {specs!r}")
    criteria = []
    for i, spec in enumerate(specs):
        try:
            criteria.append(as_criterion(spec))
        except FieldError as exc:
            raise type(exc)(f"criteria[{i}]{'.' if exc.field else ''}{exc.field}", exc.reason) from None
    if not criteria:
        raise FieldError("criteria", "is empty; give at least one criterion")
    return tuple(criteria)


def unique_prompts(criteria: Sequence[Criterion]) -> tuple[str, ...]:
    """Every prompt the criteria use, each once, in first-seen order (one text pass)."""
    seen: dict[str, None] = {}
    for criterion in criteria:
        for p in criterion.prompts:
            seen.setdefault(p, None)
    return tuple(seen)
