"""ShardedVecEnv: on rank 0, the whole VecEnv of a torchrun job whose envs are split over its ranks.

Rank 0 steps its own envs (a FastVLMRewardVecEnv; none with ``learner_envs=0``) while every other
rank steps, renders and scores its envs on its own device (``serve.serve_shard``); their
observations, rewards, dones and infos come back in parallel (``channel.receive_all``). Env ``i``
of the whole run is seeded ``seed + i`` on whichever rank it lives, so the run equals one process
with all the envs. Every rank beats on the job's store (``heartbeat``): a dead or frozen rank is
named within the heartbeat timeout, also while rank 0 learns or saves between steps.
"""

from __future__ import annotations

import dataclasses
import datetime
import pickle
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from vlmrm_fast.distributed.channel import Link, RankFailure, receive_all, signals_held
from vlmrm_fast.distributed.config import DEFAULTS, DistributedConfig
from vlmrm_fast.distributed.heartbeat import Heartbeat
from vlmrm_fast.distributed.launch import (
    DEFAULT_TIMEOUT,
    Launch,
    LayoutError,
    as_timeout,
    check_reward_splits,
    join,
    plan_shards,
    shard_devices,
)
from vlmrm_fast.distributed.protocol import CLOSE, Built, Call, Refuse, Reply, ShardSpec, rank_timings
from vlmrm_fast.distributed.timings import RankClock, RankTimes, table
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.stack.actions import check_actions

if TYPE_CHECKING:
    from vlmrm_fast.stack.plan import StackPlan

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
    if not len(envs):
        return "no envs (the learner only)"
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
    env: EnvSpec,
    reward: RewardModelSpec,
    seed: int | None,
    options: dict,
    launches: list[Launch],
    distributed: DistributedConfig = DEFAULTS,
) -> tuple[list[range], list[str], list[ShardSpec | None]]:
    """Each rank's envs, device and spec (env ``i`` of the run seeded ``seed + i``; None: a rank
    without envs); :class:`LayoutError` if the job cannot run."""
    ranges = plan_shards(env.n_envs, len(launches), distributed.learner_envs)
    devices = shard_devices(reward.device, launches)
    specs = [
        ShardSpec(
            env.replace(n_envs=len(envs)),
            reward.replace(device=rank_device),
            envs,
            None if seed is None else seed + envs.start,
            options,
            distributed,
        )
        if len(envs)
        else None
        for envs, rank_device in zip(ranges, devices)
    ]
    return ranges, devices, specs


class ShardedVecEnv(VecEnv):
    """``num_envs`` envs of ``task`` split over the ranks of a torchrun job; built on rank 0,
    while every other rank runs :func:`~vlmrm_fast.distributed.serve_shard`.

    ``env_kwargs`` are :class:`~vlmrm_fast.FastVLMRewardVecEnv`'s (sent to every rank, so they
    must pickle; no ``reward_model``, no ``defer_rewards``). ``device="auto"`` puts each rank
    on its own GPU (``cuda:LOCAL_RANK``, or ``cuda:0`` of the GPUs a scheduler gave it through
    CUDA_VISIBLE_DEVICES; the CPU without GPUs), which becomes the rank's current CUDA device;
    an explicit ``"cuda:K"`` lets ranks share a GPU.

    The split and the failure bounds are :class:`~vlmrm_fast.distributed.DistributedConfig`'s
    (``learner_envs``: rank 0's envs, 0 for none; ``timeout``: seconds or a timedelta rank 0 waits
    for one rank's answer to one call; ``heartbeat`` and ``heartbeat_timeout``: a rank that dies or
    freezes is named within the latter, also between steps; ``report_every``: seconds between two
    per-rank time tables). A failed rank stops the run with a :class:`RankFailure` naming every
    failed rank. Rank ``r`` holds envs ``shards[r].envs``.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        *,
        timeout: datetime.timedelta | float = DEFAULT_TIMEOUT,
        learner_envs: int | None = None,
        heartbeat: float = DistributedConfig.heartbeat,
        heartbeat_timeout: float = DistributedConfig.heartbeat_timeout,
        report_every: float = DistributedConfig.report_every,
        verbose: int = 1,
        **env_kwargs: Any,
    ):
        from vlmrm_fast.stack.plan import specs_of_arguments

        for name, why in REFUSED_ARGUMENTS.items():
            if env_kwargs.get(name):
                raise ValueError(f"ShardedVecEnv: {name}= is not supported: {why}")
        env, reward, options = specs_of_arguments(type(self).__name__, task, num_envs, env_kwargs)
        assert isinstance(reward, RewardModelSpec), "reward_model= is refused above"
        config = DistributedConfig(
            learner_envs=learner_envs,
            timeout=as_timeout(timeout).total_seconds(),
            heartbeat=heartbeat,
            heartbeat_timeout=heartbeat_timeout,
            report_every=report_every,
        )
        self._build(env, reward, config, options, verbose)

    @classmethod
    def from_specs(
        cls,
        env: EnvSpec,
        reward: RewardModelSpec,
        distributed: DistributedConfig = DEFAULTS,
        *,
        seed: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        verbose: int = 1,
    ) -> ShardedVecEnv:
        """The sharded env of ``env`` scored by ``reward``, laid out as ``distributed`` says, the settings
        taken whole (what ``vlmrm-fast train`` builds under torchrun)."""
        sharded = cls.__new__(cls)
        options = {name: value for name, value in (("seed", seed), ("env_kwargs", env_kwargs)) if value is not None}
        sharded._build(env, reward, distributed, options, verbose)
        return sharded

    def _build(
        self, env: EnvSpec, reward: RewardModelSpec, config: DistributedConfig, options: dict[str, Any], verbose: int
    ) -> None:
        options = dict(options)
        seed = options.pop("seed", None)
        self.config = config
        check_reward_splits(reward.needs)
        try:
            pickle.dumps((env, reward, options))
        except Exception as exc:
            raise ValueError(f"ShardedVecEnv: the env arguments travel to every rank and must pickle: {exc}") from None
        self.launch = Launch.detect()
        if self.launch.rank != 0:
            raise RuntimeError(
                f"rank {self.launch.rank}: ShardedVecEnv is built on rank 0; the other ranks call serve_shard()"
            )
        self.timeout = as_timeout(self.config.timeout)
        self.verbose = verbose
        self.clock = RankClock()
        self._closed = False
        self._local = None
        self._local_actions: np.ndarray | None = None
        self._learner_model = None
        self._learner_plan: StackPlan | None = None
        self._failure: RankFailure | None = None
        self._lock = threading.Lock()  # between the heartbeat's thread and a gather: see _gather
        self._waiting = False
        self._abandoned = False
        self._profiling = False
        self._last_step_end: float | None = None
        self._last_report = time.monotonic()
        self._heartbeat: Heartbeat | None = None
        self._membership = join(self.timeout) if self.launch.world_size > 1 else None
        group = self._membership.group if self._membership else None
        self._links = {r: Link(group, r, "a serving rank", self.timeout) for r in range(1, self.launch.world_size)}
        self._awaiting: set[int] = set(self._links)  # ranks whose next message is not read yet: first, who they are
        try:
            if self._membership is not None:
                self._heartbeat = Heartbeat(
                    self._membership.group,
                    0,
                    interval=self.config.heartbeat,
                    timeout=self.config.heartbeat_timeout,
                    on_silence=self._on_silence,
                )
            launches = [self.launch] + [launch for _, launch in sorted(self._complete(None, "joining").items())]
            try:
                ranges, devices, specs = lay_out(env, reward, seed, options, launches, self.config)
            except LayoutError as refusal:
                self._refuse(str(refusal))
                raise
            for rank, link in self._links.items():
                link.name = f"{envs_text(ranges[rank])} on {launches[rank].host}"
            self._post({rank: spec for rank, spec in enumerate(specs) if rank != 0})
            if self._heartbeat is not None:
                self._heartbeat.watch({rank: link.name for rank, link in self._links.items()})
            self._env = env
            self._learner_reward = reward.replace(device=devices[0])
            self._local = specs[0].build() if specs[0] is not None else None
            built: dict[int, Built] = self._complete(None, "building its envs")
        except LayoutError:
            raise
        except BaseException:
            self.close()
            raise
        if self._local is not None:
            built[0] = Built.of(self._local)
        self.shards = [
            Shard(r, envs, built[r].device if r in built else devices[r], launches[r].host)
            for r, envs in enumerate(ranges)
        ]
        first = built[min(built)]
        self._built = first
        super().__init__(env.n_envs, first.observation_space, first.action_space)
        self.render_mode = "rgb_array"
        if verbose:
            print(f"{env.n_envs} envs of {env.task} over {len(self.shards)} rank(s):")
            for shard in self.shards:
                print("  " + shard.describe())
            sys.stdout.flush()

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
            if self._heartbeat is not None:
                self._heartbeat.close()
            if self._membership is not None:
                self._membership.leave()

    # ------------------------------------------------------------------ failures
    def _on_silence(self, found: dict[int, str]) -> None:
        """The heartbeat's thread found ranks silent: names them now; a gather under way is ended at
        once (the group is given up), else the run stops at rank 0's next call to the envs."""
        for why in found.values():
            print(f"rank 0: {why}; the run stops at rank 0's next call to the envs", file=sys.stderr, flush=True)
        with self._lock:
            if self._waiting and self._membership is not None and not self._abandoned:
                self._abandoned = True
                assert self._heartbeat is not None
                self._heartbeat.announce_stop("; ".join(found.values()))
                self._membership.abandon(min(found))

    def _failure_of(self, failures: list[RankFailure]) -> RankFailure:
        """One failure naming every failed rank: the heartbeat's silent ranks, then the others whose
        own wait failed (not those whose wait only ended because the group was given up)."""
        silent = dict(self._heartbeat.silent) if self._heartbeat is not None else {}
        named: dict[int, RankFailure] = {rank: RankFailure(why, rank, kind="silent") for rank, why in silent.items()}
        for failure in failures:
            if failure.rank in named or (failure.kind == "collateral" and self._abandoned):
                continue
            named[failure.rank] = failure
        return RankFailure.of(list(named.values()) or failures)

    def _raise_failure(self) -> None:
        """Raises the run's failure: an earlier one, or ranks the heartbeat found silent since."""
        if self._failure is None and self.silent_ranks:
            self._failure = self._failure_of([])
        if self._failure is not None:
            raise self._failure

    @property
    def silent_ranks(self) -> dict[int, str]:
        """The ranks the heartbeat found dead or frozen, and why (the run stops at its next call)."""
        return dict(self._heartbeat.silent) if self._heartbeat is not None else {}

    # ------------------------------------------------------------------ messages
    def _post(self, messages: dict[int, Any]) -> None:
        """Sends each serving rank its message and posts the receive of its reply (after reading any
        reply left by an interrupted call)."""
        if self._closed:
            raise RuntimeError("the sharded env is closed")
        self._raise_failure()
        self._drain()
        for rank, message in messages.items():
            with signals_held():
                self._links[rank].send(message)
                self._awaiting.add(rank)
                self._links[rank].expect()

    def _gather(self, doing: str) -> dict[int, Any]:
        """Every awaited reply by rank, read in parallel within one timeout (a RankFailure for a rank
        that failed; a rank the heartbeat found silent is not waited for)."""
        with self._lock:  # the heartbeat's thread gives the group up only while this waits: see _on_silence
            silent = dict(self._heartbeat.silent) if self._heartbeat is not None else {}
            self._waiting = True
        try:
            for rank, why in silent.items():
                self._links[rank].fail(RankFailure(why, rank, kind="silent"))
            deadline = time.monotonic() + self.timeout.total_seconds()
            with signals_held():
                replies = receive_all(
                    {rank: self._links[rank] for rank in sorted(self._awaiting)}, doing, deadline=deadline
                )
                self._awaiting.clear()
        finally:
            with self._lock:
                self._waiting = False
        return replies

    def _complete(self, local: Call | None, doing: str = "answering") -> dict[int, Any]:
        """Runs ``local`` on rank 0's envs, then reads every awaited reply; returns the results by rank.
        All replies are read before any error is raised, so every rank stays in step. A step
        (``doing="stepping"``) is timed on rank 0's clock: its own step, then the gather."""
        clock = self.clock if doing == "stepping" else None
        outcomes: dict[int, Reply] = {}
        local_error: BaseException | None = None
        if local is not None and self._local is not None:
            start = time.perf_counter()
            try:
                outcomes[0] = Reply(value=getattr(self._local, local.method)(*local.args, **local.kwargs))
            except Exception as error:
                local_error = error
            if clock is not None:
                clock.add("step", time.perf_counter() - start)
        if self._failure is not None:
            raise self._failure
        failures: list[RankFailure] = []
        if self._awaiting:
            start = time.perf_counter()
            for rank, reply in self._gather(doing).items():
                if isinstance(reply, RankFailure):
                    failures.append(reply)
                else:
                    outcomes[rank] = reply
            if clock is not None:
                clock.add("gather", time.perf_counter() - start)
        if failures:
            self._failure = self._failure_of(failures)
            raise self._failure
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
        """Reads the replies an interrupted call left (a failure stays with its link)."""
        if self._awaiting:
            self._gather("finishing an interrupted call")

    def _holding(self) -> list[Shard]:
        """The ranks that hold envs (rank 0 may hold none)."""
        return [shard for shard in self.shards if len(shard.envs)]

    def _each(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self._call({shard.rank: Call(method, args, kwargs) for shard in self._holding()})

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
        now = time.perf_counter()
        if self._last_step_end is not None:
            self.clock.add("outside", now - self._last_step_end)
            self._last_step_end = None
        actions = check_actions(actions, self.action_space, self.num_envs)
        self._post({s.rank: Call("step", (actions[s.envs.start : s.envs.stop],)) for s in self.shards[1:]})
        local = self.shards[0].envs
        self._local_actions = actions[local.start : local.stop]

    def step_wait(self):
        if self._local_actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        actions, self._local_actions = self._local_actions, None
        results = self._complete(Call("step", (actions,)) if self._local is not None else None, "stepping")
        obs, rewards, dones, infos = zip(*(value for _, value in sorted(results.items())))
        self.clock.steps += 1
        self._last_step_end = time.perf_counter()
        if self.config.report_every and self._last_step_end - self._last_report >= self.config.report_every:
            self._report()
        return _concat(obs), np.concatenate(rewards), np.concatenate(dones), [info for part in infos for info in part]

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Env ``i`` of the whole run gets ``seed + i`` at the next reset, on whichever rank it lives."""
        calls = {s.rank: Call("seed", (None if seed is None else seed + s.envs.start,)) for s in self._holding()}
        return [value for part in self._call(calls) for value in part]

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        if isinstance(options, list):
            calls = {s.rank: Call("set_options", (options[s.envs.start : s.envs.stop],)) for s in self._holding()}
        else:
            calls = {s.rank: Call("set_options", (options,)) for s in self._holding()}
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
        """Closes every rank's envs: the serving ranks answer and leave; then this rank leaves the group.
        After a failure, the serving ranks still connected are closed as well, and the others find
        rank 0's reason on the store."""
        if self._closed:
            return
        try:
            if self._failure is None and self.verbose and self.clock.steps:
                try:
                    print(self.rank_table(), flush=True)
                except RankFailure:
                    pass  # the failure is the caller's to report
        finally:
            self._closed = True
            self._close()

    def _close(self) -> None:
        try:
            if self._failure is not None and self._heartbeat is not None:
                self._heartbeat.announce_stop(f"rank 0 ended the run: {self._failure}")
            try:
                self._drain()
            except RankFailure:
                pass
            with signals_held():
                for rank, link in self._links.items():
                    if link.failure is None:
                        try:
                            link.send(CLOSE)
                            link.expect()
                            self._awaiting.add(rank)
                        except RankFailure:
                            pass
            if self._awaiting:
                self._gather("closing")
        finally:
            if self._local is not None:
                self._local.close()
            if self._heartbeat is not None:
                self._heartbeat.close(keys=tuple(self._links))
            if self._membership is not None:
                self._membership.leave()

    # ------------------------------------------------------------------ per-rank times
    def profile(self, enabled: bool = True) -> ShardedProfile:
        """Times each stage of every rank's step from now on (``env.profile()`` on every rank, see
        :mod:`vlmrm_fast.runtime.profiling`) and starts every rank's clock over; ``.table()`` of the result is
        :meth:`rank_table`."""
        calls = {s.rank: Call("profile", (enabled,)) for s in self._holding() if s.rank != 0}
        self._post(calls)
        if self._local is not None:
            self._local.profile(enabled)
        self._complete(None, "starting its profile")
        self.clock.reset()
        self._profiling = enabled
        return ShardedProfile(self)

    def rank_times(self, *, reset: bool = False) -> list[RankTimes]:
        """Every rank's steps and milliseconds per step since the last reset (or :meth:`profile`)."""
        self._post({s.rank: Call("timings") for s in self._holding() if s.rank != 0})
        remote = self._complete(None, "reporting its times")
        mine = (
            rank_timings(self._local, self.clock)
            if self._local is not None
            else {
                "steps": self.clock.steps,
                "ms": self.clock.per_step_ms(),
                "stages": {},
            }
        )
        rows = [
            RankTimes(s.rank, f"{s.device} on {s.host}", envs_text(s.envs), **(mine if s.rank == 0 else remote[s.rank]))
            for s in self.shards
            if s.rank == 0 or s.rank in remote
        ]
        if reset:
            self._post({s.rank: Call("profile", (self._profiling,)) for s in self._holding() if s.rank != 0})
            if self._local is not None:
                self._local.profile(self._profiling)
            self._complete(None, "starting its clock over")
            self.clock.reset()
        return rows

    def rank_table(self, *, reset: bool = False) -> str:
        """:meth:`rank_times` as a table, one line per rank, the slowest step marked."""
        return table(self.rank_times(reset=reset))

    def _report(self) -> None:
        self._last_report = time.monotonic()
        if self.verbose:
            print(self.rank_table(reset=True), flush=True)

    # ------------------------------------------------------------------ rank 0's envs
    @property
    def plan(self) -> StackPlan:
        """Rank 0's plan: that of its own envs (``shards[0].envs``; each rank plans its own), or with
        ``learner_envs=0`` that of one env on rank 0's device, made on first use (a run's videos and their
        reward model read it)."""
        if self._local is not None:
            return self._local.plan
        if self._learner_plan is None:
            from vlmrm_fast.stack.plan import plan_stack

            self._learner_plan = plan_stack(self._env.replace(n_envs=1), self._learner_reward)
        return self._learner_plan

    @property
    def reward_model(self):
        """Rank 0's reward model (each rank has its own copy); with ``learner_envs=0``, loaded here on
        first use (to score videos) on rank 0's device."""
        if self._local is not None:
            return self._local.reward_model
        if self._learner_model is None:
            from vlmrm_fast.stack.plan import load_for

            self._learner_model = load_for(self.plan, self._learner_reward)
        return self._learner_model

    @property
    def task(self):
        return self._local.task if self._local is not None else self._env.task_spec()

    @property
    def render_size(self):
        return self._built.render_size

    @property
    def renderer(self):
        """The renderer rank 0's envs draw with (None: gymnasium envs, or none on rank 0); ``"auto"`` resolves on each
        rank."""
        return self._local.renderer if self._local is not None else None

    @property
    def episode_length(self):
        return self._built.episode_length

    @property
    def time_limit(self) -> str:
        return self._env.time_limit

    @property
    def traffic(self) -> dict[str, int]:
        """Bytes rank 0 sent to and received from the other ranks so far (payload and length words)."""
        return {
            "sent": sum(link.bytes_sent for link in self._links.values()),
            "received": sum(link.bytes_received for link in self._links.values()),
        }


class ShardedProfile:
    """What :meth:`ShardedVecEnv.profile` returns: ``table()`` prints every rank's times."""

    def __init__(self, env: ShardedVecEnv):
        self.env = env

    def table(self) -> str:
        return self.env.rank_table()

    def __str__(self) -> str:
        return self.table()
