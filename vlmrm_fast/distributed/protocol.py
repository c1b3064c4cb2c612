"""What rank 0 and a serving rank say to each other, in order:

    serving rank -> rank 0    Launch                       who it is, the GPUs of its node
    rank 0 -> serving rank    ShardSpec | Refuse           its envs, device and heartbeat, or why the job cannot run
    serving rank -> rank 0    Reply(Built)                 its shard is built (or the error); it starts beating
    rank 0 -> serving rank    Call(method, args, kwargs)   one VecEnv call on its shard, or "timings"/"profile" ...
    serving rank -> rank 0    Reply(value)                 ... answered (or the error)
    rank 0 -> serving rank    Call("close")                the run is over; answered, then the rank leaves

Only actions go out in calls; observations, rewards, dones and infos come back in replies. Beside
the messages, every rank beats on the job's store (``heartbeat.py``).
"""

from __future__ import annotations

import dataclasses
import pickle
import traceback
from typing import TYPE_CHECKING, Any

from vlmrm_fast.distributed.config import DEFAULTS, DistributedConfig

if TYPE_CHECKING:
    from vlmrm_fast.distributed.timings import RankClock
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.reward.spec import RewardModelSpec


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """The envs one rank steps: envs ``envs`` of the whole run (``env`` with their number), scored by
    ``reward`` on this rank's device, seeded as env ``envs.start + i``; ``options``: FastVLMRewardVecEnv's other
    arguments; ``distributed``: the run's heartbeat (rank 0's, so that every rank beats alike)."""

    env: EnvSpec
    reward: RewardModelSpec
    envs: range
    seed: int | None
    options: dict[str, Any]
    distributed: DistributedConfig = DEFAULTS

    @property
    def device(self) -> str:
        return str(self.reward.device)

    def build(self):
        from vlmrm_fast.distributed.launch import use_device
        from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv

        use_device(self.device)  # this rank's GPU is torch's current device before anything is built
        return FastVLMRewardVecEnv.from_specs(self.env, self.reward, seed=self.seed, **self.options)


@dataclasses.dataclass(frozen=True)
class Built:
    """A rank's envs are built: their device, and what rank 0 needs to stand for envs it does not hold."""

    device: str
    observation_space: Any
    action_space: Any
    render_size: Any
    episode_length: int

    @classmethod
    def of(cls, shard: Any) -> Built:
        return cls(
            str(shard.reward_model.device),
            shard.observation_space,
            shard.action_space,
            shard.render_size,
            shard.episode_length,
        )


@dataclasses.dataclass(frozen=True)
class Refuse:
    message: str


@dataclasses.dataclass(frozen=True)
class Call:
    method: str
    args: tuple = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


CLOSE = Call("close")

#: the calls a serving rank answers (the VecEnv methods whose work is per env)
SHARD_METHODS = frozenset(
    {"reset", "step", "seed", "set_options", "get_attr", "set_attr", "env_method", "env_is_wrapped", "get_images"}
)


@dataclasses.dataclass
class Reply:
    value: Any = None
    error: BaseException | None = None
    traceback: str = ""

    @classmethod
    def of_error(cls, error: BaseException) -> Reply:
        try:
            pickle.dumps(error)
        except Exception:
            error = RuntimeError(f"{type(error).__name__}: {error}")
        return cls(error=error, traceback=traceback.format_exc())

    def result(self, where: str) -> Any:
        """The value, or the error raised here as it was raised there (same type, so that e.g.
        SB3's ``has_attr`` still sees an AttributeError), noted with where and the remote traceback."""
        if self.error is None:
            return self.value
        self.error.add_note(f"raised on {where}; the traceback there:\n{self.traceback}")
        raise self.error


def answer(shard: Any, call: Call, clock: RankClock) -> Reply:
    """Runs ``call`` on ``shard`` (a FastVLMRewardVecEnv; ``clock``: this rank's) and wraps the outcome."""
    try:
        if call.method == "step":
            with clock.timing("step"):
                value = shard.step(*call.args, **call.kwargs)
            clock.steps += 1
            return Reply(value=value)
        if call.method == "timings":
            return Reply(value=rank_timings(shard, clock))
        if call.method == "profile":
            shard.profile(*call.args, **call.kwargs)
            clock.reset()
            return Reply()
        if call.method not in SHARD_METHODS:
            raise ValueError(f"a serving rank does not answer {call.method!r}")
        return Reply(value=getattr(shard, call.method)(*call.args, **call.kwargs))
    except Exception as error:
        return Reply.of_error(error)


def rank_timings(shard: Any, clock: RankClock) -> dict[str, Any]:
    """A rank's steps, clock and stage times (ms per step), as rank 0's table takes them."""
    timer = getattr(shard, "timer", None)
    stages = timer.mean_ms(per=max(clock.steps, 1)) if timer is not None and timer.enabled else {}
    return {"steps": clock.steps, "ms": clock.per_step_ms(), "stages": stages}
