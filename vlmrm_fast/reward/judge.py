"""JudgeRewardModel: frames in, a generative VLM's answer probabilities out (the ``judge`` reward family,
``reward/families.py``).

A judge asks each frame one or more yes/no questions (:class:`~vlmrm_fast.reward.kinds.QuestionCriterion`)
and reads the reward from the logits of the answer's first token, without generating:

    frames (N, H, W, 3) uint8, where the renderer lent them
      -> resized to the judge's input size, the family's image processor on the device   (preprocess)
      -> the vision tower, once per frame for every question                             (score_pixels)
      -> the language model over the prompt's frame-dependent part, from the cached keys and values of its
         frame-independent start; image first, one pass over the frame's tokens for every question, then
         each question's own tokens; logits at the last position only
      -> the criterion's score of the answer words' logits -> rewards (N,) or (N, K)

The prompt is the model's own chat template's (``models/judge/prompt.py``), the frame before the question
unless ``prompt_order="question_first"``. Its start, before the first image token, is the same for every
frame: its KV cache is computed once per question set (``set_criteria``) and each batch of frames runs from it.
The input size is fixed, so the number of image tokens and the length of every forward are too: no
padding. docs/judge.md has the prompt and what a frame costs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

from vlmrm_fast.checks import FieldError
from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.models.judge.prompt import DEFAULT_PROMPT_ORDER
from vlmrm_fast.progress import progress_iter
from vlmrm_fast.reward.formulas import answer_reward
from vlmrm_fast.reward.frame_model import FrameRewardModel
from vlmrm_fast.reward.kinds import CRITERION_KINDS, GoalBaselineCriterion, QuestionCriterion, as_criteria
from vlmrm_fast.reward.protocol import FRAME_NEEDS, RewardNeeds
from vlmrm_fast.reward.schedule import EVERY_STEP, ScoreSchedule
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.memory import check_judge_frames_fit, device_available_bytes
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer

#: Frames per batch when none is asked for.
DEFAULT_JUDGE_CHUNK = 32
#: The judge's input size when the spec sets none (height, width): 64 image tokens for Qwen2-VL.
DEFAULT_IMAGE_SIZE = (224, 224)


@dataclasses.dataclass
class _Answer:
    """A question criterion made ready: the ids of its answer words, its column of the rewards, and what runs for
    it after its group's pass over the frames (None: that pass ends at its answer)."""

    criterion: QuestionCriterion
    column: int
    yes: int
    no: int
    prompt: torch.Tensor  # (1, L): the whole prompt's token ids, blank frames' image tokens in it
    rest: torch.Tensor | None = None  # (1, R) token ids
    rest_positions: torch.Tensor | None = None  # (3, 1, R) for the Qwen families
    rest_mask: torch.Tensor | None = None  # (1, 1, R, shared + R)


@dataclasses.dataclass
class _Group:
    """Questions whose prompts agree up to the end of the frame's tokens (``prompt.SharedFrames``): the keys
    and values of the frame-independent start (batch 1), then the frame's part, run once per batch."""

    head_kv: list[tuple[torch.Tensor, torch.Tensor]]
    frame: torch.Tensor  # (1, F) token ids
    frame_positions: torch.Tensor | None  # (3, 1, F) for the Qwen families
    frame_mask: torch.Tensor | None  # (1, 1, F, head + F): which positions each token attends to
    answers: list[_Answer]


class JudgeRewardModel(FrameRewardModel):
    """A generative VLM scoring frames with question criteria (see the module docstring); a
    :class:`~vlmrm_fast.reward.protocol.RewardModel`."""

    def __init__(
        self,
        judge: Any,
        criteria: Sequence[Any],
        *,
        device: torch.device,
        multi_criteria: bool = False,
        batch_size: int | None = None,
        image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE,
        precision: str = "fp32",
        schedule: ScoreSchedule = EVERY_STEP,
        prompt_order: str = DEFAULT_PROMPT_ORDER,
        cache_prefix: bool = True,
        frames: int = 1,
        video: bool = False,
    ):
        self.judge = judge
        self.prompt_order = prompt_order
        # A question may be about several frames at once (a window's, or two compared): as images, or as one video.
        self.frames, self.video = int(frames), bool(video)
        self.modality = "video" if video else "image"
        self.cache_prefix = cache_prefix  # False: every frame runs its whole prompt (the same rewards, slower)
        self.schedule = schedule
        self.device = torch.device(device)
        self.precision = precision
        self.chunk_size = int(batch_size or DEFAULT_JUDGE_CHUNK)
        h, w = image_size
        # The prompt's blank frame and the image processor's float32 copy of it, made before anything else.
        check_judge_frames_fit(
            "image_size",
            1,
            h * w * 3 * 5,
            f"a {h} x {w} frame and the image processor's float32 copy of it",
            f"score smaller frames (image_size: {DEFAULT_IMAGE_SIZE[0]} gives Qwen2-VL 64 image tokens)",
        )
        self.adapter = judge.family.adapter(judge.model, judge.processor, tuple(image_size))
        self.multi_criteria = multi_criteria
        self._buffer: torch.Tensor | None = None
        self._tasks: tuple[QuestionCriterion, ...] = ()
        self._groups: list[_Group] = []
        self.set_criteria(criteria, multi_criteria=multi_criteria)

    # ------------------------------------------------------------------ the family
    @classmethod
    def from_spec(cls, spec: RewardModelSpec) -> JudgeRewardModel:
        """The judge of ``spec`` (a judge's name, question criteria or one target prompt; see docs/judge.md)."""
        judge, criteria, options = judge_of_spec(spec)
        return cls(judge, criteria, **options)

    @classmethod
    def check_spec(cls, spec: RewardModelSpec) -> None:
        """A judge's name (question criteria on a CLIP's are refused, naming it), and the values of the CLIP fields
        a judge also takes: ``resize_mode`` squash, ``backend`` torch, ``alpha`` 0."""
        from vlmrm_fast.models.judge.judge_models import check_model_name, is_judge_name

        if not is_judge_name(spec.model):
            from vlmrm_fast.models.clip.names import parse_model_name

            check_model_name(spec.model, spec.cache_dir)  # a name that is neither, named as what it is
            parse_model_name(spec.model, spec.pretrained)  # a CLIP name misspelt is named with its closest match
            raise FieldError(
                "model",
                f"{spec.model!r} is a CLIP model; question criteria need a generative VLM judge, e.g. "
                f"model='Qwen/Qwen2-VL-2B-Instruct' (or 'vlmrm-tiny-qwen2-vl' to try the plumbing)",
            )
        if spec.resize_mode not in (None, "squash"):
            raise FieldError(
                "resize_mode",
                f"{spec.resize_mode!r} is CLIP's; a judge squashes frames to its input size (image_size): use "
                "'squash' or leave it out",
            )
        if spec.alpha:
            raise FieldError("alpha", "is CLIP's goal-baseline projection; a judge has no embedding to project: use 0")
        if spec.backend not in ("auto", "torch"):
            raise FieldError("backend", f"{spec.backend!r} runs CLIP image towers; a judge runs in torch: use 'auto'")

    @classmethod
    def needs_of(cls, spec: RewardModelSpec) -> RewardNeeds:
        return FRAME_NEEDS

    @classmethod
    def require_weights(cls, spec: RewardModelSpec) -> None:
        from vlmrm_fast.models import require_weights

        require_weights(spec.model, cache_dir=spec.cache_dir)

    @classmethod
    def criterion_kinds_of(cls) -> tuple[str, ...]:
        """The kinds read from the answer's logits (every kind without an embedding formula)."""
        return tuple(name for name, kind in CRITERION_KINDS.items() if kind.formula is None)

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return self.judge.model_id

    @property
    def random_init(self) -> bool:
        return self.judge.weights.startswith("random init")

    @property
    def criterion_kinds(self) -> tuple[str, ...]:
        return self.criterion_kinds_of()

    def parameter_count(self) -> int:
        """Parameters of the vision tower and the language model."""
        return int(sum(p.numel() for p in self.model.parameters()))

    @property
    def criteria(self) -> tuple[QuestionCriterion, ...]:
        return self._tasks

    @property
    def model(self) -> Any:
        if self.judge.model is None:
            raise RuntimeError(
                f"this judge ({self.judge.model_id}) was closed: close() released its weights, so it scores no more "
                "frames; load it again (vlmrm_fast.load_reward_model) to score"
            )
        return self.judge.model

    @property
    def image_size(self) -> tuple[int, int]:
        return self.adapter.image_size

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def __repr__(self) -> str:
        names = ", ".join(repr(t.name) for t in self.criteria)
        h, w = self.image_size
        return (
            f"JudgeRewardModel({self.judge.model_id} ({self.judge.family.name}), weights={self.judge.weights}, "
            f"{h}x{w} px, {self.prompt_order}, {self.precision}, criteria=[{names}])"
        )

    # ------------------------------------------------------------------- questions
    @torch.inference_mode()
    def set_criteria(self, criteria: Sequence[Any], *, multi_criteria: bool = True) -> None:
        """Replaces the questions, computing the frame-independent start of their prompts once; on a bad criterion
        nothing changes."""
        from vlmrm_fast.models.judge.prompt import answer_token, check_answer_position, layout_prompt, share_frames

        criteria = judge_criteria(as_criteria(criteria))
        model, processor = self.model, self.judge.processor
        check_answer_position(processor, self.prompt_order, self.judge.model_id)
        config = model.config
        context = getattr(config.get_text_config(), "max_position_embeddings", None)
        lead = self.judge.family.answer_lead
        layouts, answers = [], []
        for i, criterion in enumerate(criteria):
            field = f"criteria[{i}].question"
            layouts.append(
                layout_prompt(
                    processor,
                    self.adapter,
                    config.video_token_id if self.video else config.image_token_id,
                    criterion.question,
                    order=self.prompt_order,
                    frames=self.frames,
                    video=self.video,
                    context=context,
                    field=field,
                )
            )
            yes = answer_token(processor.tokenizer, criterion.yes, lead, f"criteria[{i}].yes")
            no = answer_token(processor.tokenizer, criterion.no, lead, f"criteria[{i}].no")
            answers.append(_Answer(criterion, i, yes, no, layouts[-1].ids))
        groups = [
            self._group(shared, layouts, answers) for shared in share_frames(layouts, cache_head=self.cache_prefix)
        ]
        self._tasks, self._groups, self.multi_criteria = tuple(criteria), groups, multi_criteria
        self.layout = layouts[0]

    def prompt(self, column: int = 0) -> torch.Tensor:
        """The token ids (L,) of criterion ``column``'s whole prompt, as its language model reads it for a frame."""
        return next(a.prompt[0] for g in self._groups for a in g.answers if a.column == column)

    def _group(self, shared: Any, layouts: list[Any], answers: list[_Answer]) -> _Group:
        """A group of questions made ready (``shared``: a ``prompt.SharedFrames``): the head's keys and values,
        the frame's part and each question's rest, on the device."""
        model, device = self.model, self.device
        first = layouts[shared.members[0]]
        head, end = shared.head, shared.shared
        positions = None if first.positions is None else first.positions.to(device)
        head_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        if head:
            out = model(
                input_ids=first.ids[:, :head].to(device),
                position_ids=None if positions is None else positions[:, :, :head],
                use_cache=True,
                logits_to_keep=1,
            )
            head_kv = [(layer.keys, layer.values) for layer in out.cache.layers]
        group = _Group(
            head_kv,
            first.ids[:, head:end].to(device),
            None if positions is None else positions[:, :, head:end],
            self._causal_mask(head, end - head),
            [],
        )
        for i in shared.members:
            answer, layout = answers[i], layouts[i]
            if end < layout.length:
                answer.rest = layout.ids[:, end:].to(device)
                answer.rest_positions = None if layout.positions is None else layout.positions[:, :, end:].to(device)
                answer.rest_mask = self._causal_mask(end, layout.length - end)
            group.answers.append(answer)
        return group

    def _causal_mask(self, past: int, new: int) -> torch.Tensor | None:
        """The causal mask of ``new`` tokens after ``past`` cached ones, made once: the language model would build
        it (batch-sized) in every forward. SDPA reads a boolean mask as "attends"; None where nothing is cached
        (the model's own causal mask) or the attention is not SDPA's."""
        if not past or self.model.config.get_text_config()._attn_implementation != "sdpa":
            return None
        mask = torch.ones((new, past + new), dtype=torch.bool, device=self.device)
        return mask.tril(diagonal=past)[None, None]

    # ------------------------------------------------------------------ image side
    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        """An uninitialized pixel input (num_frames, *the family's pixel shape) on the model's device; refused in one
        line when it exceeds the memory there."""
        shape = self.adapter.pixel_shape
        each = math.prod(shape) * self.dtype.itemsize
        check_judge_frames_fit(
            "batch_size",
            num_frames,
            each,
            f"the pixel input of {num_frames:,} frames ({' x '.join(map(str, shape))} values each)",
            f"score at most {max(1, (device_available_bytes(self.device) or each) // each):,} frames at once "
            "(batch_size), or smaller frames (image_size)",
            self.device,
        )
        return torch.empty((num_frames, *shape), dtype=self.dtype, device=self.device)

    @torch.inference_mode()
    def preprocess(
        self, view: FrameView, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """The frames of a :class:`~vlmrm_fast.frames.views.FrameView` -> pixel input, on the device."""
        with timer.stage("preprocess"):
            return self._pixels(view.tensor(), out)

    def _pixels(self, frames: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """uint8 frames (N, H, W, 3) on any device -> pixel input (N, ...) on the model's device (into ``out``)."""
        from torchvision.transforms.v2 import functional as tvF

        images = frames.to(self.device, non_blocking=True).permute(0, 3, 1, 2)
        if tuple(images.shape[-2:]) != self.image_size:
            images = tvF.resize(
                images, list(self.image_size), interpolation=tvF.InterpolationMode.BICUBIC, antialias=True
            )
        pixels = self.adapter.pixels(images, out)
        if out is None:
            return pixels.to(self.dtype)
        return out if pixels is out else out.copy_(pixels)

    # ---------------------------------------------------------------------- reward
    @torch.inference_mode()
    def score_pixels(
        self, pixels: torch.Tensor, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """Pixel input (N, ...) -> rewards (N,), or (N, K) with several criteria (into ``out``)."""
        chunks = []
        for start in range(0, pixels.shape[0], self.chunk_size):
            chunk = pixels[start : start + self.chunk_size]
            with timer.stage("encode"):
                vision = self.adapter.encode(chunk)
            with timer.stage("reward"):
                chunks.append(self.score_vision(vision, chunk.shape[0]))
        rewards = torch.cat(chunks) if len(chunks) > 1 else chunks[0]
        rewards = rewards if self.multi_criteria else rewards[:, 0]
        if out is None:
            return rewards
        out.copy_(rewards)
        return out

    def score_vision(self, vision: Any, n: int) -> torch.Tensor:
        """Every criterion's rewards (n, criteria) of ``n`` prompts whose frames' vision output is ``vision`` (each prompt's
        ``frames`` items one after another: the language model's ``mm_encoder_outputs`` of its modality)."""
        columns: list[torch.Tensor | None] = [None] * len(self._tasks)
        for group in self._groups:
            for answer, reward in self._rewards(group, vision, n):
                columns[answer.column] = reward
        return torch.stack(columns, 1)  # type: ignore[arg-type]

    def _rewards(self, group: _Group, vision: Any, n: int) -> list[tuple[_Answer, torch.Tensor]]:
        """Each question's rewards (n,) of a group, for a batch whose vision output is ``vision``: one pass over
        the frame's tokens from the cached head, then each question's own tokens from that pass's cache."""
        from transformers import DynamicCache

        model = self.model
        cache = None
        if group.head_kv:
            expanded = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in group.head_kv]
            cache = DynamicCache(ddp_cache_data=expanded, config=model.config)
        rests = any(answer.rest is not None for answer in group.answers)
        positions = group.frame_positions
        out = model(
            input_ids=group.frame.expand(n, -1),
            position_ids=None if positions is None else positions.expand(-1, n, -1),
            attention_mask=group.frame_mask,
            cache=cache,
            mm_encoder_outputs={self.modality: vision},
            use_cache=cache is not None or rests,
            logits_to_keep=1,
        )
        if not rests:
            (answer,) = group.answers
            return [(answer, self._score(answer, out.logits[:, -1]))]
        shared = [(layer.keys, layer.values) for layer in out.cache.layers]
        rewards = []
        for answer in group.answers:
            assert answer.rest is not None  # a group of several questions runs each one's rest
            positions = answer.rest_positions
            after = model(
                input_ids=answer.rest.expand(n, -1),
                position_ids=None if positions is None else positions.expand(-1, n, -1),
                attention_mask=answer.rest_mask,
                cache=DynamicCache(ddp_cache_data=shared, config=model.config),  # the shared pass's keys, not copied
                use_cache=True,
                logits_to_keep=1,
            )
            rewards.append((answer, self._score(answer, after.logits[:, -1])))
        return rewards

    @staticmethod
    def _score(answer: _Answer, logits: torch.Tensor) -> torch.Tensor:
        return answer_reward(logits, answer.yes, answer.no, answer.criterion.score)

    @torch.inference_mode()
    def __call__(self, frames: Any) -> torch.Tensor:
        """uint8 frames (N, H, W, 3), numpy or torch -> rewards (N,) (or (N, K) with several criteria)."""
        frames = as_frame_tensor(frames)
        rows = min(self.chunk_size, frames.shape[0])
        if self._buffer is None or self._buffer.shape[0] < rows:  # reused: a fresh one costs its page faults
            self._buffer = None
            self._buffer = self.pixel_buffer(rows)
        outs = []
        for start in range(0, frames.shape[0], self.chunk_size):
            chunk = frames[start : start + self.chunk_size]
            outs.append(self.score_pixels(self._pixels(chunk, self._buffer[: chunk.shape[0]])))
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def _frame_rewards(self, frames: torch.Tensor, criteria: Sequence[Any] | None, progress: bool) -> torch.Tensor:
        """Every frame's rewards for ``criteria`` (its own by default), one column each: the vision tower once per
        frame for all of them; the judge's own questions are restored afterwards."""
        if criteria is None:
            rewards = self._in_batches(frames, progress)
            return rewards if rewards.ndim == 2 else rewards[:, None]
        previous, previous_multi = self.criteria, self.multi_criteria
        self.set_criteria(criteria, multi_criteria=True)
        try:
            return self._in_batches(frames, progress)
        finally:
            self.set_criteria(previous, multi_criteria=previous_multi)

    def _in_batches(self, frames: torch.Tensor, progress: bool) -> torch.Tensor:
        batches = progress_iter(
            range(0, frames.shape[0], self.chunk_size), desc="encode", unit="batch", enabled=progress
        )
        rewards = [self(frames[start : start + self.chunk_size]) for start in batches]
        return torch.cat(rewards) if len(rewards) > 1 else rewards[0]

    def close(self) -> None:
        """Releases the weights and the prefix caches: the judge scores no more frames."""
        self.judge = dataclasses.replace(self.judge, model=None)
        self._buffer = None
        for group in self._groups:
            group.head_kv = []


def load_spec_judge(spec: RewardModelSpec) -> tuple[Any, torch.device, Any]:
    """The judge ``spec`` names, loaded as every family that asks a judge loads it (its device, its precision with
    FP8 where asked, its processor's image options), with that device and precision."""
    from vlmrm_fast.encoders.precision import resolve
    from vlmrm_fast.models.judge.fp8 import convert_judge_to_fp8
    from vlmrm_fast.models.judge.judge_models import load_judge, set_image_options

    device = resolve_device(spec.device)
    precision = resolve(spec.precision, device)
    judge = load_judge(spec.model, device=device, dtype=precision.dtype, cache_dir=spec.cache_dir, seed=spec.seed)
    set_image_options(judge, spec.do_image_splitting, spec.longest_edge)
    if precision.fp8:
        convert_judge_to_fp8(judge.model)
    return judge, device, precision


def judge_of_spec(spec: RewardModelSpec) -> tuple[Any, tuple[QuestionCriterion, ...], dict[str, Any]]:
    """What every judge family loads from a spec: the loaded judge (its weights, processor and family), its question
    criteria (checked before the weights load: a bad criterion fails in a moment) and the keyword arguments a judge
    reward model takes (device, precision, batch, input size, schedule, prompt order, several criteria or one)."""
    criteria, multi = spec.reward_criteria()
    questions = judge_criteria(criteria)
    judge, device, precision = load_spec_judge(spec)
    return (
        judge,
        questions,
        dict(
            device=device,
            multi_criteria=multi,
            batch_size=spec.batch_size,
            image_size=spec.image_size or DEFAULT_IMAGE_SIZE,
            precision=precision.name,
            schedule=spec.schedule,
            prompt_order=spec.prompt_order or DEFAULT_PROMPT_ORDER,
        ),
    )


def judge_criteria(criteria: Sequence[Any]) -> tuple[QuestionCriterion, ...]:
    """``criteria`` as a judge's question criteria: a goal-baseline criterion of one target prompt (an env task's
    default, the training config's ``target_prompts``) asks :meth:`QuestionCriterion.about` it; CLIP's other criteria are
    refused with the fix."""
    out = []
    for i, criterion in enumerate(criteria):
        if isinstance(criterion, QuestionCriterion):
            out.append(criterion)
        elif (
            isinstance(criterion, GoalBaselineCriterion) and criterion.alpha == 0 and len(criterion.target_prompts) == 1
        ):
            name = criterion.name if criterion.name != criterion.target_prompts[0] else None
            out.append(QuestionCriterion.about(criterion.target_prompts[0], name=name))
        elif isinstance(criterion, GoalBaselineCriterion) and criterion.alpha == 0:
            raise FieldError(
                "target_prompts",
                f"a judge asks one question about one target prompt, got {len(criterion.target_prompts)} "
                f"({', '.join(map(repr, criterion.target_prompts))}): keep one, or ask each as a question criterion "
                "(criteria=[{'kind': 'question', 'question': ...}, ...])",
            )
        else:
            raise FieldError(
                f"criteria[{i}]",
                f"a generative VLM judge answers questions; {type(criterion).__name__} {criterion.name!r} is a CLIP reward "
                "(embeddings, alpha, negative prompts). Give question criteria, e.g. criteria=[{'kind': 'question', "
                "'question': 'Is the pole upright?'}], or one target prompt with alpha 0",
            )
    return tuple(out)
