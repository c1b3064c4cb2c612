"""VLM rewards for any Stable-Baselines3 VecEnv whose environments render.

:class:`VLMRewardVecEnvWrapper` replaces a VecEnv's reward by a CLIP reward model's. Over
a VecEnv that steps and draws range by range (``frames.views.SteppedFrameSource``: the MuJoCo
simulator env) it scores each range while the next is simulated and drawn; over any other
VecEnv (gymnasium envs in SB3's DummyVecEnv or SubprocVecEnv) it steps, then scores the
recorded frames range by range (on a GPU, uploading one range while encoding the last).

The frame a step's reward is computed on must show the state that step reached.
SB3's vector envs reset finished environments inside ``step_wait``, so a frame
taken afterwards (``get_images()``) would show the reset state for exactly the
steps that end episodes (the paper's code scores that reset frame). Wrapping
each env in :class:`RecordFrame` puts the frame of the reached state in the
step's ``info``, which the vector env returns for finished environments too.

Follows imitation's ``RewardVecEnvWrapper`` conventions: the environment's own
reward is kept in ``info["gt_reward"]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import gymnasium
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from vlmrm_fast.checks import number, one_of
from vlmrm_fast.envs.time_limits import SCORE_TERMINAL_ON
from vlmrm_fast.frames.views import DrawnFrameSource, HostFrames, SteppedFrameSource
from vlmrm_fast.reward.protocol import RewardModel, check_reward_model
from vlmrm_fast.reward.schedule import schedule_of
from vlmrm_fast.runtime.profiling import NULL_TIMER, StageTimer
from vlmrm_fast.stack.actions import check_actions
from vlmrm_fast.stack.plan import check_needs
from vlmrm_fast.stack.scorer import ChunkedScorer, plan_chunks

FRAME_KEY = "vlmrm_frame"


class RecordFrame(gymnasium.Wrapper):
    """Adds ``info["vlmrm_frame"]``, the rendered frame of the state each step reached."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ValueError(f"RecordFrame needs an env made with render_mode='rgb_array', got {env.render_mode!r}")

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info[FRAME_KEY] = self.env.render()
        return obs, reward, terminated, truncated, info


def pop_frames(infos: list[dict[str, Any]]) -> list[np.ndarray]:
    """Takes the recorded frames out of the step infos (so replay buffers don't keep them)."""
    try:
        return [info.pop(FRAME_KEY) for info in infos]
    except KeyError:
        raise RuntimeError(
            "the step infos carry no frames: wrap each env in vlmrm_fast.RecordFrame "
            "(e.g. DummyVecEnv([lambda: RecordFrame(gym.make(id, render_mode='rgb_array'))]))"
        ) from None


class VLMRewardVecEnvWrapper(VecEnvWrapper):
    """Replaces a VecEnv's reward by a VLM reward model's; the env reward goes to ``info["gt_reward"]``.

    ``reward_model``: a :class:`~vlmrm_fast.reward.protocol.RewardModel` (``load_reward_model``'s). With several criteria the first is
    the reward and all are in ``info["vlm_rewards"]`` by name. ``pipeline_chunks``: the ranges
    of envs a step is scored in: a number of them or "auto" (see ``stack.scorer.plan_chunks``), or the
    ranges themselves (slices, as ``vlmrm_fast.stack.plan`` planned them). ``defer_rewards``: return zero
    rewards and leave the frames to ``last_frames()`` (episode-batch scoring).
    ``env_reward_weight`` (rho): the reward is ``vlm + rho * env`` (FuRL's mix), the VLM part in
    ``info["vlm_reward"]``. The envs of a VecEnv that is not a stepped frame source must be
    :class:`RecordFrame`-wrapped. The reward model's schedule (``score_every``, ``between_scores``;
    ``reward/schedule.py``) says which steps it scores; ``episode_length`` (default: the VecEnv's own
    ``episode_length``, if it has one) is the envs' time limit, which ends their episodes.
    ``score_terminal_on``: the frame an episode's last step is scored on (``envs.time_limits``):
    ``"terminal_state"``, the state that ended it, or ``"reset_frame"``, the next episode's first, as the
    paper's code scored it (a VecEnv's own render after the step; the simulator env draws it itself, built
    with the same setting).
    """

    def __init__(
        self,
        venv: VecEnv,
        reward_model: RewardModel,
        *,
        pipeline_chunks: int | str | Sequence[slice] = "auto",
        defer_rewards: bool = False,
        env_reward_weight: float = 0.0,
        episode_length: int | None = None,
        score_terminal_on: str = "terminal_state",
    ):
        reward_model = check_reward_model(reward_model)
        score_terminal_on = one_of(score_terminal_on, "score_terminal_on", SCORE_TERMINAL_ON)
        if episode_length is None:
            episode_length = getattr(venv, "episode_length", None)
        # The one check of the model against these envs (a planned stack's plan made it: FastVLMRewardVecEnv).
        check_needs(
            reward_model.needs,
            schedule_of(reward_model),
            episode_length=episode_length,
            score_terminal_on=score_terminal_on,
            defer_rewards=defer_rewards,
        )
        if isinstance(pipeline_chunks, (list, tuple)):
            ranges = list(pipeline_chunks)
        else:
            ranges = plan_chunks(venv.num_envs, cast(int | str, pipeline_chunks), reward_model.device)
        self._wrap(venv, reward_model, ranges, defer_rewards, env_reward_weight, episode_length, score_terminal_on)

    def _wrap(
        self,
        venv: VecEnv,
        reward_model: RewardModel,
        ranges: list[slice],
        defer_rewards: bool,
        env_reward_weight: float,
        episode_length: int | None,
        score_terminal_on: str,
    ) -> None:
        """The wrapper over ``venv``, its scoring in ``ranges``; the model already checked against the envs."""
        super().__init__(venv)
        self.reward_model = reward_model
        self.score_terminal_on = score_terminal_on
        self.reward_mix = RewardMix(criterion_names(reward_model), env_reward_weight)
        self.defer_rewards = bool(defer_rewards)
        self.timer = NULL_TIMER
        self._scorer = ChunkedScorer(reward_model, ranges, episode_length=episode_length)
        self._resetting: np.ndarray | None = None  # envs the next step only resets (next-step autoreset)
        self._source: SteppedFrameSource | None = venv if isinstance(venv, SteppedFrameSource) else None
        # A VecEnv that draws its step's frames itself after stepping (the batched drawing of gymnasium envs).
        self._drawn: DrawnFrameSource | None = venv if isinstance(venv, DrawnFrameSource) else None
        drawer = self._source or self._drawn
        if drawer is not None and drawer.score_terminal_on != self.score_terminal_on:
            raise ValueError(
                f"score_terminal_on={self.score_terminal_on!r}: the VecEnv draws the frame of an episode's last "
                f"step itself, as {drawer.score_terminal_on!r}; build it with the same score_terminal_on"
            )
        self._frames = HostFrames()
        self._actions: np.ndarray | None = None
        self._stepped = False

    @property
    def reward_criteria(self) -> tuple[str, ...]:
        """The reward model's criterion names: the first is the reward, all are in ``info["vlm_rewards"]``."""
        return self.reward_mix.criteria

    @property
    def env_reward_weight(self) -> float:
        return self.reward_mix.env_reward_weight

    def reset(self):
        self._scorer.restart()
        self._resetting = None
        return self.venv.reset()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = check_actions(actions, self.action_space, self.num_envs)
        if self._source is None:
            self.venv.step_async(self._actions)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        actions, self._actions = self._actions, None
        scorer, timer = self._scorer, self.timer
        if self._source is not None:  # simulate and draw range k + 1 while the encoder runs range k
            scorer.begin(resetting=self._resetting)  # episodes end at the time limit, known before scoring
            obs, env_rewards, dones, infos = self._source.step_in_ranges(
                actions, scorer.chunks, scorer.render_stream, self._score
            )
        elif self._drawn is not None:  # it steps, then draws every env's frame (its own stages: physics, render)
            obs, env_rewards, dones, infos = self.venv.step_wait()
            scorer.begin(last=dones)
            for rows in scorer.chunks:
                self._score(rows, self._drawn.lend_frames(rows, scorer.render_stream))
        else:
            with timer.stage("physics_render"):
                obs, env_rewards, dones, infos = self.venv.step_wait()
                frames = pop_frames(infos)
                if self.score_terminal_on == "reset_frame" and dones.any():  # the VecEnv reset them: their frame now
                    ended = np.flatnonzero(dones)
                    for env, frame in zip(ended, self.venv.env_method("render", indices=ended.tolist())):
                        frames[env] = frame
                self._frames.stack(frames)
            scorer.begin(last=dones)
            for rows in scorer.chunks:
                self._score(rows, self._frames.lend(rows))
        self._stepped = True
        next_step_resets = bool(getattr(self.venv, "reset_on_next_step", False))
        self._resetting = np.asarray(dones, dtype=bool).copy() if next_step_resets else None
        for info, gt in zip(infos, env_rewards):
            info["gt_reward"] = float(gt)
        if self.defer_rewards:  # scored later (episode batches), mixed in there
            return obs, np.zeros(self.num_envs, dtype=np.float32), dones, infos
        return obs, self._rewards(scorer.finish(dones, timer), env_rewards, infos), dones, infos

    def _score(self, rows: slice, lent) -> None:
        if not self.defer_rewards:
            with lent as frames:
                self._scorer.submit(frames, rows, self.timer)  # preprocess, encode, reward: not waited for

    def _rewards(self, scores: np.ndarray, env_rewards: np.ndarray, infos: list[dict]) -> np.ndarray:
        mixed = self.reward_mix(scores, env_rewards)
        for i, info in enumerate(infos):
            if mixed.per_criterion is not None:
                info["vlm_rewards"] = {name: float(values[i]) for name, values in mixed.per_criterion.items()}
            if mixed.vlm is not None:
                info["vlm_reward"] = float(mixed.vlm[i])
        return mixed.rewards

    def profile(self, enabled: bool = True) -> StageTimer:
        """Starts timing each stage of ``step_wait`` (see :mod:`vlmrm_fast.runtime.profiling`)."""
        self.timer = StageTimer(enabled, self.reward_model.device)
        if self._source is not None:
            self._source.timer = self.timer
        if self._drawn is not None:
            self._drawn.timer = self.timer
        return self.timer

    def last_frames(self) -> torch.Tensor:
        """The frames the last step reached (uint8 (N, H, W, 3); may be reused by the next step: copy to keep).

        With ``defer_rewards=True`` the step's rewards are zero and the caller scores
        these frames later (see ``training.callbacks.EpisodeBatchRewards``).
        """
        if not self._stepped:
            raise RuntimeError("no step has been taken yet")
        drawer = self._source or self._drawn
        if drawer is None:
            return self._frames.tensor
        device = self.reward_model.device
        frames = drawer.last_frames(device if device.type == "cuda" else None)
        return frames if isinstance(frames, torch.Tensor) else torch.from_numpy(frames)


def find_reward_wrapper(venv: VecEnv) -> VLMRewardVecEnvWrapper:
    """The VLM reward wrapper in a stack of VecEnv wrappers (e.g. under VecMonitor or VecNormalize)."""
    while True:
        if isinstance(venv, VLMRewardVecEnvWrapper):
            return venv
        if not isinstance(venv, VecEnvWrapper):
            raise TypeError("no VLMRewardVecEnvWrapper (or FastVLMRewardVecEnv) in this VecEnv stack")
        venv = venv.venv


@dataclasses.dataclass(frozen=True)
class MixedRewards:
    """One step's rewards: ``rewards`` (N,) float32, what the agent learns from; ``per_criterion``: every
    criterion's VLM reward by name (several criteria); ``vlm``: the VLM part alone (when the env's own
    reward is mixed in)."""

    rewards: np.ndarray
    per_criterion: dict[str, np.ndarray] | None
    vlm: np.ndarray | None


@dataclasses.dataclass(frozen=True)
class RewardMix:
    """What a reward step means, for every front end (the SB3 wrapper, gymnasium's vector wrapper): the
    first criterion's VLM reward, plus ``env_reward_weight`` (rho) times the env's own reward (FuRL's
    ``vlm + rho * env``); with several criteria each one's reward by name."""

    criteria: tuple[str, ...]
    env_reward_weight: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "env_reward_weight", number(self.env_reward_weight, "env_reward_weight"))

    def __call__(self, scores: np.ndarray, env_rewards: np.ndarray) -> MixedRewards:
        """``scores``: the reward model's (N,) or (N, K) for K criteria; ``env_rewards``: the env's own (N,)."""
        scores = np.asarray(scores, dtype=np.float32)
        per_criterion = None
        if scores.ndim == 2:  # several prompt sets: all by name, the first is the reward
            per_criterion = {name: scores[:, k] for k, name in enumerate(self.criteria)}
            scores = np.ascontiguousarray(scores[:, 0])
        if not self.env_reward_weight:
            return MixedRewards(scores, per_criterion, None)
        rewards = (scores + self.env_reward_weight * np.asarray(env_rewards)).astype(np.float32)
        return MixedRewards(rewards, per_criterion, scores)


def criterion_names(reward_model: RewardModel) -> tuple[str, ...]:
    """The reward model's criterion names, unique (each is logged under its name)."""
    names = tuple(str(criterion.name) for criterion in reward_model.criteria)
    if len(set(names)) != len(names):
        raise ValueError(
            f"reward criterion names must be unique to be logged apart, got {list(names)}; give each criterion a name="
        )
    return names
