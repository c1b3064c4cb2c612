"""The scoring half of a step, in chunks that overlap on the GPU.

    scorer = ChunkedScorer(reward_model, plan_chunks(256, 4, reward_model.device))
    scorer.begin()
    for rows in scorer.chunks:
        ...simulate and draw envs rows on scorer.render_stream...
        with source.lend(rows, scorer.render_stream) as view:
            scorer.submit(view, rows)
    rewards = scorer.finish()        # numpy (256,): the step's one host synchronization

On a GPU, a chunk's frames are drawn and preprocessed on the render stream and
encoded and scored on the encoder stream (torch's current stream), which waits
for the chunk's event; neither the host nor the render stream waits for the
encoder. So while the encoder runs chunk k, the host simulates chunk k + 1 and
the render stream draws and preprocesses it. On the CPU the same calls run one
after another. Rewards do not depend on the chunking: every frame is
preprocessed, encoded and scored on its own.

The reward model's schedule (``reward/schedule.py``: ``score_every``, ``between_scores``) says which
envs a step scores: ``begin`` plans the step, ``submit`` preprocesses a range's frames where the model's
own per-step scorer (``RewardModel.step_scorer``, ``reward/protocol.py``) reads them and hands them to it,
and ``finish`` gives the others their reward between scores and counts the step. What the per-step
scorer does is its family's: a frame model encodes the due envs' frames (all of a range, or a smaller
batch gathered from them), a window model keeps each env's window in a ring on its device
(``reward/window_ring.py``) and embeds the due envs' windows.
"""

from __future__ import annotations

import numpy as np
import torch

from vlmrm_fast.checks import chunk_count
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.reward.protocol import RewardModel
from vlmrm_fast.reward.schedule import ScheduleClock, StepPlan, schedule_of
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer


def plan_chunks(num_envs: int, chunks: int | str, device: torch.device, *, overlaps: bool = True) -> list[slice]:
    """``num_envs`` split into ``chunks`` nearly equal ranges (the first ones one larger).

    "auto": one range where nothing runs beside the encoder: on the CPU, and where the drawing
    cannot overlap the encoder's GPU work (``overlaps=False``: a renderer in its own graphics
    context, which time-slices the GPU against CUDA's work); otherwise up to 4 ranges of at least 32 envs, enough to hide the simulation and drawing of all
    ranges but the first.
    """
    chunks = chunk_count(chunks, "pipeline_chunks", num_envs)
    if chunks == "auto":
        chunks = max(1, min(4, num_envs // 32)) if device.type == "cuda" and overlaps else 1
    base, extra = divmod(num_envs, int(chunks))
    bounds = np.cumsum([0] + [base + (i < extra) for i in range(int(chunks))])
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


class ChunkedScorer:
    """Scores a step's frames chunk by chunk (see the module docstring). ``episode_length``: the envs'
    time limit, the last step of their episodes where they report their ends after scoring (None: none)."""

    def __init__(self, reward_model: RewardModel, chunks: list[slice], *, episode_length: int | None = None):
        self.reward_model = reward_model
        self.device = torch.device(reward_model.device)
        self.chunks = list(chunks)
        num_envs = self.chunks[-1].stop
        on_gpu = self.device.type == "cuda"
        self.render_stream = torch.cuda.Stream(self.device) if on_gpu else None
        self._pixels = reward_model.pixel_buffer(num_envs)
        shape = (num_envs, len(reward_model.criteria)) if reward_model.multi_criteria else (num_envs,)
        self._rewards = torch.empty(shape, dtype=torch.float32, device=self.device)
        self._host = torch.empty(shape, dtype=torch.float32, pin_memory=on_gpu)
        self.steps = reward_model.step_scorer(num_envs, episode_length)
        self.clock = ScheduleClock(
            schedule_of(reward_model), num_envs, episode_length, episode_ends_only=self.steps.episode_ends_only
        )
        self._plan = StepPlan.every_env(num_envs)

    def restart(self) -> None:
        """Every env starts a new episode (the VecEnv was reset)."""
        self.clock.restart()

    def begin(self, *, resetting: np.ndarray | None = None, last: np.ndarray | None = None) -> StepPlan:
        """Starts a step: plans which envs it scores (``resetting``: envs the step only resets; ``last``:
        envs whose episode it ends, when known before scoring; see ``ScheduleClock.plan``). The render
        stream must not run ahead of the last step's reads."""
        if self.render_stream is not None:
            self.render_stream.wait_stream(torch.cuda.current_stream(self.device))
        self._plan = self.clock.plan(resetting=resetting, last=last)
        self.steps.begin(self._plan)
        return self._plan

    @torch.inference_mode()
    def submit(self, view: FrameView, rows: slice, timer: StageTimer = NULL_TIMER) -> None:
        """Preprocesses the frames of envs ``rows`` (on the render stream) where the model's per-step scorer reads
        them, which then scores the due envs (on the current stream, after them); returns without waiting."""
        pixels = self._pixels[rows]
        if self.steps.needs_frames(rows):
            self._preprocess(view, pixels, timer)
        self.steps.submit(pixels, rows, self._rewards[rows], timer)

    def _preprocess(self, view: FrameView, pixels: torch.Tensor, timer: StageTimer) -> None:
        """The frames of ``view`` into ``pixels`` on the render stream; the current stream waits for them."""
        if self.render_stream is None:
            self.reward_model.preprocess(view, out=pixels, timer=timer)
        else:
            with torch.cuda.stream(self.render_stream):
                self.reward_model.preprocess(view, out=pixels, timer=timer)
            torch.cuda.current_stream(self.device).wait_stream(self.render_stream)

    def finish(self, dones: np.ndarray, timer: StageTimer = NULL_TIMER) -> np.ndarray:
        """The step's rewards on the host (waits for the encoder): the due envs' scores, the others'
        reward between scores. ``dones``: the envs whose episode the step ended (their count restarts)."""
        with timer.stage("transfer"):
            if self.render_stream is None:
                scores = self._rewards.numpy().copy()
            else:
                self._host.copy_(self._rewards, non_blocking=True)
                torch.cuda.current_stream(self.device).synchronize()
                scores = self._host.numpy().copy()
        rewards = self.clock.rewards(self._plan, scores)
        self.clock.end_step(self._plan, dones)
        return rewards
