"""Training configuration: a YAML file checked field by field.

Every error names the field and says what would be accepted, e.g.
``rl.algorithm: 'SACC' is not one of SAC, PPO, DQN``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import pathlib
from typing import Any

import yaml

ALGORITHMS = ("SAC", "PPO", "DQN")


class ConfigError(ValueError):
    """A configuration field is missing, unknown or out of range."""

    label = "config error"


@dataclasses.dataclass
class RewardConfig:
    model: str = "ViT-bigG-14/laion2b_s39b_b160k"
    pretrained: str | None = None
    checkpoint: str | None = None
    target_prompts: list[str] | None = None  # default: the task's
    baseline_prompts: list[str] | None = None  # default: the task's
    alpha: float = 0.0
    backend: str = "auto"
    precision: str = "auto"
    device: str = "auto"
    cache_dir: str | None = None
    episode_batch: bool = False  # off-policy: score each rollout's frames in one batch, then fill the replay buffer
    # More prompt sets scored from the same encoder pass and logged per episode
    # (rollout/ep_vlm_reward_mean/<name>), beside the target prompts that drive the reward:
    # {name: prompt or [prompts]}, each with the baseline prompts and alpha above.
    also_score: dict[str, Any] | None = None
    env_reward_weight: float = 0.0  # rho: the agent learns from vlm + rho * env (FuRL's mix); 0: the VLM reward alone
    score_batch_size: int | None = None  # episode_batch: frames per encoder batch; default: what fills the GPU


@dataclasses.dataclass
class EnvConfig:
    n_envs: int = 4
    episode_length: int | None = None  # default: the task's
    render_size: int | None = None  # default: the task's
    physics: str = "auto"  # "batch" (MuJoCo tasks in the batch engine), "gym" (gymnasium envs) or auto
    renderer: str = "egl"  # MuJoCo tasks: "egl" (mujoco.Renderer's pixels) or "warp" (MuJoCo Warp)
    pipeline_chunks: Any = "auto"  # ranges of envs a step is scored in while the next is simulated
    rank_timeout: int = 1800  # seconds; under torchrun, how long a rank waits for another before it stops


@dataclasses.dataclass
class RLConfig:
    algorithm: str = "SAC"
    total_timesteps: int = 100_000
    policy: str = "MlpPolicy"
    device: str = "auto"
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)  # passed to the SB3 algorithm


@dataclasses.dataclass
class LoggingConfig:
    checkpoint_every: int = 10_000  # env steps (all envs counted)
    video_every: int = 10_000  # env steps; 0 disables videos
    video_episodes: int = 1
    tensorboard: bool = True


@dataclasses.dataclass
class TrainConfig:
    task: str
    output_dir: str = "runs/train"
    seed: int = 0
    reward: RewardConfig = dataclasses.field(default_factory=RewardConfig)
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    rl: RLConfig = dataclasses.field(default_factory=RLConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)

    @property
    def run_dir(self) -> pathlib.Path:
        return pathlib.Path(self.output_dir)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_RENAMED = {"EnvConfig": {"engine": "write env.physics: batch (was mujoco), gym or auto"}}


def _build(cls: type, data: Any, path: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping of fields, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        if key in _RENAMED.get(cls.__name__, {}):
            raise ConfigError(f"{path}{'.' if path else ''}{key}: renamed; {_RENAMED[cls.__name__][key]}")
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; fields are {', '.join(fields)}"
        raise ConfigError(f"{path}{'.' if path else ''}{key}: unknown field{hint}")
    kwargs = {}
    for name, field in fields.items():
        where = f"{path}.{name}" if path else name
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}: required field is missing")
            continue
        value = data[name]
        nested = (
            {"reward": RewardConfig, "env": EnvConfig, "rl": RLConfig, "logging": LoggingConfig}.get(name)
            if cls is TrainConfig
            else None
        )
        kwargs[name] = _build(nested, value, where) if nested else value
    return cls(**kwargs)


def _positive_int(value: Any, where: str, *, allow_none: bool = False, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    ok = isinstance(value, int) and not isinstance(value, bool) and (value > 0 or (allow_zero and value == 0))
    if not ok:
        raise ConfigError(f"{where}: expected a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")


def _prompt_list(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise ConfigError(f"{where}: expected a non-empty string or a list of non-empty strings, got {value!r}")
    return value


def validate(cfg: TrainConfig) -> TrainConfig:
    if not isinstance(cfg.task, str) or not cfg.task:
        raise ConfigError("task: expected a task name (e.g. humanoid-kneeling) or a gymnasium id")
    from vlmrm_fast.envs import get_task

    try:
        get_task(cfg.task)
    except ValueError as exc:
        raise ConfigError(f"task: {exc}") from None
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool):
        raise ConfigError(f"seed: expected an integer, got {cfg.seed!r}")
    r = cfg.reward
    if not isinstance(r.model, str) or not r.model:
        raise ConfigError("reward.model: expected a model name such as ViT-L-14/laion2b_s32b_b82k or vlmrm-tiny")
    r.target_prompts = _prompt_list(r.target_prompts, "reward.target_prompts")
    r.baseline_prompts = _prompt_list(r.baseline_prompts, "reward.baseline_prompts")
    if isinstance(r.alpha, bool) or not isinstance(r.alpha, (int, float)) or not 0.0 <= float(r.alpha) <= 1.0:
        raise ConfigError(f"reward.alpha: expected a number in [0, 1], got {r.alpha!r}")
    r.alpha = float(r.alpha)
    if not isinstance(r.episode_batch, bool):
        raise ConfigError(f"reward.episode_batch: expected true or false, got {r.episode_batch!r}")
    _positive_int(r.score_batch_size, "reward.score_batch_size", allow_none=True)
    if r.score_batch_size is not None and not r.episode_batch:
        raise ConfigError(
            "reward.score_batch_size: applies with reward.episode_batch: true (per-step scoring encodes one batch of n_envs)"
        )
    if (
        isinstance(r.env_reward_weight, bool)
        or not isinstance(r.env_reward_weight, (int, float))
        or not math.isfinite(r.env_reward_weight)
    ):
        raise ConfigError(
            f"reward.env_reward_weight: expected a number (rho in vlm + rho * env), got {r.env_reward_weight!r}"
        )
    r.env_reward_weight = float(r.env_reward_weight)
    if r.also_score is not None:
        if not isinstance(r.also_score, dict) or not r.also_score:
            raise ConfigError(f"reward.also_score: expected a mapping of names to prompts, got {r.also_score!r}")
        r.also_score = {
            str(name): _prompt_list(prompts, f"reward.also_score.{name}") for name, prompts in r.also_score.items()
        }
        if "target" in r.also_score:
            raise ConfigError("reward.also_score.target: the name 'target' is the target prompts' own; choose another")
        if r.episode_batch:
            raise ConfigError("reward.also_score: scored at each step; not with reward.episode_batch: true")
    e = cfg.env
    _positive_int(e.n_envs, "env.n_envs")
    _positive_int(e.rank_timeout, "env.rank_timeout")
    from vlmrm_fast.distributed.launch import launched

    if r.episode_batch and launched():
        raise ConfigError(
            "reward.episode_batch: not with several torchrun ranks (frames stay on the rank that drew them, "
            "which scores them every step); set it to false"
        )
    if e.renderer not in ("egl", "warp"):
        raise ConfigError(f"env.renderer: {e.renderer!r} is not one of egl, warp")
    if e.pipeline_chunks != "auto":
        _positive_int(e.pipeline_chunks, "env.pipeline_chunks")
    _positive_int(e.episode_length, "env.episode_length", allow_none=True)
    _positive_int(e.render_size, "env.render_size", allow_none=True)
    if e.physics not in ("auto", "batch", "gym"):
        raise ConfigError(f"env.physics: {e.physics!r} is not one of auto, batch, gym")
    rl = cfg.rl
    if rl.algorithm not in ALGORITHMS:
        raise ConfigError(f"rl.algorithm: {rl.algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    _positive_int(rl.total_timesteps, "rl.total_timesteps")
    if not isinstance(rl.kwargs, dict):
        raise ConfigError(f"rl.kwargs: expected a mapping of {rl.algorithm} arguments, got {rl.kwargs!r}")
    if r.episode_batch and rl.algorithm == "PPO":
        raise ConfigError(
            "reward.episode_batch: only for off-policy algorithms (SAC, DQN); PPO needs rewards at each step"
        )
    lg = cfg.logging
    _positive_int(lg.checkpoint_every, "logging.checkpoint_every")
    _positive_int(lg.video_every, "logging.video_every", allow_zero=True)
    _positive_int(lg.video_episodes, "logging.video_episodes")
    algorithm_kwargs(cfg)  # names the field of a wrong argument now, not minutes into training
    return cfg


def algorithm_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    """``rl.kwargs`` checked against the algorithm's signature, in the form SB3 wants (see algorithm_kwargs.py)."""
    from vlmrm_fast.training.algorithm_kwargs import KwargsError, check_algorithm_kwargs

    try:
        return check_algorithm_kwargs(cfg.rl.algorithm, cfg.rl.kwargs)
    except KwargsError as exc:
        raise ConfigError(str(exc)) from None


def resolved(cfg: TrainConfig) -> TrainConfig:
    """A copy with the task's defaults written in: the prompts and episode length the run uses."""
    from vlmrm_fast.envs import get_task

    cfg = copy.deepcopy(cfg)
    task = get_task(cfg.task)
    if cfg.reward.target_prompts is None:
        cfg.reward.target_prompts = list(task.target_prompts) or None
    if cfg.reward.baseline_prompts is None:
        cfg.reward.baseline_prompts = list(task.baseline_prompts)
    if cfg.env.episode_length is None:
        cfg.env.episode_length = task.episode_length
    return cfg


# What makes two runs the same run: a checkpoint continues only a run whose identity matches.
# Left out: output_dir, rl.total_timesteps (a resume may extend the budget), devices, backend,
# precision, caches, env.physics (the batch engine and gymnasium step the same physics) and logging.
_IDENTITY_FIELDS = {
    "task": None,
    "seed": None,
    "reward": (
        "model",
        "pretrained",
        "checkpoint",
        "target_prompts",
        "baseline_prompts",
        "alpha",
        "episode_batch",
        "env_reward_weight",
    ),
    "env": ("n_envs", "episode_length", "render_size", "renderer"),
    "rl": ("algorithm", "policy", "kwargs"),
}


def run_identity(cfg: TrainConfig) -> dict[str, Any]:
    """The fields of a resolved config that define the run (see _IDENTITY_FIELDS), as plain data."""
    data = cfg.to_dict()
    return {
        key: data[key] if fields is None else {f: data[key][f] for f in fields}
        for key, fields in _IDENTITY_FIELDS.items()
    }


def identity_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``["reward.alpha: 0.5 then, 0.25 now", ...]`` between two run identities."""
    out = []

    def walk(a: Any, b: Any, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict) and where.count(".") < 1:
            for key in dict.fromkeys(list(a) + list(b)):
                walk(a.get(key), b.get(key), f"{where}.{key}" if where else key)
        elif a != b:
            out.append(f"{where}: {a!r} then, {b!r} now")

    walk(saved, current, "")
    return out


def load_config(source: str | pathlib.Path | dict) -> TrainConfig:
    """Reads and validates a YAML file (or an already-parsed mapping)."""
    if isinstance(source, dict):
        data = source
    else:
        path = pathlib.Path(source)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return validate(_build(TrainConfig, data, ""))
