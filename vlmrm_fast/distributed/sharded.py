"""ShardedVecEnv: on rank 0, the whole VecEnv of a torchrun job whose envs are split over its ranks.

Rank 0 steps its own envs (a FastVLMRewardVecEnv) while every other rank steps, renders
and scores its envs on its own device (``serve.serve_shard``); then their observations,
rewards, dones and infos are gathered. Env ``i`` of the whole run is seeded ``seed + i``
on whichever rank it lives, so the run equals one process with all the envs.
"""

from __future__ import annotations

import dataclasses
import datetime
import pickle
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from vlmrm_fast.actions import check_actions
from vlmrm_fast.distributed.channel import Link, RankFailure, signals_held
from vlmrm_fast.distributed.launch import (
    DEFAULT_TIMEOUT,
    Launch,
    LayoutError,
    as_timeout,
    join,
    plan_shards,
    shard_devices,
)
from vlmrm_fast.distributed.protocol import CLOSE, Call, Refuse, Reply, ShardSpec
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.reward.spec import RewardModelSpec

#: FastVLMRewardVecEnv arguments that cannot travel to other ranks, and why
REFUSED_ARGUMENTS = {
    "reward_model": "a loaded model cannot be shared between processes: pass model=... and each rank loads its own",
    "defer_rewards": "episode-batch scoring needs every frame in one process; with several ranks each rank scores its "
    "own frames at every step (set rl.episode_batch: false)",
}


@dataclasses.dataclass(frozen=True)
class Shard:
    """The envs of one rank and where they run."""

    rank: int
    envs: range
    device: str
    host: str

    def describe(self) -> str:
        return f"rank {self.rank} ({self.device} on {self.host}): {envs_text(self.envs)}"


def envs_text(envs: range) -> str:
    return f"env {envs.start}" if len(envs) == 1 else f"envs {envs.start}-{envs.stop - 1}"


def _concat(parts: Sequence[Any]) -> Any:
    """Joins the shards' observations (arrays, or dicts/tuples of arrays) along the env axis."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: _concat([p[key] for p in parts]) for key in first}
    if isinstance(first, tuple):
        return tuple(_concat([p[i] for p in parts]) for i in range(len(first)))
    return np.concatenate(parts)


def lay_out(
    env: EnvSpec, reward: RewardModelSpec, seed: int | None, options: dict, launches: list[Launch]
) -> list[ShardSpec]:
    """Each rank's envs, device and seed (env ``i`` of the run: ``seed + i``); :class:`LayoutError` if the job cannot run."""
    ranges = plan_shards(env.n_envs, len(launches))
    return [
        ShardSpec(
            env.replace(n_envs=len(envs)),
            reward.replace(device=rank_device),
            envs,
            None if seed is None else seed + envs.start,
            options,
        )
        for envs, rank_device in zip(ranges, shard_devices(reward.device, launches))
    ]


def split_arguments(task: str, num_envs: int, kwargs: dict[str, Any]) -> tuple[EnvSpec, RewardModelSpec, dict]:
    """FastVLMRewardVecEnv's arguments as (the env spec, the reward model spec, the other options):
    checked here, before they travel to the ranks."""
    from vlmrm_fast.vec_env import ENV_ARGUMENTS, OPTIONS, check_arguments, reward_spec_of

    kwargs = dict(kwargs)
    check_arguments(kwargs)
    env = EnvSpec(task, num_envs, **{name: kwargs.pop(name) for name in ENV_ARGUMENTS if name in kwargs})
    fields = {name: kwargs.pop(name) for name in list(kwargs) if name not in OPTIONS}
    reward = reward_spec_of(kwargs.pop("reward_spec", None), fields)
    return env, reward, kwargs


class ShardedVecEnv(VecEnv):
    """``num_envs`` envs of ``task`` split over the ranks of a torchrun job; built on rank 0,
    while every other rank runs :func:`~vlmrm_fast.distributed.serve_shard`.

    ``env_kwargs`` are :class:`~vlmrm_fast.FastVLMRewardVecEnv`'s (sent to every rank, so they
    must pickle; no ``reward_model``, no ``defer_rewards``). ``device="auto"`` puts each rank
    on its own GPU (``cuda:LOCAL_RANK``, or ``cuda:0`` of the GPUs a scheduler gave it through
    CUDA_VISIBLE_DEVICES; the CPU without GPUs), which becomes the rank's current CUDA device;
    an explicit ``"cuda:K"`` lets ranks share a GPU. ``timeout`` (seconds or a timedelta) bounds every wait for another rank: a rank that
    dies or hangs stops the run with a :class:`RankFailure` naming it. Rank ``r`` holds envs
    ``plan_shards(num_envs, world_size)[r]``; ``shards`` says where each runs.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        *,
        timeout: datetime.timedelta | float = DEFAULT_TIMEOUT,
        verbose: int = 1,
        **env_kwargs: Any,
    ):
        for name, why in REFUSED_ARGUMENTS.items():
            if env_kwargs.get(name):
                raise ValueError(f"ShardedVecEnv: {name}= is not supported: {why}")
        env, reward, options = split_arguments(task, num_envs, env_kwargs)
        seed = options.pop("seed", None)
        try:
            pickle.dumps((env, reward, options))
        except Exception as exc:
            raise ValueError(f"ShardedVecEnv: the env arguments travel to every rank and must pickle: {exc}") from None
        self.launch = Launch.detect()
        if self.launch.rank != 0:
            raise RuntimeError(
                f"rank {self.launch.rank}: ShardedVecEnv is built on rank 0; the other ranks call serve_shard()"
            )
        self.timeout = as_timeout(timeout)
        self._closed = False
        self._local = None
        self._local_actions: np.ndarray | None = None
        self._membership = join(self.timeout) if self.launch.world_size > 1 else None
        group = self._membership.group if self._membership else None
        self._links = {r: Link(group, r, "a serving rank", self.timeout) for r in range(1, self.launch.world_size)}
        self._awaiting: set[int] = set(self._links)  # ranks whose next message is not read yet: first, who they are
        try:
            launches = [self.launch] + [launch for _, launch in sorted(self._complete(None, "joining").items())]
            try:
                specs = lay_out(env, reward, seed, options, launches)
            except LayoutError as refusal:
                self._refuse(str(refusal))
                raise
            for rank, link in self._links.items():
                link.name = f"{envs_text(specs[rank].envs)} on {launches[rank].host}"
            self._post({rank: spec for rank, spec in enumerate(specs) if rank != 0})
            self._local = specs[0].build()
            devices = {0: str(self._local.reward_model.device), **self._complete(None, "building its envs")}
        except LayoutError:
            raise
        except BaseException:
            self.close()
            raise
        self.shards = [Shard(r, spec.envs, devices[r], launches[r].host) for r, spec in enumerate(specs)]
        super().__init__(env.n_envs, self._local.observation_space, self._local.action_space)
        self.render_mode = "rgb_array"
        if verbose:
            print(f"{env.n_envs} envs of {env.task} over {len(self.shards)} rank(s):")
            for shard in self.shards:
                print("  " + shard.describe())

    # ------------------------------------------------------------------ layout
    def _refuse(self, message: str) -> None:
        """Tells every serving rank why the job cannot run (they raise it too), then leaves."""
        self._closed = True
        try:
            for link in self._links.values():
                link.send(Refuse(message))
            for link in self._links.values():
                link.flush()
        except RankFailure:
            pass
        finally:
            if self._membership is not None:
                self._membership.leave()

    # ------------------------------------------------------------------ messages
    def _post(self, messages: dict[int, Any]) -> None:
        """Sends each serving rank its message (after reading any reply left by an interrupted call)."""
        if self._closed:
            raise RuntimeError("the sharded env is closed")
        self._drain()
        for rank, message in messages.items():
            with signals_held():
                self._links[rank].send(message)
                self._awaiting.add(rank)

    def _complete(self, local: Call | None, doing: str = "answering") -> dict[int, Any]:
        """Runs ``local`` on rank 0's envs, then reads every awaited reply; returns the results by rank.
        All replies are read before any error is raised, so every rank stays in step."""
        outcomes: dict[int, Reply] = {}
        local_error: BaseException | None = None
        if local is not None:
            try:
                outcomes[0] = Reply(value=getattr(self._local, local.method)(*local.args, **local.kwargs))
            except Exception as error:
                local_error = error
        failure: RankFailure | None = None
        for rank in sorted(self._awaiting):
            with signals_held():
                try:
                    outcomes[rank] = self._links[rank].receive(doing)
                except RankFailure as error:
                    failure = failure or error
                self._awaiting.discard(rank)
        if failure is not None:
            raise failure
        if local_error is not None:
            raise local_error
        return {
            rank: reply.result(f"rank {rank} ({self._links[rank].name})" if rank else "rank 0")
            for rank, reply in sorted(outcomes.items())
        }

    def _call(self, calls: dict[int, Call]) -> list[Any]:
        """Runs one call per rank (the serving ranks' first, rank 0's meanwhile); results in rank order."""
        self._post({rank: call for rank, call in calls.items() if rank != 0})
        return [value for _, value in sorted(self._complete(calls.get(0)).items())]

    def _drain(self) -> None:
        for rank in sorted(self._awaiting):
            with signals_held():
                try:
                    self._links[rank].receive("finishing an interrupted call")
                except RankFailure:
                    pass  # kept by the link: its next use raises it
                self._awaiting.discard(rank)

    def _each(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self._call({shard.rank: Call(method, args, kwargs) for shard in self.shards})

    def _indexed(self, method: str, args: tuple, kwargs: dict, indices) -> list[Any]:
        """A per-env call on the envs ``indices`` (in that order), each asked of the rank that holds it."""
        wanted = list(self._get_indices(indices))
        by_rank: dict[int, list[tuple[int, int]]] = {}
        for position, index in enumerate(wanted):
            if not 0 <= index < self.num_envs:
                raise IndexError(f"env index {index} is out of range for {self.num_envs} envs")
            shard = next(s for s in self.shards if index in s.envs)
            by_rank.setdefault(shard.rank, []).append((position, index - shard.envs.start))
        calls = {
            rank: Call(method, args, {**kwargs, "indices": [local for _, local in items]})
            for rank, items in by_rank.items()
        }
        self._post({rank: call for rank, call in calls.items() if rank != 0})
        results = self._complete(calls.get(0))
        out: list[Any] = [None] * len(wanted)
        for rank, items in by_rank.items():
            for (position, _), value in zip(items, results[rank] or [None] * len(items)):
                out[position] = value
        return out

    # ------------------------------------------------------------------ VecEnv API
    def reset(self):
        return _concat(self._each("reset"))

    def step_async(self, actions: np.ndarray) -> None:
        actions = check_actions(actions, self.action_space, self.num_envs)
        self._post({s.rank: Call("step", (actions[s.envs.start : s.envs.stop],)) for s in self.shards[1:]})
        local = self.shards[0].envs
        self._local_actions = actions[local.start : local.stop]

    def step_wait(self):
        if self._local_actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        actions, self._local_actions = self._local_actions, None
        parts = [value for _, value in sorted(self._complete(Call("step", (actions,))).items())]
        obs, rewards, dones, infos = zip(*parts)
        return _concat(obs), np.concatenate(rewards), np.concatenate(dones), [info for part in infos for info in part]

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Env ``i`` of the whole run gets ``seed + i`` at the next reset, on whichever rank it lives."""
        calls = {s.rank: Call("seed", (None if seed is None else seed + s.envs.start,)) for s in self.shards}
        return [value for part in self._call(calls) for value in part]

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        if isinstance(options, list):
            calls = {s.rank: Call("set_options", (options[s.envs.start : s.envs.stop],)) for s in self.shards}
        else:
            calls = {s.rank: Call("set_options", (options,)) for s in self.shards}
        self._call(calls)

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [image for part in self._each("get_images") for image in part]

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return self._indexed("get_attr", (attr_name,), {}, indices)

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        self._indexed("set_attr", (attr_name, value), {}, indices)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        return self._indexed("env_method", (method_name, *method_args), method_kwargs, indices)

    def env_is_wrapped(self, wrapper_class: type[gymnasium.Wrapper], indices=None) -> list[bool]:
        return self._indexed("env_is_wrapped", (wrapper_class,), {}, indices)

    def close(self) -> None:
        """Closes every rank's envs: the serving ranks answer and leave; then this rank leaves the group."""
        if self._closed:
            return
        self._closed = True
        try:
            self._drain()
            with signals_held():
                live = [link for link in self._links.values() if link.failure is None]
                for link in live:
                    try:
                        link.send(CLOSE)
                    except RankFailure:
                        pass
                for link in live:
                    try:
                        link.receive("closing")
                    except RankFailure:
                        pass
        finally:
            if self._local is not None:
                self._local.close()
            if self._membership is not None:
                self._membership.leave()

    # ------------------------------------------------------------------ rank 0's envs
    @property
    def local_env(self):
        """Rank 0's own FastVLMRewardVecEnv (envs ``shards[0].envs``)."""
        return self._local

    @property
    def reward_model(self):
        """Rank 0's reward model (each rank has its own copy)."""
        return self._local.reward_model

    @property
    def task(self):
        return self._local.task

    @property
    def render_size(self):
        return self._local.render_size

    @property
    def episode_length(self):
        return self._local.episode_length

    @property
    def time_limit(self) -> str:
        return self._local.time_limit

    @property
    def traffic(self) -> dict[str, int]:
        """Bytes rank 0 sent to and received from the other ranks so far (payload and length words)."""
        return {
            "sent": sum(link.bytes_sent for link in self._links.values()),
            "received": sum(link.bytes_received for link in self._links.values()),
        }
