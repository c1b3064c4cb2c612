"""Training configuration: a YAML file checked field by field.

Every error names the field and says what would be accepted, e.g.
``rl.algorithm: 'SACC' is not one of SAC, PPO, DQN``.
"""

from __future__ import annotations

import dataclasses
import difflib
import pathlib
from typing import Any

import yaml

ALGORITHMS = ("SAC", "PPO", "DQN")


class ConfigError(ValueError):
    """A configuration field is missing, unknown or out of range."""


@dataclasses.dataclass
class RewardConfig:
    model: str = "ViT-bigG-14/laion2b_s39b_b160k"
    pretrained: str | None = None
    checkpoint: str | None = None
    target_prompts: list[str] | None = None      # default: the task's
    baseline_prompts: list[str] | None = None    # default: the task's
    alpha: float = 0.0
    backend: str = "auto"
    precision: str = "auto"
    device: str = "auto"
    cache_dir: str | None = None
    episode_batch: bool = False  # off-policy: score each rollout's frames in one batch, then fill the replay buffer


@dataclasses.dataclass
class EnvConfig:
    n_envs: int = 4
    episode_length: int | None = None   # default: the task's
    render_size: int | None = None      # default: the task's
    engine: str = "auto"
    rank_timeout: int = 1800            # seconds; under torchrun, how long a rank waits for another before it stops


@dataclasses.dataclass
class RLConfig:
    algorithm: str = "SAC"
    total_timesteps: int = 100_000
    policy: str = "MlpPolicy"
    device: str = "auto"
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)  # passed to the SB3 algorithm


@dataclasses.dataclass
class LoggingConfig:
    checkpoint_every: int = 10_000   # env steps (all envs counted)
    video_every: int = 10_000        # env steps; 0 disables videos
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


def _build(cls: type, data: Any, path: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping of fields, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
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
        nested = {"reward": RewardConfig, "env": EnvConfig, "rl": RLConfig, "logging": LoggingConfig}.get(name) if cls is TrainConfig else None
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
    from vlmrm_fast.distributed.launch import launched
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
    e = cfg.env
    _positive_int(e.n_envs, "env.n_envs")
    _positive_int(e.episode_length, "env.episode_length", allow_none=True)
    _positive_int(e.render_size, "env.render_size", allow_none=True)
    _positive_int(e.rank_timeout, "env.rank_timeout")
    if r.episode_batch and launched():
        raise ConfigError("reward.episode_batch: not with several torchrun ranks (frames stay on the rank that drew them, "
                          "which scores them every step); set it to false")
    if e.engine not in ("auto", "mujoco", "gym"):
        raise ConfigError(f"env.engine: {e.engine!r} is not one of auto, mujoco, gym")
    rl = cfg.rl
    if rl.algorithm not in ALGORITHMS:
        raise ConfigError(f"rl.algorithm: {rl.algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    _positive_int(rl.total_timesteps, "rl.total_timesteps")
    if not isinstance(rl.kwargs, dict):
        raise ConfigError(f"rl.kwargs: expected a mapping of {rl.algorithm} arguments, got {rl.kwargs!r}")
    if r.episode_batch and rl.algorithm == "PPO":
        raise ConfigError("reward.episode_batch: only for off-policy algorithms (SAC, DQN); PPO needs rewards at each step")
    lg = cfg.logging
    _positive_int(lg.checkpoint_every, "logging.checkpoint_every")
    _positive_int(lg.video_every, "logging.video_every", allow_zero=True)
    _positive_int(lg.video_episodes, "logging.video_episodes")
    return cfg


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
