"""What a reward asks of CLIP: prompts and parameters, checked on construction.

Two kinds, both scored from one image-embedding pass (docs/reward.md):

* :class:`GoalBaselineTask` (Rocamonde et al., 2024): ``1 - 0.5 |P (x - g)|^2``
  with ``g`` the mean target embedding and ``P`` the goal-baseline projection of
  strength ``alpha``.
* :class:`BinaryTask` (Baumli et al., 2023): the softmax probability of the goal
  prompt against negative prompts, thresholded (or the probability itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
class GoalBaselineTask:
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
class BinaryTask:
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


Task = GoalBaselineTask | BinaryTask


def as_reward_task(spec: Any) -> Task:
    """A task object, or a dict of its fields (``kind: binary`` selects :class:`BinaryTask`)."""
    if isinstance(spec, (GoalBaselineTask, BinaryTask)):
        return spec
    if isinstance(spec, dict):
        fields = dict(spec)
        kind = fields.pop("kind", "binary" if "goal_prompt" in fields else "goal_baseline")
        cls = {"goal_baseline": GoalBaselineTask, "binary": BinaryTask}.get(kind)
        if cls is None:
            raise ValueError(f"task kind {kind!r} is unknown; use 'goal_baseline' or 'binary'")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {unknown}; fields are {sorted(names)}")
        if cls is GoalBaselineTask and "target_prompts" not in fields:
            raise ValueError("a goal-baseline task needs target_prompts")
        return cls(**fields)
    raise TypeError(f"a task must be GoalBaselineTask, BinaryTask or a dict, got {type(spec).__name__}")


def as_reward_tasks(specs: Iterable[Any]) -> tuple[Task, ...]:
    tasks = tuple(as_reward_task(s) for s in specs)
    if not tasks:
        raise ValueError("tasks is empty; give at least one task")
    return tasks


def unique_prompts(tasks: Sequence[Task]) -> tuple[str, ...]:
    """Every prompt the tasks use, each once, in first-seen order (one text pass)."""
    seen: dict[str, None] = {}
    for task in tasks:
        for p in task.prompts:
            seen.setdefault(p, None)
    return tuple(seen)
