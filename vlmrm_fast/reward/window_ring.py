"""Each env's window of frames, kept on the reward model's device while the envs step.

A :class:`WindowRing` holds, for every env, K slots of what the window model keeps of a frame
(``frame_items``: the preprocessed frame for a video model, its normalised embedding for the mean of
frames), as one tensor (N, K, *item) on the model's device: an env's window lies in one block, so
gathering the due envs' windows in time order is one copy. The step's scorer
(``stack.scorer.ChunkedScorer``) preprocesses each range's frames with the fused kernel, and the ring:

1. writes the items of the envs that keep this step's frame into their slots;
2. gathers the windows of the envs the step scores, oldest frame first, and embeds them together in
   batches of the model's ``chunk_size``, then scores them with the reward head.

Where the slots are:

- ``streamed``: slot ``c`` of the step's cursor, which advances once per step for all envs (mod K);
  a window reads the slots after the cursor, oldest first. An env's first step of an episode writes
  its frame into every slot, so the window is padded with the episode's first frame until K frames
  were drawn, and never holds a frame of the episode before.
- ``episode_end``: slot ``j`` keeps the episode's frame ``episode_end_frames(L, K)[j]`` (evenly spaced
  over the time limit L, the last frame kept); only the steps whose frame is kept write. An episode
  that ends before L (a termination) fills the slots after its last frame with it.

Nothing is read back to the host, and the only host work is which envs write which slot (small
index arrays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vlmrm_fast.reward.schedule import StepPlan
from vlmrm_fast.reward.window import episode_end_frames
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer

if TYPE_CHECKING:
    from vlmrm_fast.reward.window_model import WindowRewardModel


class WindowRing:
    """The windows of ``num_envs`` envs of a window model (see the module docstring): the model's per-step
    scorer (``reward.protocol.StepScorer``). ``episode_length``: the time limit, which an episode-end window
    is spread over (the plan has checked that such a window has one: ``RewardNeeds.time_limit``)."""

    def __init__(self, model: WindowRewardModel, num_envs: int, episode_length: int | None = None):
        self.model = model
        self.window = model.window
        self.frames = self.window.frames
        self.num_envs = int(num_envs)
        self.device = torch.device(model.device)
        self.episode_end = self.window.timing == "episode_end"
        self.episode_ends_only = self.episode_end  # the schedule scores an episode-end window on its last step only
        if self.episode_end:
            assert episode_length is not None, "the plan refuses an episode-end window without a time limit"
            self.kept = episode_end_frames(episode_length, self.frames)  # the frame index each slot keeps
        self.reads = np.asarray(model.reads(self.frames))  # which of a window's frames its embedding reads
        # The slots a window reads, oldest first, for each place of the cursor (one place for episode ends).
        cursors = [0] if self.episode_end else range(self.frames)
        self._slot_index = [
            torch.as_tensor(self.reads if self.episode_end else (c + 1 + self.reads) % self.frames, device=self.device)
            for c in cursors
        ]
        self.items = torch.empty(
            (self.num_envs, self.frames, *model.item_shape), dtype=model.item_dtype, device=self.device
        )
        self._cursor = self.frames - 1  # streamed: the slot the last step wrote
        self._writes: dict[int, np.ndarray] = {}  # this step: slot -> envs that write it
        self._writers = np.zeros(self.num_envs, dtype=bool)
        self._due = np.zeros(self.num_envs, dtype=bool)

    @property
    def nbytes(self) -> int:
        """The memory the ring holds on the device."""
        return self.items.numel() * self.items.element_size()

    def begin(self, plan: StepPlan) -> None:
        """Plans the step's writes and reads from the schedule's plan (its stepping, first and last steps)."""
        stepping, step = plan.stepping, plan.step
        writes: dict[int, list[np.ndarray]] = {}
        if not self.episode_end:
            self._cursor = (self._cursor + 1) % self.frames
            first = stepping & (step == 1)
            writes[self._cursor] = [np.flatnonzero(stepping & ~first)]
            starts = np.flatnonzero(first)
            if starts.size:
                for slot in range(self.frames):  # the episode's first frame stands in for the frames before it
                    writes.setdefault(slot, []).append(starts)
        else:
            frame = step - 1  # the frame each env draws this step, 0 its episode's first
            for slot, kept in enumerate(self.kept):
                envs = stepping & ((frame == kept) | (plan.last & (frame < kept)))
                if envs.any():
                    writes.setdefault(slot, []).append(np.flatnonzero(envs))
        self._due = plan.due  # for an episode-end window, the episodes' last steps
        self._writes = {slot: np.sort(np.concatenate(parts)) for slot, parts in writes.items()}
        self._writes = {slot: envs for slot, envs in self._writes.items() if envs.size}
        self._writers = np.zeros(self.num_envs, dtype=bool)
        for envs in self._writes.values():
            self._writers[envs] = True

    def needs_frames(self, rows: slice) -> bool:
        """Whether any env of ``rows`` keeps this step's frame (else its frames need no preprocessing)."""
        return bool(self._writers[rows].any())

    @torch.inference_mode()
    def submit(self, pixels: torch.Tensor, rows: slice, out: torch.Tensor, timer: StageTimer = NULL_TIMER) -> None:
        """The preprocessed frames of envs ``rows`` into their slots (their items computed once), then the
        due envs' windows embedded and scored into ``out`` (the rows' rewards)."""
        writers = np.flatnonzero(self._writers[rows])
        if writers.size:
            with timer.stage("encode"):
                every = writers.size == rows.stop - rows.start
                index = None if every else torch.as_tensor(writers, device=self.device)
                items = self.model.frame_items(pixels if index is None else pixels.index_select(0, index))
            for slot, envs in self._writes.items():
                inside = envs[(envs >= rows.start) & (envs < rows.stop)] - rows.start
                if not inside.size:
                    continue
                target = self.items[rows, slot]
                if every and inside.size == items.shape[0]:
                    target.copy_(items)
                    continue
                positions = inside if every else np.searchsorted(writers, inside)
                source = items.index_select(0, torch.as_tensor(positions, device=self.device))
                target.index_copy_(0, torch.as_tensor(inside, device=self.device), source)
        due = np.flatnonzero(self._due[rows])
        if not due.size:
            return
        every_due = due.size == rows.stop - rows.start
        with timer.stage("encode"):
            slots = self._slot_index[self._cursor if not self.episode_end else 0]
            scores = []
            batch = max(1, self.model.chunk_size)
            for start in range(0, due.size, batch):
                if every_due:  # the common case: no index to upload, the windows read in place
                    part = slice(rows.start + start, rows.start + min(start + batch, due.size))
                    windows = self.items[part].index_select(1, slots)
                else:
                    scored = torch.as_tensor(due[start : start + batch] + rows.start, device=self.device)
                    windows = self.items[scored.view(-1, 1), slots.view(1, -1)]
                scores.append(self.model.window_rewards(windows))  # windows (n, reads, *item), oldest first
        with timer.stage("reward"):
            rewards = self.model.rewards_of(torch.cat(scores) if len(scores) > 1 else scores[0])
            if every_due:
                out.copy_(rewards)
            else:
                out.index_copy_(0, torch.as_tensor(due, device=self.device), rewards.to(out.dtype))
