"""PrefixJudge: a question asked of the episode so far at every step (TOPReward's progress), streamed: a step
costs one frame through the vision tower and its tokens and the question's through the language model,
whatever the episode's length.

The prompt at an episode's frame ``t`` is the model's chat template's with the episode's frames up to ``t``
as images, then the question (``prompt_order: image_first``, TOPReward's order; ``question_first`` puts the
question before them and asks one question), read at the answer's first token as every judge is
(``yes_vs_no``, ``log_p_yes``: TOPReward's log P("True") with ``yes: 'True'``, ``log_odds``). Beyond
``max_frames`` frames the prompt holds every ``s``-th frame of the episode from its first, and the newest
(:func:`prefix_frames`): ``s`` is the least power of two that keeps the count at ``max_frames`` or fewer.

Each env keeps, on the device (``reward/episode_memory.py``'s ``PrefixCache``), the keys and values of its
prompt up to its last kept frame: the prompt's start (``head``, the same for every episode, computed once)
and one block per kept frame (the frames at multiples of ``s``), and those frames' vision tokens. A step:

    the new frame -> its vision tokens (the tower, once)
      -> the language model over the new frame's block and the question's tokens only, from the env's cache
         (each env from its own length; the positions those tokens have in the whole prompt)
      -> the answer's logits -> rewards
      -> a kept frame's keys and values stay in the cache (and its vision tokens beside them); the
         question's never do (its slots are overwritten by the next step)

The cache starts again with each episode: a reset sets its length back to the head's, so nothing of the
episode before is attended to. When the count would pass ``max_frames`` (at frame ``(max_frames - 1) s +
1``, then each time it doubles), ``s`` doubles and the env's cache is rebuilt from the vision tokens it kept
(every other kept frame: the language model over about ``max_frames / 2`` blocks, the vision tower not
again): once per doubling of the episode's length, ``max_frames / 2`` frames' language model passes for
``(max_frames - 1) s`` steps.

Its memory per env is the keys and values of ``head + max_frames`` blocks and the longest question in every
layer, and ``max_frames`` frames' vision tokens: stated at start-up (``describe``), and refused beyond the
device's memory before anything is allocated, with the most ``max_frames`` that fit.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.models.judge.adapter import stack_vision, unstack_vision
from vlmrm_fast.models.judge.prompt import (
    DEFAULT_PROMPT_ORDER,
    FrameSequence,
    answer_token,
    check_answer_position,
    frame_sequence,
)
from vlmrm_fast.reward.episode_memory import PrefixCache, kv_bytes_per_token
from vlmrm_fast.reward.episode_scorer import step_arguments
from vlmrm_fast.reward.formulas import answer_reward
from vlmrm_fast.reward.judge import DEFAULT_IMAGE_SIZE, DEFAULT_JUDGE_CHUNK, JudgeRewardModel
from vlmrm_fast.runtime.memory import check_judge_frames_fit, device_available_bytes

logger = logging.getLogger(__name__)


def prefix_frames(step: int, max_frames: int) -> np.ndarray:
    """The frames (0-based, oldest first) of an episode that the prefix judge's prompt holds at frame ``step``:
    all of them up to ``max_frames``; beyond, every ``s``-th frame from the first and the newest, ``s`` the least
    power of two that keeps them at ``max_frames`` or fewer."""
    stride = 1
    while -(-step // stride) + 1 > max_frames:
        stride *= 2
    kept = np.arange(0, step + 1, stride)
    return kept if kept[-1] == step else np.append(kept, step)


@dataclasses.dataclass
class _Episodes:
    """The envs' episodes as far as the cache holds them: the cache, the kept frames' vision tokens, and per env the
    frames drawn this episode, the stride and the number of kept frames (on the host)."""

    cache: PrefixCache
    vision: torch.Tensor  # (num_envs, max_frames, levels, tokens, width)
    drawn: np.ndarray
    stride: np.ndarray
    kept: np.ndarray


class PrefixJudge:
    """The streamed episode-prefix judge of ``num_envs`` envs (see the module docstring): an
    :class:`~vlmrm_fast.reward.episode_scorer.EpisodeScorer`."""

    def __init__(
        self,
        judge: Any,
        criteria: Sequence[Any],
        *,
        num_envs: int,
        max_frames: int = 64,
        device: torch.device,
        multi_criteria: bool = False,
        batch_size: int | None = None,
        image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE,
        precision: str = "fp32",
        prompt_order: str = DEFAULT_PROMPT_ORDER,
    ):
        self.num_envs = positive_int(num_envs, "num_envs")
        self.max_frames = positive_int(max_frames, "max_frames")
        if self.max_frames < 2:
            raise FieldError("max_frames", "must be at least 2: the episode's first frame and its newest")
        self.chunk_size = int(batch_size or DEFAULT_JUDGE_CHUNK)
        # The frame judge: its criteria' checks, the image processor on the device and the vision tower.
        self.frame_judge = JudgeRewardModel(
            judge,
            criteria,
            device=device,
            multi_criteria=multi_criteria,
            image_size=image_size,
            precision=precision,
            prompt_order=prompt_order,
        )
        self.device, self.prompt_order = self.frame_judge.device, prompt_order
        model, processor = self.frame_judge.model, judge.processor
        check_answer_position(processor, prompt_order, judge.model_id)
        if prompt_order != "image_first" and len(self.criteria) > 1:
            raise FieldError(
                "prompt_order",
                "question_first puts each question before the episode's frames, so each would need a cache of its own: "
                "ask one question, or use image_first (the question after the frames, as TOPReward asks)",
            )
        image_token = model.config.image_token_id
        sequences = [
            frame_sequence(processor, self.frame_judge.adapter, image_token, criterion.question, order=prompt_order)
            for criterion in self.criteria
        ]
        self.sequence: FrameSequence = sequences[0]
        self.tails = [s.tail.to(self.device) for s in sequences]
        self.tail_positions = [s.tail_positions for s in sequences]
        lead = judge.family.answer_lead
        tokenizer = processor.tokenizer
        self.answers = [
            (
                answer_token(tokenizer, t.yes, lead, f"criteria[{i}].yes"),
                answer_token(tokenizer, t.no, lead, f"criteria[{i}].no"),
            )
            for i, t in enumerate(self.criteria)
        ]
        head, block = len(self.sequence.head), len(self.sequence.block)
        longest = max(len(t) for t in self.tails)
        self.capacity = head + self.max_frames * block + longest
        text = model.config.get_text_config()
        self._check_context(text, head, block, longest)
        # What an env keeps: the keys and values of the capacity, and max_frames frames' vision tokens.
        blank = torch.zeros((1, 3, *self.frame_judge.image_size), dtype=torch.uint8, device=self.device)
        with torch.inference_mode():
            self._like = self._encode(blank)
        self.vision_shape = tuple(stack_vision(self._like).shape[1:])
        dtype = self.frame_judge.dtype
        self.kv_per_token = kv_bytes_per_token(text, dtype.itemsize)
        self.vision_per_frame = math.prod(self.vision_shape) * dtype.itemsize
        self.bytes_per_env = self.kv_per_token * self.capacity + self.vision_per_frame * self.max_frames
        self._check_memory(text, head, block, longest)
        with torch.inference_mode():
            self.head_kv = self._head_kv()
        self.episodes = self._episodes(self.num_envs)
        logger.info("prefix judge: %s", self.describe())

    # ------------------------------------------------------------------ checks
    def _check_context(self, text: Any, head: int, block: int, tail: int) -> None:
        context = getattr(text, "max_position_embeddings", None)
        length = head + self.max_frames * block + tail
        if context is None or length <= context:
            return
        most = (context - head - tail) // block
        raise FieldError(
            "max_frames",
            f"a prompt of {self.max_frames} frames is {length:,} tokens ({block} per frame at "
            f"{'x'.join(map(str, self.frame_judge.image_size))}), over the model's context of {context:,}: give at most "
            f"{most} (or smaller frames: image_size)",
        )

    def _check_memory(self, text: Any, head: int, block: int, tail: int) -> None:
        each = self.bytes_per_env
        available = device_available_bytes(self.device)
        per_frame = self.kv_per_token * block + self.vision_per_frame
        fixed = self.kv_per_token * (head + tail)
        most = None if available is None else (available // self.num_envs - fixed) // per_frame
        fix = (
            f"the most max_frames that fit is {most}: give at most that, or fewer envs"
            if most is not None and most >= 2
            else "not even 2 frames fit: give fewer envs"
        )
        check_judge_frames_fit(
            "max_frames",
            self.num_envs,
            each,
            f"the streamed prefix caches of {self.num_envs:,} envs at {self.max_frames} frames "
            f"({each / 2**20:,.1f} MiB per env: the keys and values of {self.capacity:,} tokens in "
            f"{text.num_hidden_layers} layers, and {self.max_frames} frames' vision tokens)",
            fix,
            self.device,
        )

    # ------------------------------------------------------------------ properties
    @property
    def criteria(self) -> tuple[Any, ...]:
        return self.frame_judge.criteria

    @property
    def multi_criteria(self) -> bool:
        return self.frame_judge.multi_criteria

    @property
    def nbytes(self) -> int:
        """The memory the envs' caches and kept vision tokens hold on the device."""
        e = self.episodes
        return e.cache.nbytes + e.vision.numel() * e.vision.element_size()

    def describe(self) -> str:
        kv = self.kv_per_token * self.capacity
        vision = self.vision_per_frame * self.max_frames
        return (
            f"{self.frame_judge.judge.model_id}: the episode so far as images (up to {self.max_frames} frames, then every "
            f"2nd, 4th, ... frame and the newest), {self.prompt_order}; per env the keys and values of "
            f"{self.capacity:,} tokens ({kv / 2**20:,.1f} MiB) and {self.max_frames} frames' vision tokens "
            f"({vision / 2**20:,.1f} MiB): {self.num_envs * self.bytes_per_env / 2**30:,.2f} GiB for "
            f"{self.num_envs:,} envs on {self.device}"
        )

    # ------------------------------------------------------------------ the model
    def _encode(self, images: torch.Tensor) -> Any:
        adapter = self.frame_judge.adapter
        return adapter.encode(adapter.pixels(images).to(self.frame_judge.dtype))

    def _resized(self, frames: torch.Tensor) -> torch.Tensor:
        from torchvision.transforms.v2 import functional as tvF

        images = frames.to(self.device, non_blocking=True).permute(0, 3, 1, 2)
        if tuple(images.shape[-2:]) != self.frame_judge.image_size:
            images = tvF.resize(
                images, list(self.frame_judge.image_size), interpolation=tvF.InterpolationMode.BICUBIC, antialias=True
            )
        return images

    def _on_device(self, index: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(index, dtype=torch.long, device=self.device)

    def _positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Positions (P, B, L) as the language model takes them: Qwen's (3, B, L), else the token index (B, L)."""
        return positions.to(self.device) if self.sequence.multimodal_positions else positions[0].to(self.device)

    def _head_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        head = self.sequence.head
        if not len(head):
            return []
        out = self.frame_judge.model(
            input_ids=head[None].to(self.device),
            position_ids=self._positions(self.sequence.head_positions[:, None]),
            use_cache=True,
            logits_to_keep=1,
        )
        return [(layer.keys, layer.values) for layer in out.cache.layers]

    def _episodes(self, num_envs: int) -> _Episodes:
        text = self.frame_judge.model.config.get_text_config()
        dtype = self.frame_judge.dtype
        cache = PrefixCache(num_envs, self.capacity, text, dtype, self.device)
        vision = torch.empty((num_envs, self.max_frames, *self.vision_shape), dtype=dtype, device=self.device)
        zeros = np.zeros(num_envs, dtype=np.int64)
        return _Episodes(cache, vision, zeros.copy(), np.ones(num_envs, dtype=np.int64), zeros.copy())

    def _forward(
        self,
        episodes: _Episodes,
        envs: np.ndarray,
        offsets: np.ndarray,
        ids: torch.Tensor,
        positions: torch.Tensor,
        vision: Any | None,
    ) -> torch.Tensor:
        """One forward of ``ids`` (1, q) for ``envs``, each from slot ``offsets`` of its cache at ``positions`` (P, B,
        q): the logits (B, V) of the last token."""
        model = self.frame_judge.model
        with episodes.cache.step(model, envs, offsets, ids.shape[1]) as cached:
            out = model(
                input_ids=ids.expand(len(envs), -1),
                position_ids=self._positions(positions),
                mm_encoder_outputs=None if vision is None else {"image": vision},
                use_cache=True,
                logits_to_keep=1,
                **cached,
            )
        return out.logits[:, -1]

    # ------------------------------------------------------------------ a step
    @torch.inference_mode()
    def step(self, frames: Any, envs: Any = None, starts: Any = None) -> torch.Tensor:
        """Rewards of the prompts of the episodes so far, ending at ``frames`` (see ``reward/episode_scorer.py``)."""
        tensor, envs, starts = step_arguments(frames, envs, starts, self.num_envs)
        out = []
        for start in range(0, len(envs), self.chunk_size):
            part = slice(start, start + self.chunk_size)
            vision = stack_vision(self._encode(self._resized(tensor[part])))
            out.append(self._step(self.episodes, vision, envs[part], starts[part]))
        rewards = torch.cat(out) if len(out) > 1 else out[0]
        return rewards if self.multi_criteria else rewards[:, 0]

    def _step(self, episodes: _Episodes, vision: torch.Tensor, envs: np.ndarray, starts: np.ndarray) -> torch.Tensor:
        """Rewards (B, criteria) of ``envs``' new frames, whose vision tokens are ``vision`` (B, levels, tokens, width)."""
        sequence, block = self.sequence, len(self.sequence.block)
        starts = starts | (episodes.drawn[envs] == 0)  # an env's first frame starts its first episode
        if starts.any():
            fresh = envs[starts]
            episodes.cache.set_prefix(fresh, self.head_kv)
            episodes.drawn[fresh], episodes.stride[fresh], episodes.kept[fresh] = 0, 1, 0
        frame = episodes.drawn[envs]  # the new frame's index in its episode
        self._restride(episodes, envs, frame)
        kept = episodes.kept[envs]
        index = torch.as_tensor(kept)
        offsets = episodes.cache.length[envs]
        positions = torch.cat([sequence.block_positions_at(index), sequence.tail_positions_after(index + 1)], dim=2)
        ids = torch.cat([sequence.block.to(self.device), self.tails[0]])[None]
        logits = self._forward(episodes, envs, offsets, ids, positions, unstack_vision(vision, self._like))
        rewards = [answer_reward(logits, *self.answers[0], self.criteria[0].score)]
        for k in range(1, len(self.criteria)):  # each other question's tokens after the new frame's block
            tail_positions = self.tail_positions[k][:, None, :] + sequence.advance * index.view(1, -1, 1)
            logits = self._forward(episodes, envs, offsets + block, self.tails[k][None], tail_positions, None)
            rewards.append(answer_reward(logits, *self.answers[k], self.criteria[k].score))
        # A kept frame's block stays in the cache, its vision tokens beside it.
        keep = frame % episodes.stride[envs] == 0
        if keep.any():
            rows, on = envs[keep], self._on_device
            episodes.vision[on(rows), on(kept[keep])] = vision[on(np.flatnonzero(keep))]
            episodes.kept[rows] += 1
            episodes.cache.length[rows] += block
        episodes.drawn[envs] += 1
        return torch.stack(rewards, dim=1)

    def _restride(self, episodes: _Episodes, envs: np.ndarray, frame: np.ndarray) -> None:
        """Doubles the stride of the envs whose prompt would pass ``max_frames`` frames with the new one, keeping every
        other kept frame, and rebuilds their caches from the kept frames' vision tokens."""
        stride = episodes.stride[envs].copy()
        while True:
            over = -(-frame // stride) + 1 > self.max_frames
            if not over.any():
                break
            stride[over] *= 2
        changed = stride != episodes.stride[envs]
        if not changed.any():
            return
        for env, new in zip(envs[changed], stride[changed]):
            factor = int(new // episodes.stride[env])
            count = int(-(-episodes.kept[env] // factor))
            episodes.vision[env, :count] = episodes.vision[env, : episodes.kept[env] : factor].clone()
            episodes.stride[env], episodes.kept[env] = new, count
        rebuilt = envs[changed]
        for count in np.unique(episodes.kept[rebuilt]):
            rows = rebuilt[episodes.kept[rebuilt] == count]
            episodes.cache.set_prefix(rows, self.head_kv)
            if count:
                self._rebuild(episodes, rows, int(count))

    def _rebuild(self, episodes: _Episodes, envs: np.ndarray, count: int) -> None:
        """The cache of ``envs`` (each holding the head) filled with the blocks of their first ``count`` kept frames."""
        sequence = self.sequence
        index = torch.arange(count)
        positions = sequence.block_positions_at(index).reshape(sequence.block_positions.shape[0], 1, -1)
        ids = sequence.block.to(self.device).repeat(count)[None]
        vision = episodes.vision[self._on_device(envs), :count].flatten(0, 1)
        offsets = episodes.cache.length[envs]
        self._forward(
            episodes, envs, offsets, ids, positions.expand(-1, len(envs), -1), unstack_vision(vision, self._like)
        )
        episodes.cache.length[envs] += count * len(sequence.block)

    # ------------------------------------------------------------------ offline
    @torch.inference_mode()
    def score_episode(self, frames: Any) -> torch.Tensor:
        """The rewards (T,) or (T, criteria) of one episode's frames (T, H, W, 3) at each of its steps, as ``step`` gives
        them: each frame through the vision tower once, each step's new block and question through the language
        model from a cache of its own."""
        tensor = as_frame_tensor(frames)
        vision = torch.cat(
            [
                stack_vision(self._encode(self._resized(tensor[start : start + self.chunk_size])))
                for start in range(0, tensor.shape[0], self.chunk_size)
            ]
        )
        episodes = self._episodes(1)
        env = np.zeros(1, dtype=np.int64)
        rewards = [self._step(episodes, vision[t : t + 1], env, np.array([t == 0])) for t in range(tensor.shape[0])]
        out = torch.cat(rewards)
        return out if self.multi_criteria else out[:, 0]

    def cache_frames(self, env: int) -> np.ndarray:
        """The frames of ``env``'s current episode whose blocks its cache holds (0-based, oldest first)."""
        e = self.episodes
        return np.arange(int(e.kept[env])) * int(e.stride[env])

    def close(self) -> None:
        self.frame_judge.close()
        self.head_kv = []
