"""RewardModelSpec: everything that picks a reward model, passed whole.

As open_clip passes its ``PreprocessCfg``, the package passes one frozen spec from the
VecEnv, the training config and the export command down to :func:`load_reward_model`,
instead of spelling the same dozen arguments out in each signature.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from vlmrm_fast.checks import positive_int, seed_value
from vlmrm_fast.reward.tasks import GoalBaselineTask, Task, as_reward_tasks, normalize_prompts


@dataclasses.dataclass(frozen=True)
class RewardModelSpec:
    """A CLIP reward model: which weights, which prompts (one goal-baseline task, or ``tasks``),
    where and how the image tower runs. ``encoder_options`` go to the backend (e.g.
    ``compile_mode``, ``attention``, ``engine_cache_dir``; see ``encoders.make_image_encoder``)."""

    model: str
    pretrained: str | None = None
    checkpoint: str | None = None
    target_prompts: tuple[str, ...] | None = None
    baseline_prompts: tuple[str, ...] = ()
    alpha: float = 0.0
    tasks: tuple[Any, ...] | None = None
    device: Any = "auto"
    backend: str = "auto"
    precision: str = "auto"
    batch_size: int | None = None
    cache_dir: str | None = None
    seed: int = 0
    resize_mode: str | None = None
    encoder_options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(
                f"model must be a model name such as 'ViT-L-14/laion2b_s32b_b82k' or 'vlmrm-tiny', got {self.model!r}"
            )
        if self.target_prompts is not None:
            object.__setattr__(self, "target_prompts", normalize_prompts(self.target_prompts, "target_prompts"))
        object.__setattr__(
            self, "baseline_prompts", normalize_prompts(self.baseline_prompts, "baseline_prompts", allow_empty=True)
        )
        if self.tasks is not None:
            if self.target_prompts is not None or self.baseline_prompts or self.alpha:
                raise ValueError("give either target_prompts/baseline_prompts/alpha or tasks=[...], not both")
            object.__setattr__(self, "tasks", tuple(as_reward_tasks(self.tasks)))
        object.__setattr__(self, "batch_size", positive_int(self.batch_size, "batch_size", allow_none=True))
        object.__setattr__(self, "seed", seed_value(self.seed, "seed"))
        object.__setattr__(
            self, "encoder_options", dict(self.encoder_options)
        )  # a copy (a spec pickles to other ranks)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> RewardModelSpec:
        """A spec from keyword arguments: the spec's own fields, the rest encoder options."""
        names = {field.name for field in dataclasses.fields(cls)} - {"encoder_options"}
        fields = {key: value for key, value in kwargs.items() if key in names}
        options = {
            **kwargs.get("encoder_options", {}),
            **{k: v for k, v in kwargs.items() if k not in names and k != "encoder_options"},
        }
        return cls(**fields, encoder_options=options)

    def replace(self, **changes: Any) -> RewardModelSpec:
        return dataclasses.replace(self, **changes)

    def reward_tasks(self) -> tuple[tuple[Task, ...], bool]:
        """(the tasks, whether the model returns one column per task) for this spec."""
        if self.tasks is not None:
            return self.tasks, True
        if self.target_prompts is None:
            raise ValueError("target_prompts is required (e.g. 'a humanoid robot kneeling'), or pass tasks=[...]")
        return (GoalBaselineTask(self.target_prompts, self.baseline_prompts, self.alpha),), False
