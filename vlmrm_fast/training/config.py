"""Training configuration: a YAML file of the package's own schemas, checked field by field.

    output_dir, seed
    reward:   a RewardModelSpec (vlmrm_fast.reward.spec): model, prompts, alpha, device, precision, ...
    env:      an EnvSpec (vlmrm_fast.envs.spec): task, n_envs, episode_length, render_size, renderer, ...
    rl:       RLConfig: the SB3 algorithm, its arguments (checked against its signature), episode_batch
    logging:  LoggingConfig: checkpoints, videos, TensorBoard
    distributed: DistributedConfig (vlmrm_fast.distributed.config): rank 0's envs, timeout, heartbeat

The file is read as UTF-8 YAML by :func:`read_yaml`, which refuses a key given twice in one mapping
(PyYAML would keep the last). One generic loader (:func:`_build`) turns the YAML mapping into these
dataclasses; each dataclass checks its own fields, and every error names the field's place, e.g.
``rl.algorithm: 'SACC' is not one of SAC, PPO, DQN`` or ``env.n_envs: must be a positive integer, got 0``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import pathlib
import typing
from collections.abc import Hashable
from typing import Any

import yaml

from vlmrm_fast.checks import FieldError, FieldTypeError, boolean, non_negative_int, one_of, positive_int
from vlmrm_fast.distributed.config import DistributedConfig
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.reward.spec import RewardModelSpec

ALGORITHMS = ("SAC", "PPO", "DQN")
#: Off-policy algorithms: they can take their rewards after a rollout (rl.episode_batch).
OFF_POLICY = ("SAC", "DQN")

# Fields that moved, by their old place: a config that still uses one is told where it went.
MOVED = {
    "task": "env.task",
    "reward.episode_batch": "rl.episode_batch",
    "reward.score_batch_size": "reward.batch_size",
    "reward.tasks": "reward.criteria (the same list: each one's kind and fields)",
    "reward.env_reward_weight": "env.env_reward_weight",
    "env.rank_timeout": "distributed.timeout (a rank's answer to one call; rank 0's updates and saves between "
    "calls are covered by distributed.heartbeat_timeout)",
}


#: The metadata of a dataclass field that is not a config field (the loader neither reads nor reports it).
_NOT_IN_YAML = {"yaml": False}


class ConfigError(ValueError):
    """A configuration field is missing, unknown or out of range."""

    label = "config error"


@dataclasses.dataclass
class RLConfig:
    """The SB3 algorithm and its arguments (``kwargs``, checked against the algorithm's signature).
    ``episode_batch`` (off-policy): the env returns no reward while collecting; each rollout's frames
    are scored in batches of ``reward.batch_size`` before the gradient steps."""

    algorithm: str = "SAC"
    total_timesteps: int = 100_000
    policy: str = "MlpPolicy"
    device: str = "auto"
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    episode_batch: bool = False

    def __post_init__(self) -> None:
        one_of(self.algorithm, "algorithm", ALGORITHMS)
        self.total_timesteps = positive_int(self.total_timesteps, "total_timesteps")
        if not isinstance(self.kwargs, dict):
            raise FieldTypeError("kwargs", f"must be a mapping of {self.algorithm} arguments, got {self.kwargs!r}")
        self.episode_batch = boolean(self.episode_batch, "episode_batch")
        if self.episode_batch and self.algorithm not in OFF_POLICY:
            raise FieldError(
                "episode_batch",
                f"only for off-policy algorithms ({', '.join(OFF_POLICY)}); PPO needs rewards at each step",
            )
        algorithm_kwargs(self)  # names the field of a wrong argument now, not minutes into training

    def replace(self, **changes: Any) -> RLConfig:
        return dataclasses.replace(self, **changes)


#: W&B's modes a run may log in (``disabled``: leave ``logging.wandb`` out instead)
WANDB_MODES = ("online", "offline")


@dataclasses.dataclass
class WandbConfig:
    """``logging.wandb``: the run's config, scalars and videos also go to Weights & Biases (``pip
    install 'vlmrm-fast[wandb]'``), in ``project``; ``mode: offline`` writes them under the run folder
    for ``wandb sync`` later. A ``--resume`` continues the same W&B run (docs/training.md)."""

    project: str
    mode: str = "online"

    def __post_init__(self) -> None:
        if not isinstance(self.project, str) or not self.project.strip():
            raise FieldTypeError("project", f"must be a W&B project name, got {self.project!r}")
        one_of(self.mode, "mode", WANDB_MODES)


@dataclasses.dataclass
class LoggingConfig:
    checkpoint_every: int = 10_000  # env steps (all envs counted)
    video_every: int = 10_000  # env steps; 0 disables videos
    video_episodes: int = 1
    tensorboard: bool = True
    # Off-policy: how many of the newest checkpoints keep their replay buffer. 2 costs one more buffer file
    # on disk (as large as model_replay_buffer_*.pkl) and lets --resume keep the buffer when the newest is damaged.
    keep_replay_buffers: int = 1
    # How many of the newest checkpoints to keep, besides the best (the highest mean VLM return of the training
    # episodes when it was saved); null keeps every one. The newest is deleted never, and older ones only once
    # the newest reads back whole.
    keep_checkpoints: int | None = None
    wandb: WandbConfig | None = None

    def __post_init__(self) -> None:
        self.checkpoint_every = positive_int(self.checkpoint_every, "checkpoint_every")
        self.video_every = non_negative_int(self.video_every, "video_every")
        self.video_episodes = positive_int(self.video_episodes, "video_episodes")
        self.tensorboard = boolean(self.tensorboard, "tensorboard")
        self.keep_replay_buffers = positive_int(self.keep_replay_buffers, "keep_replay_buffers")
        self.keep_checkpoints = positive_int(self.keep_checkpoints, "keep_checkpoints", allow_none=True)
        if self.wandb is not None and not isinstance(self.wandb, WandbConfig):
            raise FieldTypeError("wandb", f"must be {{project: NAME, mode: online|offline}}, got {self.wandb!r}")
        if self.wandb is not None and not self.tensorboard:
            raise FieldError("wandb", "mirrors the TensorBoard logs (wandb's TensorBoard sync): keep tensorboard: true")


@dataclasses.dataclass
class TrainConfig:
    env: EnvSpec
    reward: RewardModelSpec = dataclasses.field(default_factory=RewardModelSpec)
    rl: RLConfig = dataclasses.field(default_factory=RLConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)
    output_dir: str = "runs/train"
    seed: int = 0
    # The fields the config file gave, by their place ("rl.algorithm"): the start-up summary marks the others
    # "(the default)". None for a config not read from a file: there a field equal to its default counts as left out.
    given: frozenset[str] | None = dataclasses.field(default=None, compare=False, repr=False, metadata=_NOT_IN_YAML)
    # The config file it was read from (None: not read from a file): a run never deletes or writes over it.
    source: pathlib.Path | None = dataclasses.field(default=None, compare=False, repr=False, metadata=_NOT_IN_YAML)

    def __post_init__(self) -> None:
        if not isinstance(self.output_dir, str) or not self.output_dir:
            raise FieldTypeError("output_dir", f"must be a folder path, got {self.output_dir!r}")
        self.seed = non_negative_int(self.seed, "seed")
        buffer_size = self.rl.kwargs.get("buffer_size")
        if isinstance(buffer_size, int) and 0 < buffer_size < self.env.n_envs:
            raise FieldError(
                "rl.kwargs.buffer_size",
                f"{buffer_size} is fewer transitions than env.n_envs={self.env.n_envs} (SB3 keeps buffer_size // n_envs "
                f"rows of n_envs transitions, at least one row); give at least {self.env.n_envs}",
            )
        learner_envs = self.distributed.learner_envs
        if learner_envs is not None and learner_envs > self.env.n_envs:
            raise FieldError("distributed.learner_envs", f"{learner_envs} is more than env.n_envs={self.env.n_envs}")
        if self.rl.episode_batch:
            if self.reward.also_score:
                raise FieldError("reward.also_score", "scored at each step; not with rl.episode_batch: true")
            from vlmrm_fast.distributed.launch import launched

            if launched():
                raise FieldError(
                    "rl.episode_batch",
                    "not with several torchrun ranks (frames stay on the rank that drew them, which scores them "
                    "every step); set it to false",
                )

    @property
    def task(self) -> str:
        return self.env.task

    @property
    def run_dir(self) -> pathlib.Path:
        """``output_dir`` as a folder, ``~`` and ``~user`` expanded as a shell would (in the config, and in a
        ``--output-dir=~/x`` the shell left alone)."""
        return pathlib.Path(self.output_dir).expanduser()

    def to_dict(self) -> dict[str, Any]:
        """The config as plain YAML data (lists, not tuples)."""
        data = dataclasses.asdict(self)
        del data["given"], data["source"]
        return json.loads(json.dumps(data, default=str))

    def left_out(self, place: str) -> bool:
        """Whether the field at ``place`` (``"rl.algorithm"``) was left out of the config, so has its default."""
        if self.given is not None:
            return place not in self.given
        section, _, name = place.rpartition(".")
        holder = getattr(self, section) if section else self
        field = next(f for f in dataclasses.fields(holder) if f.name == name)
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        return getattr(holder, name) == default

    def given_too(self, *places: str) -> None:
        """Records fields set after loading (command-line overrides) as given."""
        if self.given is not None:
            self.given = self.given | set(places)


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field holds: its type, or the dataclass of ``Dataclass | None``."""
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return members[0] if len(members) == 1 and dataclasses.is_dataclass(members[0]) else None  # type: ignore[return-value]


def _build(cls: type, data: Any, path: str, given: set[str]) -> Any:
    """An instance of the dataclass ``cls`` from a YAML mapping: nested dataclasses by their field's
    type, unknown and moved fields named, and the dataclass's own checks reported at ``path``. The
    places of the fields the mapping gives are added to ``given``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping of fields, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.metadata.get("yaml", True)}
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else str(key)
            if where in MOVED:
                raise ConfigError(f"{where}: moved; write {MOVED[where]}")
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; fields are {', '.join(fields)}"
            raise ConfigError(f"{where}: unknown field{hint}")
    kwargs = {}
    for name, field in fields.items():
        where = f"{path}.{name}" if path else name
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}: required field is missing")
            continue
        given.add(where)
        nested = _dataclass_of(hints[name])
        kwargs[name] = _build(nested, data[name], where, given) if nested and data[name] is not None else data[name]
    try:
        return cls(**kwargs)
    except FieldError as exc:
        raise ConfigError(exc.at(path)) from None


def algorithm_kwargs(rl: RLConfig) -> dict[str, Any]:
    """``rl.kwargs`` checked against the algorithm's signature, in the form SB3 wants (see algorithm_kwargs.py)."""
    from vlmrm_fast.training.algorithm_kwargs import check_algorithm_kwargs

    return check_algorithm_kwargs(rl.algorithm, rl.kwargs)


def resolved(cfg: TrainConfig) -> TrainConfig:
    """A copy with the task's defaults written in: the prompts, episode length and frame size the run uses."""
    from vlmrm_fast.envs import get_task

    reward = cfg.reward.with_task_defaults(get_task(cfg.env.task))
    if reward.prompt_order is None and _judge_reward(dataclasses.asdict(reward)):
        from vlmrm_fast.models.judge.prompt import DEFAULT_PROMPT_ORDER

        reward = reward.replace(prompt_order=DEFAULT_PROMPT_ORDER)  # the identity records the order the judge asks in
    return dataclasses.replace(cfg, env=cfg.env.with_task_defaults(), reward=reward)


def _judge_reward(reward: dict[str, Any]) -> bool:
    """Whether a reward section (a spec's fields) asks for a generative VLM judge."""
    from vlmrm_fast.models.judge.judge_models import is_judge_name

    criteria = reward.get("criteria") or ()
    asks = any(isinstance(c, dict) and ("question" in c or c.get("kind") == "question") for c in criteria)
    return is_judge_name(reward.get("model", "")) or asks


# What makes two runs the same run: a checkpoint continues only a run whose identity matches. Every field of the
# config is part of it (the sections' fields one by one: a field added to EnvSpec, RewardModelSpec or RLConfig is
# part of it from the start) but those listed here, each with the reason a resume may change it. docs/training.md
# lists both.
IDENTITY_SECTIONS = ("env", "reward", "rl")
IDENTITY_EXEMPT: dict[str, str] = {
    "output_dir": "where the run is kept, not what it learns (--output-dir)",
    "logging": "what is written about the run (checkpoints, videos, curves, TensorBoard, W&B), not what it learns",
    "distributed": "how the envs spread over torchrun's ranks; each env steps and is scored the same on any rank",
    "rl.total_timesteps": "a resume may extend the budget (--total-timesteps)",
    "rl.device": "where the policy learns; the same computation, to float precision",
    "env.pipeline_chunks": "the ranges a step is scored in; the rewards do not depend on them (a test compares)",
    "reward.device": "where frames are scored; the same rewards, to float precision (a run may resume elsewhere)",
    "reward.backend": "how the image tower runs (eager, compiled, TensorRT); the same encoder, to float precision",
    "reward.precision": "the encoder's arithmetic; rounding only (a run on a GPU's fp16 may resume on a CPU's fp32)",
    "reward.batch_size": "frames per encoder batch; each frame is scored on its own",
    "reward.cache_dir": "where the weights are cached; the same weights",
    "reward.tokenizer": "where the model's own tokenizer is read from; the same tokens",
    "reward.encoder_options": "the backend's own options (compile mode, attention kernel, engine cache)",
    "reward.also_score": "prompt sets scored and logged beside the reward; the agent learns from the target prompts",
}


def _physics_dynamics(env: dict[str, Any]) -> Any:
    """The dynamics ``env.physics`` steps, as its row of ``physics.PHYSICS`` declares them (``Physics.dynamics``):
    two backends of the same dynamics ("auto", and the rows it picks among) run the same run."""
    from vlmrm_fast.physics import dynamics_of

    physics = env.get("physics", "auto")
    return dynamics_of(physics) if isinstance(physics, str) else physics


def _solver_run(env: dict[str, Any]) -> Any:
    """The constraint solver ``env.solver`` runs under the physics: None is the physics' default (its row's
    ``default_solver``; the model's own where it has none)."""
    from vlmrm_fast.physics import PHYSICS

    physics = env.get("physics")
    row = PHYSICS.get(physics) if isinstance(physics, str) else None
    return row.solver_for(env.get("solver")) if row is not None else env.get("solver")


# Identity fields whose values name the same thing in several ways: compared by what they run.
_COMPARED_AS = {"env.physics": _physics_dynamics, "env.solver": _solver_run}
# Identity fields whose "auto" resolves by the machine (one renderer on a GPU, another on a CPU): each checkpoint records
# what it resolved to (run_folder.RESOLVED_CHOICES) and a resume compares that with its own plan, so "auto" on
# either side here is the same as the value it stands for.
_RESOLVED_APART = ("env.renderer",)


def run_identity(cfg: TrainConfig) -> dict[str, Any]:
    """The fields of a resolved config that define the run (all but ``IDENTITY_EXEMPT``), as plain data."""
    data = cfg.to_dict()
    identity: dict[str, Any] = {}
    for name, value in data.items():
        if name in IDENTITY_EXEMPT:
            continue
        if name in IDENTITY_SECTIONS:
            identity[name] = {key: v for key, v in value.items() if f"{name}.{key}" not in IDENTITY_EXEMPT}
        else:
            identity[name] = value
    return identity


# Identity fields added since checkpoints were first written, with the value older runs had. An identity field
# a checkpoint's manifest lacks and this table does not know is not compared (the resume names it).
_ADDED_ENV_FIELDS = {
    "time_limit": "truncate",
    "scene_assets": None,
    "score_terminal_on": "terminal_state",
    "drawn_positions": "reached",
}


def upgraded_identity(saved: dict[str, Any]) -> dict[str, Any]:
    """A run identity saved before fields moved (``MOVED``) or were added, in the current layout."""
    saved = json.loads(json.dumps(saved))
    if "task" in saved:
        reward = saved.get("reward", {})
        saved.setdefault("env", {})["task"] = saved.pop("task")
        saved["env"]["env_reward_weight"] = reward.pop("env_reward_weight", 0.0)
        saved.setdefault("rl", {})["episode_batch"] = reward.pop("episode_batch", False)
    env = saved.get("env")
    if isinstance(env, dict) and env:
        for name, value in _ADDED_ENV_FIELDS.items():
            env.setdefault(name, value)
    reward = saved.get("reward")
    if isinstance(reward, dict) and "tasks" in reward:  # the reward's criteria were its tasks
        reward["criteria"] = reward.pop("tasks")
    if isinstance(reward, dict) and reward and "prompt_order" not in reward:
        # A judge asked its question before the frame until the order became a field (image first by default).
        reward["prompt_order"] = "question_first" if _judge_reward(reward) else None
        reward.setdefault("do_image_splitting", None)
        reward.setdefault("longest_edge", None)
    if isinstance(reward, dict) and reward:
        reward.setdefault("preference", None)  # a reward learned from a judge's preferences came later
        reward.setdefault("prefix", None)  # a judge of the episode so far came later
        if isinstance(reward.get("window"), dict):
            reward["window"].setdefault("reads", None)  # a judge's window reads came later: a window read all
    return saved


def _places(identity: dict[str, Any]) -> dict[str, Any]:
    """``{"reward.alpha": 0.5, "seed": 0, ...}``: an identity's fields by their place in the config."""
    out = {}
    for name, value in identity.items():
        if name in IDENTITY_SECTIONS and isinstance(value, dict):
            out.update({f"{name}.{key}": v for key, v in value.items()})
        else:
            out[name] = value
    return out


def identity_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``["reward.alpha: 0.5 then, 0.25 now", ...]`` between two run identities: the fields both hold whose
    values differ (by what they run, for the fields of ``_COMPARED_AS``)."""
    then, now = _places(saved), _places(current)
    if not then:
        return ["the saved run identity is unreadable"]
    out = []
    for place in [p for p in now if p in then]:
        section = place.split(".")[0]
        compared = _COMPARED_AS.get(place)
        if place in _RESOLVED_APART and "auto" in (then[place], now[place]):
            same = True
        elif compared is not None:  # (equal values are the same: a change it follows from is named on its own)
            same = then[place] == now[place] or compared(saved.get(section) or {}) == compared(
                current.get(section) or {}
            )
        else:
            same = then[place] == now[place]
        if not same:
            out += _value_differences(place, then[place], now[place])
    return out


def _value_differences(place: str, then: Any, now: Any) -> list[str]:
    """``["reward.window.frames: 8 then, 16 now"]``: the innermost fields where two values of the field at ``place``
    differ (a mapping's keys and a list's items of equal length, one by one), rather than the whole blocks."""
    if isinstance(then, dict) and isinstance(now, dict):
        out = []
        for key in [*then, *(k for k in now if k not in then)]:
            if then.get(key, _ABSENT) != now.get(key, _ABSENT):
                out += _value_differences(f"{place}.{key}", then.get(key, _ABSENT), now.get(key, _ABSENT))
        return out
    if isinstance(then, list) and isinstance(now, list) and len(then) == len(now):
        return [
            d for i, (a, b) in enumerate(zip(then, now)) if a != b for d in _value_differences(f"{place}[{i}]", a, b)
        ]
    return [f"{place}: {_shown(then)} then, {_shown(now)} now"]


_ABSENT = object()  # a key one of two mappings lacks


def _shown(value: Any, most: int = 120) -> str:
    """A value as the refusal shows it: its repr, cut short past ``most`` characters; ``absent`` for a missing key."""
    if value is _ABSENT:
        return "absent"
    text = repr(value)
    return text if len(text) <= most else f"{text[: most - 5]} ...{text[-1]}"


def unrecorded_fields(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The identity fields ``current`` has and ``saved`` lacks (a checkpoint written before they were part of
    the identity): not compared."""
    then = _places(saved)
    return [place for place in _places(current) if place not in then]


def _yaml_error(path: pathlib.Path, exc: yaml.YAMLError) -> str:
    """PyYAML's several lines in one: ``FILE:LINE:COLUMN: not valid YAML: the problem``."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and start is not None and start is not mark:
        context += f" begun at line {start.line + 1}"
    context = f" ({' '.join(context.split())})" if context else ""
    return (
        f"{where}: not valid YAML: {problem}{context}; fix that line (check its indentation, and quote values with ':')"
    )


class _DuplicateKey(yaml.MarkedYAMLError):
    """A key given twice in one mapping of a config file."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping. PyYAML itself keeps the last one
    silently: a second ``env:`` would replace the first, and the run would train another task."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *defaults" merges a mapping; its keys may be given again (they then win)
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # PyYAML refuses an unhashable key itself
            if key in first_line:
                raise _DuplicateKey(
                    problem=f"{key!r} is given twice in one mapping (first at line {first_line[key]}; YAML would "
                    f"keep the last silently); keep one",
                    problem_mark=key_node.start_mark,
                )
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: pathlib.Path) -> Any:
    """A config file's YAML data; a ConfigError in one line naming the file for a folder, an unreadable
    file, text that is not UTF-8, a key given twice or YAML that does not parse."""
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.y*ml"))[:4]
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        raise ConfigError(f"config file {str(path)!r} is a folder{hint}; give the path of a YAML file")
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {str(path)!r} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            f"save it as UTF-8"
        ) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as exc:
        mark = exc.problem_mark
        raise ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error(path, exc)) from None


def load_config(source: str | pathlib.Path | dict) -> TrainConfig:
    """Reads and checks a YAML file (or an already-parsed mapping)."""
    data = source if isinstance(source, dict) else read_yaml(pathlib.Path(source))
    given: set[str] = set()
    cfg = _build(TrainConfig, data, "", given)
    cfg.given = frozenset(given)
    cfg.source = None if isinstance(source, dict) else pathlib.Path(source)
    return cfg
