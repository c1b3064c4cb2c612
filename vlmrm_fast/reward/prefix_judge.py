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

It is the ``prefix_judge`` reward family (``reward/families.py``): a judge's spec with a ``prefix``
(``prefix: {max_frames: 64}``); in the env stack its per-step scorer keeps the caches of the stack's envs
(``reward/episode_scorer.py``: one per stack, so under torchrun each rank keeps its own envs'). With
``score_every: n`` a step that is not due runs no question: a frame the cache keeps runs its block alone, and
one it does not keep runs nothing (not even the vision tower); the reward at a due step is the one
``score_every: 1`` gives there.
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
from vlmrm_fast.reward.episode_scorer import DEFAULT_MAX_FRAMES, EpisodeJudgeModel, step_arguments
from vlmrm_fast.reward.formulas import answer_reward
from vlmrm_fast.reward.judge import DEFAULT_IMAGE_SIZE, DEFAULT_JUDGE_CHUNK, JudgeRewardModel, judge_of_spec
from vlmrm_fast.reward.protocol import RewardNeeds
from vlmrm_fast.reward.schedule import EVERY_STEP, ScoreSchedule
from vlmrm_fast.reward.spec import RewardModelSpec
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


#: What a prefix judge asks of a stack.
PREFIX_NEEDS = RewardNeeds(
    episodes=True,
    terminal_state="the prefix judge would then put that frame among the ended episode's",
    scored_as_it_steps="the prefix judge keeps each env's episode so far as the envs step",
)


class PrefixJudge(EpisodeJudgeModel):
    """The streamed episode-prefix judge (see the module docstring): the ``prefix_judge`` family's
    :class:`~vlmrm_fast.reward.protocol.RewardModel`, and with ``num_envs`` an
    :class:`~vlmrm_fast.reward.episode_scorer.EpisodeScorer` of that many envs (``step``)."""

    what = "the prefix judge"

    def __init__(
        self,
        judge: Any,
        criteria: Sequence[Any],
        *,
        num_envs: int | None = None,
        max_frames: int = DEFAULT_MAX_FRAMES,
        device: torch.device,
        multi_criteria: bool = False,
        batch_size: int | None = None,
        image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE,
        precision: str = "fp32",
        prompt_order: str = DEFAULT_PROMPT_ORDER,
        schedule: ScoreSchedule = EVERY_STEP,
    ):
        self.max_frames = positive_int(max_frames, "prefix.max_frames")
        if self.max_frames < 2:
            raise FieldError("prefix.max_frames", "must be at least 2: the episode's first frame and its newest")
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
            schedule=schedule,
        )
        self.prompt_order = prompt_order
        check_answer_position(judge.processor, prompt_order, judge.model_id)
        self._prompts()
        # What an env keeps: the keys and values of the capacity, and max_frames frames' vision tokens.
        blank = torch.zeros((1, 3, *self.frame_judge.image_size), dtype=torch.uint8, device=self.device)
        with torch.inference_mode():
            self._like = self._encode(blank)
        self.vision_shape = tuple(stack_vision(self._like).shape[1:])
        dtype = self.frame_judge.dtype
        text = self.frame_judge.model.config.get_text_config()
        self.kv_per_token = kv_bytes_per_token(text, dtype.itemsize)
        self.vision_per_frame = math.prod(self.vision_shape) * dtype.itemsize
        self.num_envs = 0
        self.episodes: _Episodes | None = None  # the caches ``step`` feeds (``num_envs`` given)
        if num_envs is not None:
            self.episodes = self.new_state(positive_int(num_envs, "num_envs"))

    # ------------------------------------------------------------------ the family
    @classmethod
    def from_spec(cls, spec: RewardModelSpec) -> PrefixJudge:
        prefix = spec.prefix
        assert prefix is not None  # the family claims a judge's spec with a prefix
        judge, criteria, options = judge_of_spec(spec)
        return cls(judge, criteria, max_frames=prefix.max_frames, **options)

    @classmethod
    def needs_of(cls, spec: RewardModelSpec) -> RewardNeeds:
        return PREFIX_NEEDS

    @property
    def needs(self) -> RewardNeeds:
        return PREFIX_NEEDS

    # ------------------------------------------------------------------ its questions
    def _ask(self, criteria: Sequence[Any], multi_criteria: bool) -> None:
        self.frame_judge.set_criteria(criteria, multi_criteria=multi_criteria)
        self._prompts()

    @torch.inference_mode()
    def _prompts(self) -> None:
        """The prompt of the frame judge's questions laid out as head, a block per frame and each question's tail;
        the answers' tokens, the cache's capacity and the head's keys and values."""
        model, processor = self.frame_judge.model, self.frame_judge.judge.processor
        if self.prompt_order != "image_first" and len(self.criteria) > 1:
            raise FieldError(
                "prompt_order",
                "question_first puts each question before the episode's frames, so each would need a cache of its own: "
                "ask one question, or use image_first (the question after the frames, as TOPReward asks)",
            )
        image_token = model.config.image_token_id
        sequences = [
            frame_sequence(
                processor, self.frame_judge.adapter, image_token, criterion.question, order=self.prompt_order
            )
            for criterion in self.criteria
        ]
        self.sequence: FrameSequence = sequences[0]
        self.tails = [s.tail.to(self.device) for s in sequences]
        self.tail_positions = [s.tail_positions for s in sequences]
        lead = self.frame_judge.judge.family.answer_lead
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
        self._check_context(model.config.get_text_config(), head, block, longest)
        self.head_kv = self._head_kv()

    def new_state(self, num_envs: int) -> _Episodes:
        """The caches of ``num_envs`` envs, refused in one line beyond the device's memory (with the most
        ``max_frames`` that fit) before they are allocated."""
        text = self.frame_judge.model.config.get_text_config()
        head, block = len(self.sequence.head), len(self.sequence.block)
        self._check_memory(num_envs, text, head, block, max(len(t) for t in self.tails))
        state = self._episodes(num_envs)
        self.num_envs = num_envs
        logger.info("prefix judge: %s", self.describe())
        return state

    # ------------------------------------------------------------------ checks
    @property
    def bytes_per_env(self) -> int:
        """The memory an env's cache and kept vision tokens hold."""
        return self.kv_per_token * self.capacity + self.vision_per_frame * self.max_frames

    def _check_context(self, text: Any, head: int, block: int, tail: int) -> None:
        context = getattr(text, "max_position_embeddings", None)
        length = head + self.max_frames * block + tail
        if context is None or length <= context:
            return
        most = (context - head - tail) // block
        raise FieldError(
            "prefix.max_frames",
            f"a prompt of {self.max_frames} frames is {length:,} tokens ({block} per frame at "
            f"{'x'.join(map(str, self.frame_judge.image_size))}), over the model's context of {context:,}: give at most "
            f"{most} (or smaller frames: image_size)",
        )

    def _check_memory(self, num_envs: int, text: Any, head: int, block: int, tail: int) -> None:
        each = self.bytes_per_env
        available = device_available_bytes(self.device)
        per_frame = self.kv_per_token * block + self.vision_per_frame
        fixed = self.kv_per_token * (head + tail)
        most = None if available is None else (available // num_envs - fixed) // per_frame
        fix = (
            f"the most max_frames that fit is {most}: give at most that, or fewer envs"
            if most is not None and most >= 2
            else "not even 2 frames fit: give fewer envs"
        )
        check_judge_frames_fit(
            "prefix.max_frames",
            num_envs,
            each,
            f"the streamed prefix caches of {num_envs:,} envs at {self.max_frames} frames "
            f"({each / 2**20:,.1f} MiB per env: the keys and values of {self.capacity:,} tokens in "
            f"{text.num_hidden_layers} layers, and {self.max_frames} frames' vision tokens)",
            fix,
            self.device,
        )

    # ------------------------------------------------------------------ properties
    @property
    def nbytes(self) -> int:
        """The memory ``step``'s envs' caches and kept vision tokens hold on the device."""
        e = self.episodes
        assert e is not None, "give num_envs to step the judge yourself"
        return e.cache.nbytes + e.vision.numel() * e.vision.element_size()

    def describe(self) -> str:
        """The prompt and its cache's memory: per env, and for the envs of the last state made (its start-up line)."""
        kv = self.kv_per_token * self.capacity
        vision = self.vision_per_frame * self.max_frames
        total = (
            f": {self.num_envs * self.bytes_per_env / 2**30:,.2f} GiB for {self.num_envs:,} envs on {self.device}"
            if self.num_envs
            else f", on {self.device}"
        )
        return (
            f"{self.frame_judge.judge.model_id}: the episode so far as images (up to {self.max_frames} frames, then every "
            f"2nd, 4th, ... frame and the newest), {self.prompt_order}; per env the keys and values of "
            f"{self.capacity:,} tokens ({kv / 2**20:,.1f} MiB) and {self.max_frames} frames' vision tokens "
            f"({vision / 2**20:,.1f} MiB){total}"
        )

    # ------------------------------------------------------------------ the model
    def _encode(self, images: torch.Tensor) -> Any:
        adapter = self.frame_judge.adapter
        return adapter.encode(adapter.pixels(images).to(self.frame_judge.dtype))

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
        assert self.episodes is not None, "give num_envs to step the judge yourself (the stack uses step_scorer)"
        tensor, envs, starts = step_arguments(frames, envs, starts, self.episodes.cache.length.shape[0])
        due = np.ones(len(envs), dtype=bool)
        rewards = self.step_images(self.episodes, self._resized(tensor), envs, starts, due)
        return rewards if self.multi_criteria else rewards[:, 0]

    @torch.inference_mode()
    def step_images(
        self, state: _Episodes, images: torch.Tensor, envs: np.ndarray, starts: np.ndarray, due: np.ndarray
    ) -> torch.Tensor:
        """Each env's new frame (``images`` uint8 (B, 3, h, w) at the input size) into its episode; the rewards
        (due.sum(), criteria) of the due envs' prompts. A frame neither due nor kept runs nothing."""
        out = []
        for start in range(0, len(envs), self.chunk_size):
            part = slice(start, start + self.chunk_size)
            chunk = images[part]

            def vision_of(rows: np.ndarray, chunk: torch.Tensor = chunk) -> torch.Tensor:
                every = len(rows) == chunk.shape[0]
                return stack_vision(self._encode(chunk if every else chunk[self._on_device(rows)]))

            rewards = self._step(state, envs[part], starts[part], due[part], vision_of)
            if rewards is not None:
                out.append(rewards)
        if not out:
            return torch.empty((0, len(self.criteria)), device=self.device)
        return torch.cat(out) if len(out) > 1 else out[0]

    def _step(
        self, episodes: _Episodes, envs: np.ndarray, starts: np.ndarray, due: np.ndarray, vision_of: Any
    ) -> torch.Tensor | None:
        """Rewards (due.sum(), criteria) of the due ``envs``' new frames; ``vision_of(rows)``: the vision tokens
        (len(rows), levels, tokens, width) of the new frames of ``envs[rows]``, asked only for the frames a step
        reads (the due ones, and those the cache keeps)."""
        sequence, block = self.sequence, len(self.sequence.block)
        starts = starts | (episodes.drawn[envs] == 0)  # an env's first frame starts its first episode
        if starts.any():
            fresh = envs[starts]
            episodes.cache.set_prefix(fresh, self.head_kv)
            episodes.drawn[fresh], episodes.stride[fresh], episodes.kept[fresh] = 0, 1, 0
        frame = episodes.drawn[envs]  # the new frame's index in its episode
        self._restride(episodes, envs, frame)
        keep = frame % episodes.stride[envs] == 0  # the new frame's block stays in the cache
        read = due | keep
        if not read.any():
            episodes.drawn[envs] += 1
            return None
        rows = np.flatnonzero(read)
        vision = vision_of(rows)  # (len(rows), ...): the frames a step reads
        kept = episodes.kept[envs]
        offsets = episodes.cache.length[envs]
        rewards = None
        if due.any():
            scored = np.flatnonzero(due[rows])  # among rows
            envs_d, index = envs[due], torch.as_tensor(kept[due])
            frames = vision if len(scored) == len(rows) else vision[self._on_device(scored)]
            positions = torch.cat([sequence.block_positions_at(index), sequence.tail_positions_after(index + 1)], dim=2)
            ids = torch.cat([sequence.block.to(self.device), self.tails[0]])[None]
            logits = self._forward(episodes, envs_d, offsets[due], ids, positions, unstack_vision(frames, self._like))
            columns = [answer_reward(logits, *self.answers[0], self.criteria[0].score)]
            for k in range(1, len(self.criteria)):  # each other question's tokens after the new frame's block
                tail_positions = self.tail_positions[k][:, None, :] + sequence.advance * index.view(1, -1, 1)
                logits = self._forward(
                    episodes, envs_d, offsets[due] + block, self.tails[k][None], tail_positions, None
                )
                columns.append(answer_reward(logits, *self.answers[k], self.criteria[k].score))
            rewards = torch.stack(columns, dim=1)
        quiet = keep & ~due  # kept frames of envs not scored this step: their block alone
        if quiet.any():
            among = self._on_device(np.flatnonzero(quiet[rows]))
            index = torch.as_tensor(kept[quiet])
            self._forward(
                episodes,
                envs[quiet],
                offsets[quiet],
                sequence.block.to(self.device)[None],
                sequence.block_positions_at(index),
                unstack_vision(vision[among], self._like),
            )
        # A kept frame's block stays in the cache, its vision tokens beside it.
        if keep.any():
            on = self._on_device
            episodes.vision[on(envs[keep]), on(kept[keep])] = vision[on(np.flatnonzero(keep[rows]))]
            episodes.kept[envs[keep]] += 1
            episodes.cache.length[envs[keep]] += block
        episodes.drawn[envs] += 1
        return rewards

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
        env, due = np.zeros(1, dtype=np.int64), np.ones(1, dtype=bool)
        rewards = [
            self._step(episodes, env, np.array([t == 0]), due, lambda rows, t=t: vision[t : t + 1])
            for t in range(tensor.shape[0])
        ]
        out = torch.cat(rewards)  # type: ignore[arg-type]
        return out if self.multi_criteria else out[:, 0]

    def cache_frames(self, env: int, state: _Episodes | None = None) -> np.ndarray:
        """The frames of ``env``'s current episode whose blocks its cache holds (0-based, oldest first), in ``state``
        (default: ``step``'s)."""
        e = state or self.episodes
        assert e is not None
        return np.arange(int(e.kept[env])) * int(e.stride[env])

    def close(self) -> None:
        super().close()
        self.head_kv = []
