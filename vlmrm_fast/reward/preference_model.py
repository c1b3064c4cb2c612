"""The ``preference`` reward family: RL-VLM-F's reward learned online from a judge's preferences between two frames,
as a :class:`~vlmrm_fast.reward.protocol.RewardModel` (``reward/families.py``).

A judge's spec with a ``preference`` (``reward/preference_spec.py``) loads a :class:`PreferenceRewardModel`: the
judge as a :class:`~vlmrm_fast.reward.preference.PreferenceLabeler` and a
:class:`~vlmrm_fast.reward.preference.PreferenceReward` (the replay, the labels, the networks). In the env stack its
per-step scorer (:class:`PreferenceStepScorer`) puts each stepping env's frame, at the judge's input size, into the
replay, gives the due envs the network's reward, and after the step's last range counts the step (every
``label_every`` steps: a round of labels and training). Every frame enters the replay whatever ``score_every`` says;
only the network's forward is left to the due envs.

What it asks of a stack (:data:`PREFERENCE_NEEDS`): rewards as the envs step (it learns from their frames; episode
batches, ``rl.episode_batch``, are refused), and one process (the network learns from every env's frames: torchrun's
ranks would each learn a network of their own envs, so a run is refused there). Frames in memory
(``score_frames``: evaluation, a run's videos) get the network's reward as it stands: a loaded model's network is
untrained until it has learned or its state is restored (``load_learned``, a checkpoint's learned reward state).

Its learned state (networks, optimizer, labels, replay, generator, counts) is written with each checkpoint of a
training run (:class:`~vlmrm_fast.reward.protocol.LearnsOnline`), and a resume restores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np
import torch

from vlmrm_fast.checks import FieldError
from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.reward.judge import DEFAULT_IMAGE_SIZE, JudgeRewardModel, load_spec_judge
from vlmrm_fast.reward.kinds import GoalBaselineCriterion, QuestionCriterion
from vlmrm_fast.reward.preference import PreferenceLabeler, PreferenceReward
from vlmrm_fast.reward.preference_spec import PreferenceSpec
from vlmrm_fast.reward.protocol import Need, RewardNeeds
from vlmrm_fast.reward.schedule import EVERY_STEP, ScoreSchedule, StepPlan
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer

#: What a learned preference reward asks of a stack.
PREFERENCE_NEEDS = RewardNeeds(
    scored_as_it_steps="a learned preference reward learns from each step's frames as the envs step",
    one_process=Need(
        "preference",
        "a learned preference reward trains one network on the frames of every env, and torchrun's ranks would each "
        "train one of their own envs' frames",
        "run it in one process (vlmrm-fast train without torchrun), with as many envs as the device holds",
    ),
)

#: The name of a learned preference reward's one criterion (its column in infos and logs).
CRITERION_NAME = "preference"


class PreferenceStepScorer:
    """A learned preference reward scoring a stack's steps (``reward.protocol.StepScorer``; see the module
    docstring)."""

    episode_ends_only = False

    def __init__(self, learner: PreferenceReward, num_envs: int):
        self.learner = learner
        self.num_envs = int(num_envs)
        self._plan: StepPlan | None = None

    def begin(self, plan: StepPlan) -> None:
        self._plan = plan

    def needs_frames(self, rows: slice) -> bool:
        assert self._plan is not None, "begin() plans the step first"
        return bool(self._plan.stepping[rows].any())

    def submit(self, pixels: torch.Tensor, rows: slice, out: torch.Tensor, timer: StageTimer = NULL_TIMER) -> None:
        plan = self._plan
        assert plan is not None, "begin() plans the step first"
        stepping = np.flatnonzero(plan.stepping[rows])
        if stepping.size:
            every = stepping.size == rows.stop - rows.start
            images = pixels if every else pixels.index_select(0, torch.as_tensor(stepping, device=pixels.device))
            due = plan.due[rows][stepping]
            with timer.stage("encode"):
                self.learner.remember(images)
                if due.any():
                    scored = images if due.all() else images.index_select(0, _index(np.flatnonzero(due), images))
                    rewards = self.learner.rewards_of_images(scored).to(out.dtype)
                    if every and due.all():
                        out.copy_(rewards)
                    else:
                        out.index_copy_(0, _index(stepping[due], out), rewards)
        if rows.stop == self.num_envs:  # the step's last range: the step is whole
            with timer.stage("learn"):
                self.learner.end_step()


def _index(rows: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(rows, dtype=torch.long, device=like.device)


class PreferenceRewardModel:
    """A reward learned online from a judge's preferences between two frames (see the module docstring)."""

    def __init__(
        self,
        labeler: PreferenceLabeler,
        preference: PreferenceSpec,
        *,
        seed: int = 0,
        schedule: ScoreSchedule = EVERY_STEP,
    ):
        self.labeler = labeler
        self.preference = preference
        self.schedule = schedule
        self.learner = PreferenceReward(labeler, schedule=preference.schedule, seed=seed)
        self.chunk_size = labeler.chunk_size
        self._judge_parameters = labeler.prompts.parameter_count()  # counted while the judge is loaded
        self._criteria = (
            QuestionCriterion(
                labeler.question, score="log_odds", yes=preference.yes, no=preference.no, name=CRITERION_NAME
            ),
        )

    # ------------------------------------------------------------------ the family
    @classmethod
    def from_spec(cls, spec: RewardModelSpec) -> PreferenceRewardModel:
        """The judge of ``spec`` as a labeler of pairs, and the learner of ``spec.preference``."""
        preference = spec.preference
        assert preference is not None  # the family claims a spec with a preference
        goal = goal_of(spec)  # before the weights load: a missing goal fails in a moment
        judge, device, precision = load_spec_judge(spec)
        check_two_images(judge)
        try:
            labeler = PreferenceLabeler(
                judge,
                goal,
                device=device,
                question=preference.question,
                yes=preference.yes,
                no=preference.no,
                batch_size=spec.batch_size,
                image_size=spec.image_size or DEFAULT_IMAGE_SIZE,
                precision=precision.name,
            )
        except FieldError as exc:
            if exc.field in ("goal", "question", "yes", "no"):  # the preference's own fields
                raise FieldError(f"preference.{exc.field}", exc.reason) from None
            raise
        return cls(labeler, preference, seed=spec.seed, schedule=spec.schedule)

    @classmethod
    def check_spec(cls, spec: RewardModelSpec) -> None:
        """Every judge's checks, and what a preference asks: its own question (no criteria), one goal, the frames
        before the question."""
        JudgeRewardModel.check_spec(spec)
        if spec.criteria is not None:
            raise FieldError(
                "criteria",
                "a learned preference reward asks its own question of two frames (preference.question, about "
                "preference.goal): leave criteria out and give preference.goal",
            )
        preference = spec.preference
        assert preference is not None
        targets = spec.target_prompts
        if preference.goal is None and targets is not None and len(targets) != 1:
            raise FieldError(
                "preference.goal",
                f"is left to the target prompt, and there are {len(targets)} ({', '.join(map(repr, targets))}): "
                "give preference.goal (what progress is toward), or one target prompt",
            )
        if spec.prompt_order == "question_first":
            raise FieldError(
                "prompt_order",
                "question_first is a single frame's cached question; a preference shows two frames, then asks which "
                "shows more progress (image_first): leave prompt_order out",
            )

    @classmethod
    def needs_of(cls, spec: RewardModelSpec) -> RewardNeeds:
        return PREFERENCE_NEEDS

    @classmethod
    def require_weights(cls, spec: RewardModelSpec) -> None:
        JudgeRewardModel.require_weights(spec)

    @classmethod
    def criterion_kinds_of(cls) -> tuple[str, ...]:
        """A question (of two frames): evaluation asks it about the first target prompt, as of a judge."""
        return ("question",)

    # ------------------------------------------------------------------ what it is
    @property
    def name(self) -> str:
        return str(self.labeler.prompts.name)

    @property
    def random_init(self) -> bool:
        """Whether the judge's weights are random (its labels, and so the network's rewards, are noise)."""
        return bool(self.labeler.prompts.random_init)

    def parameter_count(self) -> int:
        """The judge's parameters and the reward networks'."""
        return int(self._judge_parameters + sum(p.numel() for p in self.learner.net.parameters()))

    @property
    def needs(self) -> RewardNeeds:
        return PREFERENCE_NEEDS

    @property
    def criterion_kinds(self) -> tuple[str, ...]:
        return self.criterion_kinds_of()

    @property
    def device(self) -> torch.device:
        return torch.device(self.labeler.device)

    @property
    def criteria(self) -> tuple[QuestionCriterion, ...]:
        return self._criteria

    @property
    def multi_criteria(self) -> bool:
        return False

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.labeler.image_size)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"PreferenceRewardModel({self.name}, {self.preference.describe()}, asking {self.labeler.question!r})"

    # ------------------------------------------------------------------ a stack's steps
    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        """uint8 frames (num_frames, 3, h, w) at the judge's input size: what the replay keeps."""
        return torch.empty((num_frames, 3, *self.image_size), dtype=torch.uint8, device=self.device)

    @torch.inference_mode()
    def preprocess(self, view: Any, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER) -> torch.Tensor:
        """Lent frames -> uint8 (N, 3, h, w) at the judge's input size, on its device (into ``out``)."""
        with timer.stage("preprocess"):
            images = self.learner.images_of(view.tensor() if isinstance(view, FrameView) else as_frame_tensor(view))
            return images if out is None else out.copy_(images)

    def step_scorer(self, num_envs: int, episode_length: int | None = None) -> PreferenceStepScorer:
        """The learner's feeding by a stack of ``num_envs`` envs (every stack built on this model feeds its one
        learner); a replay smaller than a step's frames is refused."""
        replay = self.learner.schedule.replay
        if replay < num_envs:
            raise FieldError(
                "preference.replay",
                f"holds {replay} frames, fewer than a step of {num_envs} envs gives it: give at least {num_envs}",
            )
        return PreferenceStepScorer(self.learner, num_envs)

    # ------------------------------------------------------------------ frames in memory
    def score_frames(
        self,
        frames: Any,
        episodes: Sequence[Any] | None = None,
        criteria: Sequence[Any] | None = None,
        *,
        window_size: int | None = None,
        window_step: int = 1,
        progress: bool = False,
    ) -> torch.Tensor:
        """The network's rewards (N, 1) float32 of uint8 frames (N, H, W, 3), as the stack gives them (through the
        judge's input size). A learned reward has one column, whatever single question it is asked about (evaluation
        asks about the first target prompt): what it learned was asked about its goal; several criteria are
        refused."""
        if criteria is not None and len(list(criteria)) > 1:
            raise ValueError(
                f"a learned preference reward gives one reward, its network's (learned from preferences about "
                f"{self.labeler.question!r}); it cannot score {len(list(criteria))} criteria: ask one"
            )
        tensor = as_frame_tensor(frames)
        return self.learner.rewards_of(tensor).float()[:, None]

    # ------------------------------------------------------------------ learned state
    def save_learned(self, file: BinaryIO) -> None:
        """The learner's state (networks, optimizer, labels, replay, generator, counts) into ``file``."""
        torch.save(self.learner.state_dict(), file)

    def load_learned(self, file: BinaryIO) -> None:
        """Restores :meth:`save_learned`'s state (one of other preference settings is refused in one line)."""
        self.learner.load_state_dict(torch.load(file, weights_only=True))

    def close(self) -> None:
        """Releases the judge's weights: no more labels (the network still scores)."""
        self.labeler.prompts.close()


def goal_of(spec: RewardModelSpec) -> str:
    """What ``spec``'s preference is about: its ``goal``, else the spec's one target prompt (a task's default)."""
    preference = spec.preference
    assert preference is not None
    if preference.goal is not None:
        return preference.goal
    criteria, _ = spec.reward_criteria() if spec.target_prompts is not None else ((), False)
    if len(criteria) == 1 and isinstance(criteria[0], GoalBaselineCriterion) and len(criteria[0].target_prompts) == 1:
        return criteria[0].target_prompts[0]
    raise FieldError(
        "preference.goal",
        "is required: say what progress is toward (e.g. 'the robot stands up'), or give one target prompt (a task's "
        "default is one)",
    )


def check_two_images(judge: Any) -> None:
    """Refuses a judge whose template takes one image per prompt: a preference shows it two frames at once."""
    family = judge.family
    if family.window_input is None:
        raise FieldError(
            "preference",
            f"{judge.model_id} is a {family.name}, whose template takes one image per prompt, and a preference shows "
            "the judge two frames in one prompt: use a judge family that takes several images (Qwen2-VL, Qwen2.5-VL, "
            "Qwen3-VL, SmolVLM, Idefics3)",
        )
