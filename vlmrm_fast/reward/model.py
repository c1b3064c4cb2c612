"""VLMRewardModel: frames in, CLIP rewards out (the ``clip`` reward family, ``reward/families.py``).

frames (N, H, W, 3) uint8 -> fused preprocess (bit-identical to open_clip's
transform) -> image tower through an encoder backend -> fused reward kernel for
K criteria -> rewards (N,) or (N, K), on the model's device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from vlmrm_fast.checks import FieldError
from vlmrm_fast.encoders import make_image_encoder
from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec, as_frame_tensor
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.models.clip import LoadedClip, check_prompt_lengths, load_clip
from vlmrm_fast.progress import progress_iter
from vlmrm_fast.reward.formulas import normalize
from vlmrm_fast.reward.frame_model import FrameRewardModel
from vlmrm_fast.reward.head import RewardHead
from vlmrm_fast.reward.kinds import (
    CRITERION_KINDS,
    Criterion,
    QuestionCriterion,
    as_criteria,
    normalize_prompts,
    unique_prompts,
)
from vlmrm_fast.reward.protocol import FRAME_NEEDS, RewardNeeds
from vlmrm_fast.reward.schedule import EVERY_STEP, ScoreSchedule
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.runtime.device import resolve_device
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer

DEFAULT_CHUNK = 256


class VLMRewardModel(FrameRewardModel):
    """A CLIP model scoring frames against one or several reward criteria.

    Everything above ``reward/`` uses it through :class:`~vlmrm_fast.reward.protocol.RewardModel`; it also
    reads embeddings (``embed_images``, ``embed_text``, ``reward_from_embeddings``), swaps criteria
    (``set_criteria``) and scores frames in memory (``model(frames)``)."""

    def __init__(
        self,
        clip: LoadedClip,
        criteria: Sequence[Criterion],
        *,
        device: torch.device,
        multi_criteria: bool = False,
        backend: str = "auto",
        precision: str = "auto",
        batch_size: int | None = None,
        schedule: ScoreSchedule = EVERY_STEP,
        **encoder_options: Any,
    ):
        self.clip = clip
        self.schedule = schedule
        self.device = torch.device(device)
        self.multi_criteria = multi_criteria
        self._text_cache: dict[str, torch.Tensor] = {}
        criteria = clip_criteria(criteria)
        self._warm_text_cache(unique_prompts(criteria))  # fp32 text tower, before the encoder casts the visual one
        self.encoder = make_image_encoder(
            clip, backend, device=self.device, precision=precision, batch_size=batch_size, **encoder_options
        )
        self.chunk_size = self.encoder.batch_size or batch_size or DEFAULT_CHUNK
        self.preprocessor = FramePreprocessor(clip.preprocess, self.device, self.encoder.input_dtype)
        self.head = RewardHead(criteria, self._text_cache.__getitem__, clip.logit_scale, self.device)

    # ------------------------------------------------------------------ the family
    @classmethod
    def from_spec(cls, spec: RewardModelSpec) -> VLMRewardModel:
        """The CLIP reward model of ``spec``."""
        criteria, multi = spec.reward_criteria()
        resolved = resolve_device(spec.device)
        clip = load_clip(
            spec.model,
            spec.pretrained,
            checkpoint=spec.checkpoint,
            device=resolved,
            cache_dir=spec.cache_dir,
            seed=spec.seed,
            tokenizer=spec.tokenizer,
        )
        if spec.resize_mode is not None:
            clip.preprocess = clip.preprocess.with_resize_mode(spec.resize_mode)
        return cls(
            clip,
            criteria,
            device=resolved,
            multi_criteria=multi,
            backend=spec.backend,
            precision=spec.precision,
            batch_size=spec.batch_size,
            schedule=spec.schedule,
            **spec.encoder_options,
        )

    @classmethod
    def check_spec(cls, spec: RewardModelSpec) -> None:
        """Nothing beyond the spec's own checks: every value they accept is a CLIP's."""

    @classmethod
    def needs_of(cls, spec: RewardModelSpec) -> RewardNeeds:
        return FRAME_NEEDS

    @classmethod
    def require_weights(cls, spec: RewardModelSpec) -> None:
        from vlmrm_fast.models import require_weights

        if spec.checkpoint is None:  # a checkpoint file is its weights
            require_weights(spec.model, spec.pretrained, cache_dir=spec.cache_dir)

    @classmethod
    def criterion_kinds_of(cls) -> tuple[str, ...]:
        """The kinds scored from an image embedding (every kind with a formula)."""
        return tuple(name for name, kind in CRITERION_KINDS.items() if kind.formula is not None)

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return self.clip.model_id

    @property
    def random_init(self) -> bool:
        return self.clip.weights.startswith("random init")

    @property
    def criterion_kinds(self) -> tuple[str, ...]:
        return self.criterion_kinds_of()

    def parameter_count(self) -> int:
        """Parameters of the image and text towers."""
        self._check_open()
        return int(sum(p.numel() for p in self.clip.model.parameters()))

    @property
    def criteria(self) -> tuple[Criterion, ...]:
        return self.head.criteria

    @property
    def embed_dim(self) -> int:
        return self.clip.embed_dim

    @property
    def image_size(self) -> int:
        return self.clip.preprocess.size

    @property
    def preprocess_spec(self) -> PreprocessSpec:
        return self.clip.preprocess

    @property
    def logit_scale(self) -> float:
        return self.clip.logit_scale

    def __repr__(self) -> str:
        names = ", ".join(repr(t.name) for t in self.criteria)
        return (
            f"VLMRewardModel({self.clip.model_id}, weights={self.clip.weights}, encoder={self.encoder.describe()}, "
            f"criteria=[{names}])"
        )

    # ------------------------------------------------------------------- text side
    @torch.inference_mode()
    def embed_text(self, prompts: str | Iterable[str]) -> torch.Tensor:
        """Normalized text embeddings (K, D) float32 on the model's device."""
        prompts = normalize_prompts(prompts, "prompts")
        self._warm_text_cache(prompts)
        return torch.stack([self._text_cache[p] for p in prompts])

    def _check_open(self) -> None:
        if self.clip.model is None:
            raise RuntimeError(
                f"this reward model ({self.clip.model_id}) was closed: close() released its weights, so it scores no "
                f"more frames; load it again (vlmrm_fast.load_reward_model) to score"
            )

    def _warm_text_cache(self, prompts: Sequence[str]) -> None:
        missing = [p for p in prompts if p not in self._text_cache]
        if not missing:
            return
        self._check_open()
        check_prompt_lengths(self.clip.tokenizer, missing)
        with torch.inference_mode():
            tokens = self.clip.tokenizer(missing).to(self.device)
            text = self.clip.model.encode_text(tokens).float()
            for p, e in zip(missing, normalize(text)):
                self._text_cache[p] = e

    def set_criteria(self, criteria: Iterable[Any], *, multi_criteria: bool = True) -> None:
        """Replaces the reward criteria; on a bad criterion nothing changes."""
        criteria = clip_criteria(criteria)
        self._warm_text_cache(unique_prompts(criteria))
        self.head = RewardHead(criteria, self._text_cache.__getitem__, self.logit_scale, self.device)
        self.multi_criteria = multi_criteria

    # ------------------------------------------------------------------ image side
    @torch.inference_mode()
    def embed_images(self, frames: Any) -> torch.Tensor:
        """uint8 frames (N, H, W, 3), numpy or torch, any size -> normalized (N, D) float32."""
        frames = as_frame_tensor(frames)
        return normalize(self._raw_image_embeddings(frames))

    def _raw_image_embeddings(self, frames: torch.Tensor) -> torch.Tensor:
        """Preprocess and encode, one encoder-sized chunk of frames at a time."""
        self._check_open()
        return self._in_chunks(frames, lambda chunk: self.encoder.encode_rows(self.preprocessor(chunk)))

    def _in_chunks(self, batch: torch.Tensor, fn) -> torch.Tensor:
        outs = [fn(batch[start : start + self.chunk_size]) for start in range(0, batch.shape[0], self.chunk_size)]
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    # ---------------------------------------------------------------------- reward
    def _shape(self, rewards: torch.Tensor) -> torch.Tensor:
        return rewards if self.multi_criteria else rewards[:, 0]

    @torch.inference_mode()
    def reward_from_embeddings(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Image embeddings (N, D) (normalized or not) -> rewards (N,), or (N, K) with several criteria."""
        if not isinstance(embeddings, torch.Tensor):
            embeddings = torch.as_tensor(embeddings)
        return self._shape(self.head(embeddings))

    def pixel_buffer(self, num_frames: int) -> torch.Tensor:
        """An uninitialized encoder input (num_frames, 3, S, S) on the model's device."""
        size = self.image_size
        return torch.empty((num_frames, 3, size, size), dtype=self.preprocessor.dtype, device=self.device)

    @torch.inference_mode()
    def preprocess(
        self, view: FrameView, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """The frames of a :class:`~vlmrm_fast.frames.views.FrameView` -> encoder input (N, 3, S, S)."""
        self._check_open()
        with timer.stage("preprocess"):
            return self.preprocessor.run(view, out)

    @torch.inference_mode()
    def score_pixels(
        self, pixels: torch.Tensor, out: torch.Tensor | None = None, timer: StageTimer = NULL_TIMER
    ) -> torch.Tensor:
        """Encoder input (N, 3, S, S) -> rewards (N,), or (N, K) with several criteria (into ``out``)."""
        self._check_open()
        with timer.stage("encode"):
            embeddings = self._in_chunks(pixels, self.encoder.encode_rows)
        with timer.stage("reward"):
            rewards = self._shape(self.head(embeddings))
            if out is None:
                return rewards
            out.copy_(rewards)
            return out

    @torch.inference_mode()
    def __call__(self, frames: Any) -> torch.Tensor:
        """uint8 frames (N, H, W, 3) -> rewards (N,) (or (N, K) when built with ``criteria=``)."""
        return self._shape(self.head(self._raw_image_embeddings(as_frame_tensor(frames))))

    @torch.inference_mode()
    def _frame_rewards(self, frames: torch.Tensor, criteria: Sequence[Any] | None, progress: bool) -> torch.Tensor:
        """Every frame encoded once, in batches of ``chunk_size``, then scored for ``criteria`` (a head of theirs on
        the same text cache: the model's own criteria stay)."""
        self._check_open()
        head = self.head
        if criteria is not None:
            criteria = clip_criteria(criteria)
            self._warm_text_cache(unique_prompts(criteria))
            head = RewardHead(criteria, self._text_cache.__getitem__, self.logit_scale, self.device)
        batches = progress_iter(
            range(0, frames.shape[0], self.chunk_size), desc="encode", unit="batch", enabled=progress
        )
        embeddings = [
            self.encoder.encode_rows(self.preprocessor(frames[start : start + self.chunk_size])) for start in batches
        ]
        return head(torch.cat(embeddings) if len(embeddings) > 1 else embeddings[0])

    def close(self) -> None:
        """Releases the encoder's graphs or engine, and the CLIP weights and tokenizer (freed unless
        shared): the model scores no more frames; its spec and prompts still read."""
        self.encoder.close()
        self.clip = dataclasses.replace(self.clip, model=None, tokenizer=None)


def clip_criteria(criteria: Iterable[Any]) -> tuple[Criterion, ...]:
    """``criteria`` as CLIP's reward criteria; a question criterion is refused with the fix."""
    criteria = as_criteria(criteria)
    for i, criterion in enumerate(criteria):
        if isinstance(criterion, QuestionCriterion):
            raise FieldError(
                f"criteria[{i}]",
                f"{criterion.name!r} is a question criterion: a CLIP model gives no answers to read; ask it of a generative VLM "
                "judge (model='Qwen/Qwen2-VL-2B-Instruct', docs/judge.md)",
            )
    return criteria
