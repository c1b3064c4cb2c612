"""``vlmrm-fast train CONFIG.yaml``: SB3 training with a VLM reward, from a config file.

Writes into ``output_dir``: ``config.yaml`` (as resolved: the prompts and episode length
used), ``tensorboard/`` (VLM and ground-truth episode rewards side by side),
``videos/`` (policy mp4s), ``checkpoints/`` (model and replay buffer every
``checkpoint_every`` steps, at the end, and on SIGINT/SIGTERM; see checkpoints.py),
``final_model.zip`` (a byte copy of the final checkpoint's model), and ``run_files.json``, the
record of what it wrote (run_files.py): it deletes and writes over only files that record or a
checkpoint's manifest vouches for, never the config file given. ``--resume`` continues from the
newest intact checkpoint (damaged ones are moved into ``checkpoints/damaged/``; see
run_folder.py), or says a run whose final model is whole is finished; with ``--start-if-new`` it
starts the run when the folder holds no checkpoint yet (the first start of a restartable job).

Exit codes: 0 finished; 1 crashed (traceback; the checkpoints on disk stay whole), a
full disk, or a record edited while the run went on (one line each); 2 refused before starting (bad config, missing model, folder in use,
checkpoint of another run, no intact checkpoint to resume), nothing written; 130 / 143
stopped by SIGINT / SIGTERM after saving a checkpoint, or before training started.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import shlex
import signal
import sys
import threading
from typing import Any

import yaml
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.vec_env import VecMonitor

from vlmrm_fast.distributed import jobs as distributed_jobs
from vlmrm_fast.distributed.channel import RankFailure
from vlmrm_fast.envs import get_task
from vlmrm_fast.failures import EXIT_CRASHED, EXIT_DONE, EXIT_SIGINT, EXIT_SIGTERM, ExpectedFailure, mark_crash
from vlmrm_fast.reward.protocol import LearnsOnline
from vlmrm_fast.runtime.memory import check_replay_buffer_fits
from vlmrm_fast.stack.plan import StackPlan, plan_stack
from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.callbacks import (
    EpisodeBatchLogs,
    EpisodeBatchRewards,
    EpisodeStats,
    PolicyVideo,
    RewardLogger,
    RolloutCheckpoints,
    TrainingControl,
    TrainingProgress,
)
from vlmrm_fast.training.config import (
    ConfigError,
    TrainConfig,
    algorithm_kwargs,
    load_config,
    resolved,
    run_identity,
    unrecorded_fields,
)
from vlmrm_fast.training.curves import LearningCurves
from vlmrm_fast.training.records import RecordError
from vlmrm_fast.training.run_files import RunFiles
from vlmrm_fast.training.run_folder import (
    CONFIG_FILE,
    FINAL_MODEL,
    Inventory,
    ResumePoint,
    RunFolder,
    RunFolderError,
    check_resumed_choices,
    identity_hash,
    plain,
    resolved_choices,
)
from vlmrm_fast.training.signals import StopRequest, sigterm_raises
from vlmrm_fast.training.tensorboard import TensorBoardWriter

ALGORITHM_CLASSES = {"SAC": SAC, "PPO": PPO, "DQN": DQN}


def plan_run(cfg: TrainConfig) -> StackPlan | None:
    """The plan of the run's envs, made before anything is loaded (episode-batch scoring encodes the rollout's
    frames in batches that fill the device, evened out over a rollout); None on rank 0 of several ranks,
    where every rank plans its own envs and the ShardedVecEnv gives rank 0's plan once built."""
    if distributed_jobs.several_ranks():
        return None
    return plan_stack(cfg.env, cfg.reward, defer_rewards=cfg.rl.episode_batch, rollout_steps=rollout_steps(cfg))


def rollout_steps(cfg: TrainConfig) -> int | None:
    """The vec-env steps of one rollout when ``rl.kwargs.train_freq`` counts steps; None otherwise."""
    train_freq = cfg.rl.kwargs.get("train_freq", 1)
    if isinstance(train_freq, (list, tuple)) and len(train_freq) == 2 and train_freq[1] == "step":
        train_freq = train_freq[0]
    return train_freq if isinstance(train_freq, int) and not isinstance(train_freq, bool) else None


def make_env(cfg: TrainConfig, plan: StackPlan | None = None):
    """The run's envs, built from ``plan`` (:func:`plan_run`'s, made here when not given); under torchrun
    split over the ranks, each planning its own."""
    plan = plan or plan_run(cfg)
    if plan is None:
        return distributed_jobs.make_sharded_env(
            cfg.env, cfg.reward, cfg.distributed, seed=cfg.seed, defer_rewards=cfg.rl.episode_batch
        )
    return FastVLMRewardVecEnv.from_plan(plan, cfg.reward, seed=cfg.seed)


def check_rl_device(device: Any) -> None:
    """``rl.device`` refused as ``reward.device`` is: SB3 itself would fall back to the CPU without a word."""
    from vlmrm_fast.runtime.device import no_gpu_reason, resolve_device

    try:
        resolve_device(device)
    except RuntimeError:  # a GPU asked for where there is none
        raise ConfigError(
            f"rl.device: {device!r} asks for a GPU, but {no_gpu_reason()}; set it to cpu or auto"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"rl.{exc}") from None


def check_reward_weights(cfg: TrainConfig) -> None:
    """Fails in a line, before the envs are built, when the reward model's weights are neither cached nor
    downloadable now (offline, or the hub unreachable)."""
    cfg.reward.family.require_weights(cfg.reward)


def build_model(cfg: TrainConfig, venv, run_dir: pathlib.Path | None = None) -> BaseAlgorithm:
    algo = ALGORITHM_CLASSES[cfg.rl.algorithm]
    try:
        return algo(cfg.rl.policy, venv, seed=cfg.seed, device=cfg.rl.device, verbose=0, **algorithm_kwargs(cfg.rl))
    except TypeError as exc:
        raise ConfigError(f"rl.kwargs: {cfg.rl.algorithm} rejected the arguments: {exc}") from None
    except AssertionError as exc:  # SB3 checks spaces with asserts (e.g. DQN needs discrete actions)
        raise ConfigError(f"rl.algorithm: {cfg.rl.algorithm} cannot train task {cfg.task!r}: {exc}") from None


class OncePerStepLogger(Logger):
    """SB3's Logger, writing each scalar at most once per step.

    SB3 writes an off-policy run's logs when an episode ends, before that rollout's gradient steps
    record new ``train/*`` values; an on-policy run's last ``train/*`` values come after its last
    write. Written again at the same step (the run's last, or an episode end followed by another write
    at the same count), such a value would be a second point at one step, and TensorBoard would draw
    the curve back and forth. A write at the step already written keeps the values written first and
    adds only the keys that step has not had.
    """

    def __init__(self, folder: str | None, output_formats: list):
        super().__init__(folder, output_formats)
        self._written_step: int | None = None
        self._written: set[str] = set()

    def dump(self, step: int = 0) -> None:
        if step == self._written_step:
            for key in self._written & set(self.name_to_value):
                del self.name_to_value[key]
                self.name_to_count.pop(key, None)
                self.name_to_excluded.pop(key, None)
        else:
            self._written_step, self._written = step, set()
        self._written |= set(self.name_to_value)
        super().dump(step)


def _logger(
    cfg: TrainConfig, files: RunFiles, start_steps: int, curves: LearningCurves, wandb_run: Any = None
) -> tuple[Logger, list[str]]:
    """The run's logger, and the TensorBoard event files it writes (relative to the run folder: on the run's record
    from their creation on, and again at each :func:`_record_event_files`)."""
    if not cfg.logging.tensorboard:
        return OncePerStepLogger(None, [curves]), []
    folder = files.folder / "tensorboard" / f"{cfg.rl.algorithm}_1"
    # Logs of an earlier process of this run past the resume step describe work the resume discards.
    purge_step = start_steps + 1 if folder.exists() else None
    before = set(folder.iterdir()) if folder.is_dir() else set()
    writer = TensorBoardWriter(str(folder), purge_step)
    event_files = [path.relative_to(files.folder).as_posix() for path in sorted(set(folder.iterdir()) - before)]
    _record_event_files(files, event_files)
    formats: list = [writer, curves]
    if wandb_run is not None:  # W&B mirrors the TensorBoard files; videos go to it here (wandb_logging.py)
        from vlmrm_fast.training.wandb_logging import WandbVideos

        formats.append(WandbVideos(wandb_run))
    return OncePerStepLogger(str(folder), formats), event_files


def _record_event_files(files: RunFiles, event_files: list[str]) -> None:
    """Puts the TensorBoard event files the run appends to on its record as they are now (size and sha256)."""
    for relative in event_files:
        files.record_appended(relative)


def _write_pending_logs(model: BaseAlgorithm) -> None:
    """Writes what is recorded but not yet written (the final interval) at the current step."""
    pending = model.logger.name_to_value
    if "rollout/ep_vlm_reward_mean" in pending and isinstance(model, OffPolicyAlgorithm):
        model.dump_logs()  # with SB3's own episode and time records, as at any other episode end
    elif pending:
        model.logger.dump(model.num_timesteps)


def _load_checkpoint(cfg: TrainConfig, point: ResumePoint, env) -> BaseAlgorithm:
    """The model (and replay buffer) of the checkpoint to resume from; a RunFolderError if it does not load."""
    checkpoint = point.checkpoint
    try:
        model = ALGORITHM_CLASSES[cfg.rl.algorithm].load(point.model_file, env=env, device=cfg.rl.device)
        if point.replay_buffer and isinstance(model, OffPolicyAlgorithm):
            model.load_replay_buffer(checkpoint.replay_buffer)
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise RunFolderError(
            f"--resume: checkpoint {checkpoint.name} is whole by its manifest but does not load "
            f"({type(exc).__name__}: {detail}); nothing was changed. It may come from other versions of "
            f"stable-baselines3 or torch (see system_info.txt inside the zip): resume with those"
        ) from exc
    return model


def _learning_reward(venv: Any) -> LearnsOnline | None:
    """The run's reward model where it learns as the envs step (its state is part of each checkpoint), else None."""
    reward_model = getattr(venv, "reward_model", None)
    return reward_model if isinstance(reward_model, LearnsOnline) else None


def _restore_learned_reward(venv: Any, checkpoint: checkpoints.Checkpoint) -> None:
    """The reward model's learned state restored from ``checkpoint`` (one that learns as the envs step); a
    RunFolderError where the checkpoint holds none, or one that does not load."""
    learner = _learning_reward(venv)
    if learner is None:
        return
    if checkpoint.reward_state is None:
        raise RunFolderError(
            f"--resume: checkpoint {checkpoint.name} holds no learned reward state (model_reward_state_*.pt), and the "
            "run's reward model learns as the envs step: its network, labels and replay would start over. Nothing was "
            "changed; resume from a checkpoint that holds one, or start the run again (--overwrite)"
        )
    try:
        with open(checkpoint.reward_state, "rb") as f:
            learner.load_learned(f)
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise RunFolderError(
            f"--resume: the learned reward state {checkpoint.reward_state.name} of {checkpoint.name} does not load "
            f"({type(exc).__name__}: {detail}); nothing was changed"
        ) from exc


def _prepare_resumed(model: BaseAlgorithm, cfg: TrainConfig) -> None:
    # The simulations are not in the checkpoint: start new episodes (SB3 resets when _last_obs is None),
    # seeded so that a resume from the same checkpoint repeats.
    model._last_obs = None
    model.set_random_seed(cfg.seed + int(model.num_timesteps))
    buffer = getattr(model, "replay_buffer", None)
    if buffer is not None and getattr(buffer, "optimize_memory_usage", False) and (buffer.full or buffer.pos > 0):
        # With optimize_memory_usage the next observation is the next row: end the cut episode there (as SB3 does).
        buffer.dones[(buffer.pos - 1) % buffer.buffer_size] = True


def train(
    cfg: TrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    allow_empty_replay_buffer: bool = False,
    start_if_new: bool = False,
) -> int:
    """Trains as the config says; returns the exit code (module docstring). Expected failures
    (ConfigError, RunFolderError, a missing model, ...) raise before anything is written."""
    distributed_jobs.check_launch(cfg.reward)  # srun without torchrun, restarts on a shared store, a reward unsplit
    if distributed_jobs.serving_rank():  # torchrun rank != 0: step, render and score envs for rank 0; write nothing
        return distributed_jobs.serve_for_training(cfg.distributed)
    cfg = resolved(cfg)
    check_rl_device(cfg.rl.device)
    with sigterm_raises():
        lock = RunFolder(cfg.run_dir).lock()
    try:
        return _train(
            cfg,
            resume=resume,
            overwrite=overwrite,
            allow_empty_replay_buffer=allow_empty_replay_buffer,
            start_if_new=start_if_new,
        )
    finally:
        lock.release()


def _train(
    cfg: TrainConfig, *, resume: bool, overwrite: bool, allow_empty_replay_buffer: bool, start_if_new: bool
) -> int:
    identity = plain(run_identity(cfg))
    folder = RunFolder(cfg.run_dir)
    algorithm = cfg.rl.algorithm
    off_policy = issubclass(ALGORITHM_CLASSES[algorithm], OffPolicyAlgorithm)
    point: ResumePoint | None = None
    previous: Inventory | None = None  # a previous run's files, deleted once the model is set up
    adopt: list[str] = []
    with sigterm_raises():  # until training starts there is nothing to save: a SIGTERM stops the start
        folder.check_layout(algorithm)  # before any record is read: a link out of the folder is named as such
        folder.check_writable()
        if resume and start_if_new and not folder.holds_checkpoints():
            # A restarted or requeued job cut short before its first checkpoint: nothing to lose but its logs.
            previous = folder.check_unused(overwrite=True, algorithm=algorithm, given_config=cfg.source)
            print(
                f"--resume --start-if-new: no checkpoint in {folder.checkpoint_dir} yet; starting the run",
                file=sys.stderr,
            )
        elif resume:
            finished = folder.finished_model(identity)
            if finished is not None and finished[0] >= cfg.rl.total_timesteps:
                return _finished(cfg, *finished)
            adopt = folder.check_resumable(algorithm, cfg.source)
            point = folder.resume_point(
                identity, needs_replay_buffer=off_policy, allow_empty_replay_buffer=allow_empty_replay_buffer
            )
            unrecorded = unrecorded_fields(point.identity, identity)
            if unrecorded:
                print(
                    f"--resume: {point.checkpoint.name} was saved before {', '.join(unrecorded)} "
                    f"{'was' if len(unrecorded) == 1 else 'were'} part of the run identity: not compared with this "
                    f"config; leave {'it' if len(unrecorded) == 1 else 'them'} as the run started",
                    file=sys.stderr,
                )
            if point.checkpoint.steps >= cfg.rl.total_timesteps and not (point.damaged or point.incomplete or adopt):
                return _nothing_to_train(cfg, point, identity)  # (damage found is set aside by the load below)
        else:
            previous = folder.check_unused(overwrite=overwrite, algorithm=algorithm, given_config=cfg.source)
        print(startup_summary(cfg, point), flush=True)
        plan = plan_run(cfg)
        if plan is not None:  # (under torchrun rank 0's plan is known once the ranks have built their envs)
            _planned(plan, point, "stack")
        check_reward_weights(cfg)
        if cfg.logging.wandb is not None:
            from vlmrm_fast.training.wandb_logging import check_installed

            check_installed()
        venv = make_env(cfg, plan)
        monitored = VecMonitor(venv)
        try:
            if plan is None:
                _planned(venv.plan, point, "rank 0's stack")
            ready = ready_summary(cfg, venv)
            if ready:
                print(ready, flush=True)
            buffer = replay_buffer_size(cfg, venv)
            if buffer is not None:  # refused in a line before SB3 allocates it (numpy's error is 39 lines)
                check_replay_buffer_fits(buffer.transitions, buffer.each, f"{cfg.task}'s observations and actions")
            model, stats = _setup_model(cfg, monitored, point, off_policy)
            if previous is not None and previous.holds_a_run():
                for line in folder.clear(algorithm, cfg.source):
                    print(line, file=sys.stderr)
            if adopt:
                RunFiles(cfg.run_dir).adopt(adopt)
                print(
                    f"--resume: {cfg.run_dir} kept no record of the files its run wrote (a run from before records): "
                    f"recorded {', '.join(adopt)} as this run's",
                    file=sys.stderr,
                )
        except BaseException:
            monitored.close()
            raise
    stop = StopRequest()
    with stop.installed():  # until the envs are closed: a second signal never cuts the wind-down short
        try:
            return _run(cfg, model, venv, stats, folder, identity, stop, resumed=point is not None)
        except RecordError as exc:
            # A record edited while the run went on, met by the pruning after a save (which reads every manifest
            # first, and deletes nothing then): the run stops; its folder has changed since it started, so this is
            # no refusal (exit 2) but a stop mid-run, said in a line by the CLI (exit 1).
            exc.add_note(f"the run stopped at {int(model.num_timesteps):,} steps (what it saved is whole)")
            mark_crash(exc)
            raise
        finally:
            monitored.close()


def _where_to_go_on(folder: RunFolder) -> str:
    """What a crashed run's traceback says of its checkpoints: the newest, and the command that goes on."""
    try:
        newest = checkpoints.scan(folder.checkpoint_dir).newest()
    except RecordError:
        return "a record in its checkpoint folder is refused (above): fix it, then continue with --resume"
    if newest is None:
        return "no checkpoint was saved yet. Fix the cause, then start again with --overwrite"
    return f"the newest checkpoint is {newest.name} ({newest.steps} steps). Fix the cause, then continue with --resume"


def _planned(plan: StackPlan, point: ResumePoint | None, whose: str) -> None:
    """Prints the plan's line; a resume whose "auto" choices come out otherwise here is refused first."""
    if point is not None:
        check_resumed_choices(point.checkpoint.manifest.get("plan"), plan)
    print(f"  {whose:<19} {plan.describe()}", flush=True)


def _finished(cfg: TrainConfig, steps: int, vouched: str) -> int:
    """A resume of a run whose final model is whole (``vouched``: its sha256 on the run's record, or its final
    checkpoint's manifest) at rl.total_timesteps or more: the run is finished; nothing is loaded, trained or
    written."""
    print(
        f"nothing to train: the run finished at {steps:,} steps (rl.total_timesteps is {cfg.rl.total_timesteps:,}); "
        f"its final model {cfg.run_dir / FINAL_MODEL} is whole ({vouched}) and stays as it is. Raise "
        f"rl.total_timesteps, or pass --total-timesteps, to train on"
    )
    return EXIT_DONE


def _nothing_to_train(cfg: TrainConfig, point: ResumePoint, identity: dict[str, Any]) -> int:
    """A resume of a run that has reached rl.total_timesteps, its checkpoint folder whole: the newest checkpoint
    becomes the final model, without building envs or loading anything."""
    checkpoint = point.checkpoint
    RunFiles(cfg.run_dir).copy(FINAL_MODEL, checkpoint.model, steps=checkpoint.steps, identity=identity)
    print(
        f"nothing to train: the run is at {checkpoint.steps:,} of {cfg.rl.total_timesteps:,} steps "
        f"(rl.total_timesteps; raise it, or pass --total-timesteps, to train on); "
        f"{cfg.run_dir / FINAL_MODEL} is {checkpoint.name}"
    )
    return EXIT_DONE


def _default(cfg: TrainConfig, place: str) -> str:
    """ " (the default)" when the config left the field at ``place`` out, else ""."""
    return " (the default)" if cfg.left_out(place) else ""


def startup_summary(cfg: TrainConfig, point: ResumePoint | None) -> str:
    """What decides the run's cost, printed before anything is loaded: algorithm and steps, envs, model,
    folder; the fields left at their defaults are marked."""
    rl, r, lg = cfg.rl, cfg.reward, cfg.logging
    start = f"from {point.checkpoint.name} ({point.checkpoint.steps:,} steps)" if point else "from scratch"
    buffers = (
        f", the newest {lg.keep_replay_buffers} with the replay buffer (logging.keep_replay_buffers)"
        if issubclass(ALGORITHM_CLASSES[rl.algorithm], OffPolicyAlgorithm)
        else ""
    )
    return "\n".join(
        [
            f"vlmrm-fast train: {cfg.task}, {cfg.env.n_envs} envs; {start}",
            f"  rl.algorithm        {rl.algorithm}{_default(cfg, 'rl.algorithm')}",
            f"  rl.total_timesteps  {rl.total_timesteps:,}{_default(cfg, 'rl.total_timesteps')}",
            f"  reward.model        {r.model}{_default(cfg, 'reward.model')}",
            f"  output_dir          {cfg.run_dir.resolve()}{_default(cfg, 'output_dir')}",
            f"  checkpoints         every {lg.checkpoint_every:,} steps{_default(cfg, 'logging.checkpoint_every')}"
            f"{buffers}",
        ]
    )


def ready_summary(cfg: TrainConfig, venv: Any) -> str:
    """What the reward model came out as on this machine, printed once the envs are built (the plan's line
    came before): the encoder's backend, precision, batch and device (or the model's own ``describe()``: a judge
    of the episode's caches and their memory), and the replay buffer."""
    reward_model = getattr(venv, "reward_model", None)
    encoder = getattr(reward_model, "encoder", None)
    describe = getattr(encoder, "describe", None)
    lines = []
    if describe is not None:
        lines.append(f"  reward encoder      {describe()}")
    elif callable(getattr(reward_model, "describe", None)):  # a model that says what it keeps (a judge's caches)
        lines.append(f"  reward model        {reward_model.describe()}")
    buffer = replay_buffer_size(cfg, venv)
    if buffer is not None:
        default = "" if buffer.given else ", the default"
        keep = cfg.logging.keep_replay_buffers
        newest = "the newest checkpoint" if keep == 1 else f"each of the newest {keep} checkpoints"
        lines.append(
            f"  replay buffer       {buffer.transitions:,} transitions (rl.kwargs.buffer_size{default}): "
            f"{_gib(buffer.bytes)} in memory, and as much on disk in {newest} "
            f"(logging.keep_replay_buffers), in {(cfg.run_dir / 'checkpoints').resolve()}"
        )
    return "\n".join(lines)


def _write_config(cfg: TrainConfig, files: RunFiles) -> None:
    """``config.yaml``, the config as resolved, on the run's record; never over the config file given (a user's
    own ``RUN/config.yaml``, comments and all: the run reads the same config from it)."""
    given = (
        cfg.source is not None
        and cfg.source.is_file()
        and cfg.source.resolve() == (files.folder / CONFIG_FILE).resolve()
    )
    if not given:
        files.write_text(CONFIG_FILE, yaml.safe_dump(cfg.to_dict(), sort_keys=False))


@dataclasses.dataclass(frozen=True)
class ReplayBufferSize:
    """The replay buffer SB3 will allocate for the run: ``transitions`` of ``each`` bytes."""

    transitions: int
    each: int
    given: bool  # rl.kwargs.buffer_size was given (else the algorithm's default)

    @property
    def bytes(self) -> int:
        return self.transitions * self.each


def replay_buffer_size(cfg: TrainConfig, venv: Any) -> ReplayBufferSize | None:
    """What SB3's ReplayBuffer of an off-policy run holds (its arrays: observations, next observations unless
    ``optimize_memory_usage``, actions as float32, rewards, dones, time-outs), computed from the envs' spaces
    before it is allocated; None for an on-policy algorithm or a replay buffer class of the user's."""
    import inspect

    import numpy as np

    algorithm = ALGORITHM_CLASSES[cfg.rl.algorithm]
    kwargs = algorithm_kwargs(cfg.rl)
    if not issubclass(algorithm, OffPolicyAlgorithm) or kwargs.get("replay_buffer_class") is not None:
        return None
    obs, action = venv.observation_space, venv.action_space
    if not hasattr(obs, "shape") or obs.shape is None or not hasattr(action, "shape"):
        return None
    given = "buffer_size" in kwargs
    size = int(
        kwargs["buffer_size"] if given else inspect.signature(algorithm.__init__).parameters["buffer_size"].default
    )
    n_envs = venv.num_envs
    transitions = max(size // n_envs, 1) * n_envs  # SB3 keeps buffer_size // n_envs rows of n_envs
    copies = 1 if kwargs.get("optimize_memory_usage") else 2
    action_dtype = np.float32 if np.dtype(action.dtype) == np.float64 else np.dtype(action.dtype)
    each = (
        copies * int(np.prod(obs.shape)) * np.dtype(obs.dtype).itemsize
        + int(np.prod(action.shape or (1,))) * np.dtype(action_dtype).itemsize
        + 3 * 4  # rewards, dones, time-outs: float32
    )
    return ReplayBufferSize(transitions, each, given)


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def _setup_model(
    cfg: TrainConfig, env, point: ResumePoint | None, off_policy: bool
) -> tuple[BaseAlgorithm, EpisodeStats]:
    stats = EpisodeStats(env.num_envs, success_rule=get_task(cfg.task).success_rule)
    if point is None:
        return build_model(cfg, env), stats
    model = _load_checkpoint(cfg, point, env)
    for line in point.apply():  # the checkpoint loads: now remove what a kill cut short, set damage aside
        print(line, file=sys.stderr)
    checkpoint = point.checkpoint
    _restore_learned_reward(env, checkpoint)
    _prepare_resumed(model, cfg)
    stats.restore(checkpoint.manifest.get("episode_stats"))
    buffer_note = ""
    if off_policy:
        buffer_note = (
            " with its replay buffer"
            if point.replay_buffer
            else " with an EMPTY replay buffer (--allow-empty-replay-buffer)"
        )
    print(f"resuming from {checkpoint.name} at {model.num_timesteps} steps{buffer_note}", file=sys.stderr)
    return model, stats


def _run(
    cfg: TrainConfig,
    model: BaseAlgorithm,
    venv,
    stats: EpisodeStats,
    folder: RunFolder,
    identity: dict,
    stop: StopRequest,
    *,
    resumed: bool,
) -> int:
    run_dir = folder.path
    run_dir.mkdir(parents=True, exist_ok=True)
    files = RunFiles(run_dir)
    _write_config(cfg, files)
    start_steps = int(model.num_timesteps)
    wandb_run = None
    if cfg.logging.wandb is not None:  # before the TensorBoard writer, which W&B's sync then mirrors
        from vlmrm_fast.training.wandb_logging import start_run

        wandb_run = start_run(cfg, files, resumed=resumed)
    curves = LearningCurves(run_dir, start_steps)
    logger, event_files = _logger(cfg, files, start_steps, curves, wandb_run)
    model.set_logger(logger)
    extra = {"identity": identity, "config_hash": identity_hash(identity), "plan": resolved_choices(venv.plan)}

    learned = _learning_reward(venv)  # a reward that learns as the envs step: its state goes with each checkpoint

    def save(tag: str, reason: str) -> checkpoints.Checkpoint:
        # The curves first: a kill between the two leaves curves past the newest checkpoint, which a resume
        # drops and draws again, never a checkpoint whose curve rows are lost.
        curves.save()
        _record_event_files(files, event_files)
        return checkpoints.save_checkpoint(
            model,
            folder.checkpoint_dir,
            tag=tag,
            reason=reason,
            extra={**extra, "episode_stats": stats.state()},
            keep_replay_buffers=cfg.logging.keep_replay_buffers,
            keep_checkpoints=cfg.logging.keep_checkpoints,
            reward_state=learned.save_learned if learned is not None else None,
        )

    episode_batch = cfg.rl.episode_batch
    if episode_batch:
        from vlmrm_fast.reward.batch_scoring import FrameBatchScorer

        scorer = FrameBatchScorer(venv.reward_model, venv.reward_model.chunk_size)
        rewards = EpisodeBatchRewards(stats, scorer, cfg.env.env_reward_weight)
    else:
        rewards = RewardLogger(stats)
    periodic = RolloutCheckpoints(lambda tag: save(tag, "periodic"), cfg.logging.checkpoint_every)
    progress = TrainingProgress(cfg.rl.total_timesteps, stats)
    callbacks = [rewards] + ([EpisodeBatchLogs(stats)] if episode_batch else []) + [periodic, progress]
    if cfg.logging.video_every:
        callbacks.append(
            PolicyVideo(
                venv.plan.env_factory(),  # one env of the run's task, as the run draws and steps it
                venv.reward_model,
                run_dir / "videos",
                cfg.logging.video_every,
                cfg.logging.video_episodes,
                run_files=files,
            )
        )
    control = TrainingControl(callbacks, stop, on_policy=not isinstance(model, OffPolicyAlgorithm))

    remaining = cfg.rl.total_timesteps - start_steps
    try:
        if remaining > 0:
            learn_kwargs = {"log_interval": None} if episode_batch else {}
            model.learn(total_timesteps=remaining, callback=control, reset_num_timesteps=not resumed, **learn_kwargs)
    except RankFailure as exc:  # another rank died or hung: this rank's model and buffer are whole, keep them
        progress.close()
        saved = save("interrupted_", "another rank failed")
        print(f"\n{exc}\nsaved {saved.model} at {model.num_timesteps} steps; continue with --resume", file=sys.stderr)
        return EXIT_CRASHED
    except BaseException as exc:
        # The state mid-step may be inconsistent: no checkpoint of it; the ones on disk are whole.
        progress.close()
        exc.add_note(f"training stopped at {model.num_timesteps} steps with this error; {_where_to_go_on(folder)}.")
        mark_crash(exc)  # for the CLI: a crash, not a refusal
        raise
    if control.stopped:
        model.num_timesteps = control.resume_steps
    progress.close(model.num_timesteps)
    _write_pending_logs(model)
    curves.save()
    _record_event_files(files, event_files)
    if wandb_run is not None:  # the TensorBoard files complete, then W&B's last sync of them
        model.logger.close()
        wandb_run.finish()
    checkpoint = checkpoints.scan(folder.checkpoint_dir).newest()
    if checkpoint is None or checkpoint.steps != model.num_timesteps:
        checkpoint = save("interrupted_", f"stopped by {stop.name}") if control.stopped else save("", "final")
    if remaining <= 0:
        print(
            f"nothing to train: the run is at {model.num_timesteps} of {cfg.rl.total_timesteps} steps", file=sys.stderr
        )
    if control.stopped:
        print(
            f"{stop.name}: saved {checkpoint.model} at {model.num_timesteps} steps; continue with --resume",
            file=sys.stderr,
        )
        return stop.exit_code
    # A byte copy of the final checkpoint's model: its manifest vouches for it, and restores it from this copy.
    files.copy(FINAL_MODEL, checkpoint.model, steps=int(model.num_timesteps), identity=identity)
    note = f" ({stop.name} came after the last step)" if stop.requested else ""
    print(f"done: {model.num_timesteps} steps{note}; model, logs and videos in {run_dir}")
    return EXIT_DONE


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train an SB3 agent with a VLM reward from a YAML config",
        description="Exit codes: 0 finished; 1 crashed, or a full disk; 2 refused before starting (nothing "
        "written); 130/143 stopped by SIGINT/SIGTERM after saving a checkpoint, or before training started.",
    )
    p.add_argument("config", help="YAML config (see configs/)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest intact checkpoint in the run folder (damaged ones are moved aside)",
    )
    mode.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the previous run's files in the run folder (those its records vouch for, listed first; never "
        "yours, nor the config file given) and start over",
    )
    p.add_argument(
        "--start-if-new",
        action="store_true",
        help="--resume: start the run when the folder holds no checkpoint yet (the first start of a job that "
        "torchrun restarts or SLURM requeues with the same command); a damaged checkpoint still refuses",
    )
    p.add_argument(
        "--allow-empty-replay-buffer",
        action="store_true",
        help="--resume: accept a checkpoint without its replay buffer",
    )
    p.add_argument("--output-dir", help="override output_dir")
    p.add_argument("--total-timesteps", type=int, help="override rl.total_timesteps")
    p.set_defaults(
        func=_main,
        setup=True,
        interrupted="interrupted before training started; nothing was written",
        terminated="stopped by SIGTERM before training started; nothing was written",
    )


def _command(args: argparse.Namespace, mode: str) -> str:
    """This command line again, with ``mode`` (``--resume``, ``--overwrite``) for its mode."""
    words = ["vlmrm-fast", "train", args.config]
    if args.output_dir:
        words += ["--output-dir", args.output_dir]
    if args.total_timesteps is not None:
        words += ["--total-timesteps", str(args.total_timesteps)]
    return shlex.join([*words, mode])


def _main(args: argparse.Namespace) -> int:
    if args.start_if_new and not args.resume:
        raise ExpectedFailure("--start-if-new goes with --resume: add --resume")
    cfg = load_config(args.config)
    if args.output_dir:
        cfg.output_dir = args.output_dir
        cfg.given_too("output_dir")
    if args.total_timesteps is not None:
        cfg.rl = cfg.rl.replace(total_timesteps=args.total_timesteps)  # checked as the config's own
        cfg.given_too("rl.total_timesteps")
    try:
        code = train(
            cfg,
            resume=args.resume,
            overwrite=args.overwrite,
            allow_empty_replay_buffer=args.allow_empty_replay_buffer,
            start_if_new=args.start_if_new,
        )
    except checkpoints.SpaceError as exc:  # a full disk mid-run: said in a line; the checkpoints are whole
        try:
            saved = checkpoints.scan(cfg.run_dir / "checkpoints").newest() is not None
        except RecordError:
            saved = True  # (a manifest there is refused: --resume names it)
        then = "--resume" if saved else "--overwrite"
        print(f"vlmrm-fast train: {exc.strerror}; then run: {_command(args, then)}", file=sys.stderr)
        return EXIT_CRASHED
    except RecordError as exc:
        if not getattr(exc, "_vlmrm_crash", False):
            raise  # refused before the run changed anything: exit 2, in a line
        print(
            f"vlmrm-fast train: {exc}; {exc.__notes__[-1]}: fix the record, then run: {_command(args, '--resume')}",
            file=sys.stderr,
        )
        return EXIT_CRASHED
    if code in (EXIT_SIGINT, EXIT_SIGTERM) and threading.current_thread() is threading.main_thread():
        # Stopped by a signal, checkpoint saved, the process exits now: a late repeat of the signal must not
        # turn that clean exit into a kill.
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
    return code
