"""What a learned preference reward (RL-VLM-F, ``reward/preference.py``) is configured by: its schedule of labels and
training (:class:`PreferenceSchedule`) and the ``preference`` field of a reward spec (:class:`PreferenceSpec`: the
schedule, the goal and the question the judge is asked of two frames). Plain data, read without torch, so that a spec
is checked before anything loads.

    reward:
      model: Qwen/Qwen2-VL-2B-Instruct
      preference: {goal: "the humanoid robot kneels", label_every: 256, pairs: 64}
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.reward.kinds import QuestionCriterion

#: RL-VLM-F's question of two images, asked so that two answer words read it: yes, the first; no, the second.
DEFAULT_QUESTION = (
    "The goal is: {goal}. Does the first image show more progress toward the goal than the second image? Answer yes "
    "or no."
)


@dataclasses.dataclass(frozen=True)
class PreferenceSchedule:
    """When and how much :class:`~vlmrm_fast.reward.preference.PreferenceReward` labels and trains: every
    ``label_every`` steps, ``pairs`` pairs labelled, then ``updates`` minibatches of ``batch_size`` labelled pairs; a
    replay of ``replay`` frames, a buffer of ``labels`` pairs; Adam at ``learning_rate``; the network's input
    ``net_size`` px and ``members`` CNNs."""

    label_every: int = 256
    pairs: int = 64
    updates: int = 64
    batch_size: int = 64
    replay: int = 4096
    labels: int = 8192
    learning_rate: float = 3e-4
    net_size: int = 64
    members: int = 3

    def __post_init__(self) -> None:
        for field in dataclasses.fields(PreferenceSchedule):
            if field.name != "learning_rate":
                object.__setattr__(self, field.name, positive_int(getattr(self, field.name), field.name))
        rate = self.learning_rate
        if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and 0 < rate < 1):
            raise FieldError("learning_rate", f"must be a number in (0, 1), got {rate!r}")
        if self.replay < 2:
            raise FieldError("replay", "must hold at least 2 frames: a pair is two of them")

    @property
    def schedule(self) -> PreferenceSchedule:
        """The schedule alone (a :class:`PreferenceSpec`'s without its question)."""
        names = [f.name for f in dataclasses.fields(PreferenceSchedule)]
        return PreferenceSchedule(**{name: getattr(self, name) for name in names})


@dataclasses.dataclass(frozen=True)
class PreferenceSpec(PreferenceSchedule):
    """A reward learned from a judge's preferences between two frames (``reward.preference``): the schedule's fields,
    and what the judge is asked: ``question`` with ``{goal}`` replaced by ``goal`` (None: the reward's one target
    prompt, a task's default), read from the logits of the answer words ``yes`` (the first image shows more progress)
    and ``no`` (the second), each one token of the judge's tokenizer."""

    goal: str | None = None
    question: str = DEFAULT_QUESTION
    yes: str = "Yes"
    no: str = "No"

    def __post_init__(self) -> None:
        super().__post_init__()
        QuestionCriterion(self.question, yes=self.yes, no=self.no)  # a question's checks (a YAML boolean named)
        if self.goal is not None and (not isinstance(self.goal, str) or not self.goal.strip()):
            raise FieldError(
                "goal", f"must say what progress is toward (e.g. 'the robot stands up'), got {self.goal!r}"
            )

    @classmethod
    def of(cls, value: Any, name: str = "preference") -> PreferenceSpec | None:
        """``value`` as a preference spec: a PreferenceSpec, a mapping of its fields (``{}``: every default), or None;
        errors name ``name.field``."""
        if value is None or isinstance(value, PreferenceSpec):
            return value
        if not isinstance(value, dict):
            raise FieldError(name, f"must be a mapping such as {{goal: 'the robot stands up'}}, got {value!r}")
        fields = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise FieldError(f"{name}.{unknown[0]}", f"unknown field; a preference has {', '.join(fields)}")
        try:
            return cls(**value)
        except FieldError as exc:
            raise FieldError(f"{name}.{exc.field}", exc.reason) from None

    def question_about(self, goal: str) -> str:
        """The question asked of each pair, about ``goal`` (this spec's own where it sets one)."""
        return self.question.replace("{goal}", str(self.goal or goal).strip())

    def describe(self) -> str:
        return (
            f"a reward network ({self.members} CNNs on {self.net_size} px frames) trained every {self.label_every} "
            f"steps on {self.pairs} new pairs labelled by the judge ({self.updates} minibatches of {self.batch_size}); "
            f"a replay of {self.replay} frames, {self.labels} labels kept"
        )
