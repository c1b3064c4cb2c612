"""Preferences of a judge between two frames, and a reward learned from them online (RL-VLM-F, Wang et al. 2024).

A judge is asked which of two frames shows more progress toward a goal, the two frames as two images of one
prompt (the model's chat template) and the question after them: "does the first image show more progress
than the second?", read from the logits of the two answer words (``Yes`` and ``No`` by default: one token
in every family's tokenizer after its template's answer prompt, where digits after SmolVLM's space are two),
never generated and parsed (RL-VLM-F generates an analysis and a label and parses the label, its users'
first complaint). Each pair is asked in both orders and the two probabilities that the first frame shows
more progress are averaged, which cancels the model's bias toward a position:
``P(a) = (sigmoid(l_yes - l_no | a, b) + sigmoid(l_no - l_yes | b, a)) / 2``. Each frame goes through the
vision tower once for both orders.

:class:`PreferenceReward` is RL-VLM-F's loop, on the env stack's frames:

- every step's frames go into a replay of recent frames (a ring of ``replay`` frames on the device, at the
  judge's input size);
- every ``label_every`` steps, ``pairs`` pairs of frames drawn uniformly from the replay are labelled by the
  judge, and the labels join a buffer (a ring of ``labels`` pairs);
- the reward network is then trained for ``updates`` minibatches of ``batch_size`` labelled pairs with the
  Bradley-Terry loss, ``P(a preferred) = sigmoid(r(a) - r(b))`` against the judge's label (a probability:
  the cross-entropy of soft labels, where RL-VLM-F thresholds them to 0 or 1 and drops the unsure ones);
- the env's reward is the network's output for its frame.

The network reads frames, not states (:class:`FrameRewardNet`, an ensemble of small CNNs with a tanh output,
as PEBBLE's and RL-VLM-F's image reward models): the judge labelled the frames, so a network of the frames
learns what was judged from what was judged, for any env that draws frames (gymnasium envs without a state
vector meaning the same thing, MuJoCo tasks whose observations leave out what the camera shows), and it
fits the per-step scorer's frames-in, rewards-out interface. Its cost is one small CNN per frame, at 64 x 64.

Everything random draws from one generator of its own (seeded): the network's initial weights, the pairs,
the minibatches. :meth:`PreferenceReward.state_dict` holds the networks, the optimizer, the label buffer, the
replay, the generator and the step count; a learner restored from it continues bit for bit as the one saved.

``imitation`` implements preference comparisons (a reward net, Bradley-Terry, fragments), but it pins
gymnasium 0.29 and Stable-Baselines3 2.2, older than this package's gymnasium 1.x and SB3 2.9; and its
preferences come from trajectory fragments compared by a synthetic or human gatherer, not from a VLM's
logits over frames on the device. So the loop is written here, in about two hundred lines.
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlmrm_fast.checks import FieldError, positive_int
from vlmrm_fast.frames.preprocess import as_frame_tensor
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.models.judge.adapter import stack_vision, unstack_vision
from vlmrm_fast.models.random_init import _LocalGenerator
from vlmrm_fast.reward.episode_scorer import step_arguments
from vlmrm_fast.reward.judge import DEFAULT_IMAGE_SIZE, DEFAULT_JUDGE_CHUNK, JudgeRewardModel
from vlmrm_fast.reward.kinds import QuestionCriterion
from vlmrm_fast.reward.preference_spec import DEFAULT_QUESTION, PreferenceSchedule
from vlmrm_fast.runtime.memory import check_judge_frames_fit

#: Frames in memory resized and scored at once (the network is small: the frames at the judge's size bound it).
_FRAMES_AT_ONCE = 512


def _resized(frames: torch.Tensor, size: tuple[int, int], device: torch.device) -> torch.Tensor:
    """uint8 frames (B, H, W, 3) -> uint8 (B, 3, h, w) at ``size`` on ``device`` (antialiased bicubic, as a judge's)."""
    from torchvision.transforms.v2 import functional as tvF

    images = frames.to(device, non_blocking=True).permute(0, 3, 1, 2)
    if tuple(images.shape[-2:]) != tuple(size):
        images = tvF.resize(images, list(size), interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
    return images


class PreferenceLabeler:
    """A judge's preference between two frames (see the module docstring): ``goal`` fills ``question``'s ``{goal}``;
    ``yes`` is the answer word that says the first image shows more progress, ``no`` the one that says the second."""

    def __init__(
        self,
        judge: Any,
        goal: str,
        *,
        device: torch.device,
        question: str = DEFAULT_QUESTION,
        yes: str = "Yes",
        no: str = "No",
        batch_size: int | None = None,
        image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE,
        precision: str = "fp32",
    ):
        if "{goal}" in question and not str(goal).strip():
            raise FieldError("goal", "is empty; say what progress is toward, e.g. 'the robot stands up'")
        criterion = QuestionCriterion(question.replace("{goal}", str(goal).strip()), score="log_odds", yes=yes, no=no)
        try:
            self.prompts = JudgeRewardModel(
                judge,
                [criterion],
                device=device,
                batch_size=batch_size,
                image_size=image_size,
                precision=precision,
                frames=2,
            )
        except FieldError as exc:  # the labeler's own fields: yes, no, question
            raise FieldError(exc.field.removeprefix("criteria[0]."), exc.reason) from None
        self.device = self.prompts.device
        self.chunk_size = int(batch_size or DEFAULT_JUDGE_CHUNK)
        blank = torch.zeros((1, 3, *self.image_size), dtype=torch.uint8, device=self.device)
        with torch.inference_mode():
            self._like = self._encode(blank)

    @property
    def image_size(self) -> tuple[int, int]:
        return self.prompts.image_size

    @property
    def question(self) -> str:
        return self.prompts.criteria[0].question

    def _encode(self, images: torch.Tensor) -> Any:
        adapter = self.prompts.adapter
        return adapter.encode(adapter.pixels(images).to(self.prompts.dtype))

    @torch.inference_mode()
    def orders(self, a: Any, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The probabilities (B,) that the first image shows more progress, asked as (a, b) and as (b, a), of uint8
        frames ``a`` and ``b`` (B, H, W, 3): each frame through the vision tower once."""
        a, b = as_frame_tensor(a), as_frame_tensor(b)
        if a.shape != b.shape:
            raise ValueError(f"pairs need as many frames on each side, got {tuple(a.shape)} and {tuple(b.shape)}")
        ab: list[torch.Tensor] = []
        ba: list[torch.Tensor] = []
        for start in range(0, a.shape[0], self.chunk_size):
            part = slice(start, start + self.chunk_size)
            n = a[part].shape[0]
            both = torch.cat(
                [_resized(a[part], self.image_size, self.device), _resized(b[part], self.image_size, self.device)]
            )
            items = stack_vision(self._encode(both))
            first, second = items[:n], items[n:]
            for out, (x, y) in ((ab, (first, second)), (ba, (second, first))):
                pairs = torch.stack([x, y], dim=1).flatten(0, 1)  # each prompt's two images, in order
                out.append(torch.sigmoid(self.prompts.score_vision(unstack_vision(pairs, self._like), n)[:, 0]))
        return torch.cat(ab), torch.cat(ba)

    def __call__(self, a: Any, b: Any) -> torch.Tensor:
        """P(``a`` shows more progress than ``b``) (B,): both orders averaged."""
        ab, ba = self.orders(a, b)
        return (ab + (1.0 - ba)) / 2


class FrameRewardNet(nn.Module):
    """An ensemble of ``members`` small CNNs, each from uint8 frames (B, size, size, 3) to a reward in (-1, 1) (a tanh,
    as PEBBLE's); the reward is their mean, :meth:`members` each one's."""

    def __init__(self, size: int = 64, members: int = 3, width: int = 32):
        super().__init__()
        self.size = int(size)

        def member() -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(3, width, 5, stride=2, padding=2),
                nn.LeakyReLU(),
                nn.Conv2d(width, width, 3, stride=2, padding=1),
                nn.LeakyReLU(),
                nn.Conv2d(width, width, 3, stride=2, padding=1),
                nn.LeakyReLU(),
                nn.Flatten(),
                nn.Linear(width * math.ceil(self.size / 8) ** 2, 1),
                nn.Tanh(),
            )

        self.ensemble = nn.ModuleList(member() for _ in range(int(members)))

    def members(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames (B, size, size, 3) -> each member's rewards (members, B)."""
        x = frames.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return torch.stack([m(x)[:, 0] for m in self.ensemble])

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.members(frames).mean(dim=0)


class PreferenceReward:
    """RL-VLM-F's learned reward (see the module docstring): a per-step scorer
    (:class:`~vlmrm_fast.reward.episode_scorer.EpisodeScorer`, of ``num_envs`` envs) whose rewards are a network's,
    trained online from a :class:`PreferenceLabeler`'s labels.

    A step is :meth:`remember` (its frames into the replay), :meth:`rewards_of_images` (the network's rewards) and
    :meth:`end_step` (counted; every ``label_every`` steps a round of labels and training): the network that scores a
    step is the one trained after the steps before it. :meth:`step` does the three; the env stack's scorer
    (``reward/preference_model.py``) does them range by range."""

    multi_criteria = False

    def __init__(
        self,
        labeler: PreferenceLabeler,
        *,
        num_envs: int | None = None,
        schedule: PreferenceSchedule | None = None,
        seed: int = 0,
    ):
        self.labeler, self.schedule = labeler, (schedule or PreferenceSchedule()).schedule
        schedule = self.schedule
        self.num_envs = positive_int(num_envs, "num_envs", allow_none=True)
        self.device = labeler.device
        h, w = labeler.image_size
        size = schedule.net_size
        check_judge_frames_fit(
            "preference.replay",
            1,
            schedule.replay * h * w * 3 + schedule.labels * (2 * size * size * 3 + 4),
            f"a replay of {schedule.replay:,} frames of {h} x {w} and {schedule.labels:,} labelled pairs of {size} px",
            "give a smaller preference.replay or preference.labels (or a smaller image_size)",
            self.device,
        )
        self.generator = torch.Generator().manual_seed(int(seed))
        with _LocalGenerator(self.generator):
            self.net = FrameRewardNet(schedule.net_size, schedule.members).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=schedule.learning_rate)
        self.replay = torch.zeros((schedule.replay, h, w, 3), dtype=torch.uint8, device=self.device)
        self.pairs = torch.zeros((schedule.labels, 2, size, size, 3), dtype=torch.uint8, device=self.device)
        self.labels = torch.zeros(schedule.labels, dtype=torch.float32, device=self.device)
        self.replayed = self.labelled = self.steps = 0  # frames put in the replay, pairs labelled, steps taken
        self.last_loss = math.nan

    # ------------------------------------------------------------------ a step
    def step(self, frames: Any, envs: Any = None, starts: Any = None) -> torch.Tensor:
        """The network's rewards (B,) of ``frames`` (see ``reward/episode_scorer.py``), once the frames joined the
        replay; then the step is counted, and every ``label_every`` steps a round of labels and training follows."""
        tensor = frames.tensor() if isinstance(frames, FrameView) else as_frame_tensor(frames)
        tensor, envs, starts = step_arguments(tensor, envs, starts, self.num_envs or tensor.shape[0])
        images = self.images_of(tensor)
        self.remember(images)
        rewards = self.rewards_of_images(images)
        self.end_step()
        return rewards

    def images_of(self, frames: Any) -> torch.Tensor:
        """uint8 frames (B, H, W, 3) -> uint8 (B, 3, h, w) at the judge's input size on the device (what the replay
        keeps, and what the network's input is resized from)."""
        return _resized(as_frame_tensor(frames), self.labeler.image_size, self.device)

    @torch.no_grad()
    def remember(self, images: torch.Tensor) -> None:
        """A step's frames, uint8 (B, 3, h, w) at the judge's input size (:meth:`images_of`), into the replay."""
        slots = (self.replayed + torch.arange(images.shape[0])) % self.schedule.replay
        self.replay[slots.to(self.device)] = images.permute(0, 2, 3, 1)
        self.replayed += images.shape[0]

    def end_step(self) -> None:
        """Counts a step; every ``label_every`` steps, a round of labels and training (with gradients, wherever it is
        called from: the env stack scores in inference mode)."""
        self.steps += 1
        if self.steps % self.schedule.label_every == 0:
            with torch.inference_mode(False), torch.enable_grad():
                self.label_round()
                self.train_round()

    @torch.no_grad()
    def rewards_of_images(self, images: torch.Tensor) -> torch.Tensor:
        """The network's rewards (B,) of uint8 frames (B, 3, h, w) at the judge's input size (:meth:`images_of`)."""
        size = (self.schedule.net_size, self.schedule.net_size)
        return self.net(_resized(images.permute(0, 2, 3, 1), size, self.device).permute(0, 2, 3, 1))

    def rewards_of(self, frames: Any) -> torch.Tensor:
        """The network's rewards (B,) of uint8 frames (B, H, W, 3), as a step gives them (through the judge's input
        size, as the replay keeps them and the labelled pairs are made from them)."""
        tensor = as_frame_tensor(frames)
        rewards = [
            self.rewards_of_images(self.images_of(tensor[start : start + _FRAMES_AT_ONCE]))
            for start in range(0, tensor.shape[0], _FRAMES_AT_ONCE)
        ]
        return torch.cat(rewards) if len(rewards) > 1 else rewards[0]

    def score_episode(self, frames: Any) -> torch.Tensor:
        return self.rewards_of(frames)

    # ------------------------------------------------------------------ learning
    def label_round(self) -> None:
        """``pairs`` pairs of distinct replay frames drawn uniformly, labelled by the judge into the label buffer."""
        filled = min(self.replayed, self.schedule.replay)
        if filled < 2:
            return
        count = self.schedule.pairs
        first = torch.randint(filled, (count,), generator=self.generator)
        second = (first + 1 + torch.randint(filled - 1, (count,), generator=self.generator)) % filled
        a, b = self.replay[first.to(self.device)], self.replay[second.to(self.device)]
        labels = self.labeler(a, b).float()
        size = (self.schedule.net_size, self.schedule.net_size)
        with torch.no_grad():
            small = torch.stack([_resized(x, size, self.device).permute(0, 2, 3, 1) for x in (a, b)], dim=1)
        slots = ((self.labelled + torch.arange(count)) % self.schedule.labels).to(self.device)
        self.pairs[slots], self.labels[slots] = small, labels.to(self.labels.dtype)
        self.labelled += count

    def train_round(self) -> None:
        """``updates`` Adam steps on minibatches drawn uniformly from the labelled pairs, the Bradley-Terry loss of each
        member against the soft labels."""
        filled = min(self.labelled, self.schedule.labels)
        if not filled:
            return
        losses = []
        for _ in range(self.schedule.updates):
            index = torch.randint(filled, (min(self.schedule.batch_size, filled),), generator=self.generator)
            index = index.to(self.device)
            pairs, labels = self.pairs[index], self.labels[index]
            n = pairs.shape[0]
            rewards = self.net.members(pairs.flatten(0, 1)).view(-1, n, 2)  # (members, n, 2)
            margin = rewards[..., 0] - rewards[..., 1]
            loss = F.binary_cross_entropy_with_logits(margin, labels.expand_as(margin))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            losses.append(loss.detach())
        self.last_loss = float(torch.stack(losses).mean())

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue as this one would: the networks, the optimizer, the label buffer,
        the replay, the generator and the counts (tensors on the CPU)."""
        filled = min(self.labelled, self.schedule.labels)
        return {
            "schedule": dataclasses.asdict(self.schedule),
            "net": {k: v.cpu() for k, v in self.net.state_dict().items()},
            "optimizer": _to_cpu(self.optimizer.state_dict()),
            "pairs": self.pairs[:filled].cpu(),
            "labels": self.labels[:filled].cpu(),
            "replay": self.replay[: min(self.replayed, self.schedule.replay)].cpu(),
            "generator": self.generator.get_state(),
            "counts": {"replayed": self.replayed, "labelled": self.labelled, "steps": self.steps},
            "question": self.labeler.question,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s state; a state of another schedule or question is refused in one line."""
        if state.get("schedule") != dataclasses.asdict(self.schedule):
            raise ValueError(
                "this learned reward's state was saved with another schedule "
                f"({state.get('schedule')}); resume with the same preference settings"
            )
        if state.get("question") != self.labeler.question:
            raise ValueError(
                f"this learned reward's state was saved asking {state.get('question')!r}, not {self.labeler.question!r}: "
                "resume with the same goal and question"
            )
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        filled = state["pairs"].shape[0]
        self.pairs[:filled] = state["pairs"].to(self.device)
        self.labels[:filled] = state["labels"].to(self.device)
        self.replay[: state["replay"].shape[0]] = state["replay"].to(self.device)
        self.generator.set_state(state["generator"])
        counts = state["counts"]
        self.replayed, self.labelled, self.steps = counts["replayed"], counts["labelled"], counts["steps"]

    def save(self) -> bytes:
        buffer = io.BytesIO()
        torch.save(self.state_dict(), buffer)
        return buffer.getvalue()

    def load(self, data: bytes) -> None:
        self.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value
