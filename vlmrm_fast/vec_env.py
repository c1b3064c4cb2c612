"""FastVLMRewardVecEnv: a Stable-Baselines3 VecEnv whose reward is a CLIP reward model's.

One ``step_wait``, range of envs by range of envs (``pipeline_chunks``): the
simulations advance and their reached states are drawn (MuJoCo tasks: the batch
engine, ``envs/mujoco_engine.py``, with the EGL or the MuJoCo Warp renderer;
others: gymnasium envs, all stepped with the first range), the renderer lends
the frames in place and the reward model scores them (``pipeline.py``: on a GPU
the next range is simulated and drawn while this one is encoded). Then the
rewards come to the host, and observations are made and finished envs reset (a
terminal step is scored on its own frame). The env's own reward is kept in
``info["gt_reward"]``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import gymnasium
import numpy as np
import torch
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from vlmrm_fast.device import build_info, resolve_device
from vlmrm_fast.envs import TaskSpec, get_task
from vlmrm_fast.envs.mujoco_engine import RENDERERS
from vlmrm_fast.frames import HostFrames
from vlmrm_fast.pipeline import ChunkedScorer, plan_chunks
from vlmrm_fast.profiling import NULL_TIMER, StageTimer
from vlmrm_fast.reward import load_reward_model
from vlmrm_fast.reward.tasks import normalize_prompts
from vlmrm_fast.wrappers import RecordFrame, pop_frames

DEFAULT_MODEL = "ViT-bigG-14/laion2b_s39b_b160k"  # the paper's largest model
ENGINES = ("auto", "mujoco", "gym")


def check_actions(actions: Any, action_space: gymnasium.Space, num_envs: int) -> np.ndarray:
    """Validates a batch of actions before any simulation state is touched."""
    actions = np.asarray(actions)
    if actions.dtype.kind not in "biuf":
        kind = "integers" if isinstance(action_space, gymnasium.spaces.Discrete) else "numbers"
        found = type(actions.flat[0]).__name__ if actions.size else "no"
        raise TypeError(
            f"actions must be {kind}, an array of shape {(num_envs,) + tuple(action_space.shape)} for {num_envs} envs of "
            f"{action_space}; got dtype {actions.dtype} ({found} values)"
        )
    if isinstance(action_space, gymnasium.spaces.Discrete):
        if actions.shape not in ((num_envs,), (num_envs, 1)):
            raise ValueError(f"actions must have shape ({num_envs},) for {num_envs} envs, got {actions.shape}")
        if not np.issubdtype(actions.dtype, np.integer):
            if not np.all(np.isfinite(actions)) or np.any(actions != np.round(actions)):
                raise ValueError("discrete actions must be integers")
        flat = actions.reshape(num_envs).astype(np.int64)
        if np.any(flat < action_space.start) or np.any(flat >= action_space.start + action_space.n):
            raise ValueError(f"discrete actions must be in [{action_space.start}, {action_space.start + action_space.n})")
        return flat
    expected = (num_envs,) + tuple(action_space.shape)
    if actions.shape != expected:
        raise ValueError(f"actions must have shape {expected} (num_envs x action dims), got {actions.shape}")
    if np.issubdtype(actions.dtype, np.floating) and not np.all(np.isfinite(actions)):
        bad = np.unique(np.nonzero(~np.isfinite(actions))[0])
        raise ValueError(f"actions contain NaN or inf (envs {bad.tolist()}); the environments were not stepped")
    return actions


def _render_shape(render_size: Any) -> tuple[int, int] | None:
    if render_size is None:
        return None
    if isinstance(render_size, (int, np.integer)) and not isinstance(render_size, bool):
        size = (int(render_size), int(render_size))
    elif isinstance(render_size, Sequence) and len(render_size) == 2 and all(isinstance(v, (int, np.integer)) for v in render_size):
        size = (int(render_size[0]), int(render_size[1]))
    else:
        raise ValueError(f"render_size must be an int or (height, width), got {render_size!r}")
    if min(size) < 8 or max(size) > 4096:
        raise ValueError(f"render_size {size} is outside [8, 4096] pixels; CLIP takes e.g. 224 or the paper's 480")
    return size


class GymSimulation:
    """The generic path: gymnasium envs stepped by SB3's DummyVecEnv, frames recorded in step infos."""

    def __init__(self, env_fns: Sequence[Callable[[], gymnasium.Env]]):
        self.venv = DummyVecEnv([lambda fn=fn: RecordFrame(fn()) for fn in env_fns])
        self.observation_space, self.action_space = self.venv.observation_space, self.venv.action_space
        self.frames = HostFrames()
        self._result: tuple | None = None

    def advance(self, actions: np.ndarray, rows: slice, stream=None, timer: StageTimer = NULL_TIMER) -> None:
        """Gymnasium envs step one after another in Python, so all of them step with the first range."""
        if rows.start == 0:
            with timer.stage("physics_render"):
                self._result = self.venv.step(actions)
                self.frames.stack(pop_frames(self._result[3]))

    def lend(self, rows: slice, stream=None):
        return self.frames.lend(rows, stream)

    def finish(self, timer: StageTimer = NULL_TIMER):
        result, self._result = self._result, None
        return result

    def last_frames(self, device: Any = None) -> torch.Tensor:
        return self.frames.tensor

    def reset(self) -> Any:
        return self.venv.reset()

    def seed(self, seed: int | None) -> Sequence[int | None]:
        return self.venv.seed(seed)

    def set_options(self, options: list[dict] | dict | None) -> None:
        self.venv.set_options(options)

    def get_images(self):
        return self.venv.get_images()

    def get_attr(self, name: str, indices=None) -> list[Any]:
        return self.venv.get_attr(name, indices)

    def set_attr(self, name: str, value: Any, indices=None) -> None:
        self.venv.set_attr(name, value, indices)

    def env_method(self, name: str, *args, indices=None, **kwargs) -> list[Any]:
        return self.venv.env_method(name, *args, indices=indices, **kwargs)

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        return self.venv.env_is_wrapped(wrapper_class, indices)

    def close(self) -> None:
        self.venv.close()


def _mujoco_simulation(spec: TaskSpec, num_envs: int, render_size: tuple[int, int], episode_length: int | None, device: torch.device, renderer: str):
    from vlmrm_fast.envs.mujoco_engine import MujocoBatchSimulation

    gpu = device.index if device.type == "cuda" else None  # draw on the reward model's GPU
    return MujocoBatchSimulation(spec.batch, num_envs, render_size=render_size, episode_length=episode_length, gpu=gpu, renderer=renderer)


def _task_names(reward_model: Any) -> tuple[str, ...]:
    """The reward model's task names, unique (each is logged under its name)."""
    names = tuple(task.name for task in reward_model.tasks)
    if len(set(names)) != len(names):
        raise ValueError(f"reward task names must be unique to be logged apart, got {list(names)}; give each task a name=")
    return names


def _choose_engine(engine: str, spec: TaskSpec, renderer: str) -> str:
    if engine == "gym":
        return "gym"
    if spec.batch is None:
        if engine == "mujoco":
            raise ValueError(f"task {spec.name!r} has no batch-engine version; use engine='gym' (or 'auto')")
        return "gym"
    if renderer == "egl" and not build_info()["egl_available"]:
        if engine == "mujoco":
            raise RuntimeError(f"engine='mujoco' with renderer='egl' needs headless EGL: {build_info()['egl_error']}; "
                               "or use renderer='warp'")
        return "gym"
    return "mujoco"


class FastVLMRewardVecEnv(VecEnv):
    """A VecEnv of ``num_envs`` copies of ``task`` rewarded by a CLIP model.

    ``task`` names a built-in task (``vlmrm_fast.envs.TASKS``: the paper's humanoid
    poses, ``cartpole``, ``mountain-car``, ``mountain-car-textured``) or any
    gymnasium id. Prompts default to the task's; ``model`` is an open_clip name as
    in :func:`~vlmrm_fast.load_reward_model` (or pass a loaded ``reward_model`` to
    share one between envs). ``tasks=[...]`` (:class:`~vlmrm_fast.GoalBaselineTask`,
    :class:`~vlmrm_fast.BinaryTask` or dicts) scores several prompt sets from one encoder
    pass: the first drives the reward, and every step's ``info["vlm_rewards"]`` holds all of
    them by task name (training logs each per episode). ``env_reward_weight`` (rho, default 0)
    mixes in the env's own reward, ``vlm + rho * env`` as FuRL does; the VLM part then stays in
    ``info["vlm_reward"]``. ``engine="mujoco"`` runs MuJoCo tasks in the batch
    engine, ``"gym"`` through gymnasium envs, ``"auto"`` picks the former when it can.
    ``renderer`` draws the batch engine's frames: ``"egl"`` (OpenGL, the same pixels as
    ``mujoco.Renderer``) or ``"warp"`` (MuJoCo Warp's ray tracer, all envs in one GPU
    launch; ``pip install 'vlmrm-fast[warp]'``). ``pipeline_chunks`` splits a step's envs
    into ranges scored while the next is simulated and drawn (``"auto"``: up to 4 on a
    GPU, 1 on the CPU); fixed-batch encoders are built for the largest range.
    """

    def __init__(
        self,
        task: str,
        num_envs: int = 1,
        *,
        target_prompts: str | Sequence[str] | None = None,
        baseline_prompts: str | Sequence[str] | None = None,
        alpha: float = 0.0,
        tasks: Sequence[Any] | None = None,
        model: str = DEFAULT_MODEL,
        pretrained: str | None = None,
        checkpoint: str | None = None,
        reward_model: Any = None,
        episode_length: int | None = None,
        render_size: int | tuple[int, int] | None = None,
        device: str = "auto",
        backend: str = "auto",
        precision: str = "auto",
        seed: int | None = None,
        engine: str = "auto",
        renderer: str = "egl",
        pipeline_chunks: int | str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        defer_rewards: bool = False,
        env_reward_weight: float = 0.0,
        **reward_options: Any,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        if engine not in ENGINES:
            raise ValueError(f"engine {engine!r} is unknown; use one of {ENGINES}")
        if renderer not in RENDERERS:
            raise ValueError(f"renderer {renderer!r} is unknown; use one of {RENDERERS}")
        if episode_length is not None and (isinstance(episode_length, bool) or not isinstance(episode_length, (int, np.integer)) or episode_length < 1):
            raise ValueError(f"episode_length must be a positive integer or None, got {episode_length!r}")
        if isinstance(env_reward_weight, bool) or not isinstance(env_reward_weight, (int, float)) or not np.isfinite(env_reward_weight):
            raise ValueError(f"env_reward_weight must be a finite number (rho in vlm + rho * env), got {env_reward_weight!r}")
        self.env_reward_weight = float(env_reward_weight)
        num_envs = int(num_envs)
        spec = get_task(task)
        self.task = spec
        self.render_size = _render_shape(render_size) or spec.render_size
        self.episode_length = episode_length or spec.episode_length
        self.engine = _choose_engine(engine, spec, renderer)
        if renderer == "warp" and self.engine != "mujoco":
            raise ValueError(f"renderer='warp' draws the MuJoCo batch engine's tasks; task {spec.name!r} runs on gymnasium envs "
                             "(engine='gym'), which draw their own frames")
        self.renderer = renderer if self.engine == "mujoco" else None
        if self.engine == "mujoco" and env_kwargs:
            raise ValueError("env_kwargs apply to gymnasium envs; use engine='gym' to pass them")
        chunks = plan_chunks(num_envs, pipeline_chunks, reward_model.device if reward_model is not None else resolve_device(device))
        # Fixed-batch backends (compile, TensorRT) are built for one range of envs.
        reward_options.setdefault("batch_size", max(rows.stop - rows.start for rows in chunks))
        if tasks is not None:
            if target_prompts is not None or baseline_prompts is not None or alpha:
                raise ValueError("give either target_prompts/baseline_prompts/alpha or tasks=[...], not both")
            reward_options["tasks"] = tasks
        self.reward_model = reward_model or self._load_model(
            spec, target_prompts, baseline_prompts, alpha, model, pretrained, checkpoint, device, backend, precision, reward_options
        )
        self.reward_tasks = _task_names(self.reward_model)
        if self.engine == "mujoco":
            self._sim = _mujoco_simulation(spec, num_envs, self.render_size, self.episode_length, self.reward_model.device, renderer)
        else:
            self._sim = GymSimulation([self._env_factory(spec, env_kwargs)] * num_envs)
        self._finish_init(num_envs, defer_rewards, chunks)
        if seed is not None:
            # Applied now, so stepping without reset() starts from (and auto-resets with) seeded states;
            # armed again for the first reset(), which then starts from these same states.
            self.seed(seed)
            self.reset()
            self.seed(seed)

    def _env_factory(self, spec: TaskSpec, env_kwargs: dict[str, Any] | None) -> Callable[[], gymnasium.Env]:
        kwargs = dict(env_kwargs or {})
        if self.render_size is not None and spec.engine == "mujoco":
            kwargs.setdefault("height", self.render_size[0])
            kwargs.setdefault("width", self.render_size[1])
        make, limit = spec.make_env, self.episode_length

        def make_one() -> gymnasium.Env:
            env = make(render_mode="rgb_array", **kwargs)
            return gymnasium.wrappers.TimeLimit(env, limit) if limit else env

        return make_one

    def _finish_init(self, num_envs: int, defer_rewards: bool, chunks: list[slice]) -> None:
        super().__init__(num_envs, self._sim.observation_space, self._sim.action_space)
        self.render_mode = "rgb_array"
        self.defer_rewards = bool(defer_rewards)
        self.timer = NULL_TIMER
        self._scorer = ChunkedScorer(self.reward_model, chunks)
        self._actions: np.ndarray | None = None
        self._stepped = False

    @classmethod
    def from_env_fns(
        cls,
        env_fns: Iterable[Callable[[], gymnasium.Env]],
        *,
        reward_model: Any = None,
        target_prompts: str | Sequence[str] | None = None,
        baseline_prompts: str | Sequence[str] = (),
        alpha: float = 0.0,
        model: str = DEFAULT_MODEL,
        **kwargs: Any,
    ) -> "FastVLMRewardVecEnv":
        """The generic path over any env factories (each env made with ``render_mode='rgb_array'``)."""
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("env_fns is empty")
        self = cls.__new__(cls)
        self.task = TaskSpec(name="custom", description="user environments", make_env=env_fns[0])
        self.render_size = None
        self.episode_length = None
        self.engine = "gym"
        self.renderer = None
        self.env_reward_weight = 0.0
        self.reward_model = reward_model or load_reward_model(
            model, target_prompts=normalize_prompts(target_prompts, "target_prompts"), baseline_prompts=baseline_prompts, alpha=alpha, **kwargs
        )
        self.reward_tasks = _task_names(self.reward_model)
        self._sim = GymSimulation(env_fns)
        self._finish_init(len(env_fns), False, plan_chunks(len(env_fns), "auto", self.reward_model.device))
        return self

    @staticmethod
    def _load_model(spec, target_prompts, baseline_prompts, alpha, model, pretrained, checkpoint, device, backend, precision, options):
        options.setdefault("resize_mode", spec.resize_mode)
        if "tasks" in options:
            prompts = {}
        else:
            targets = target_prompts if target_prompts is not None else spec.target_prompts
            if not targets:
                raise ValueError(f"task {spec.name!r} has no default prompts; pass target_prompts='...'")
            baselines = baseline_prompts if baseline_prompts is not None else spec.baseline_prompts
            prompts = {"target_prompts": targets, "baseline_prompts": baselines, "alpha": alpha}
        return load_reward_model(
            model,
            pretrained,
            **prompts,
            checkpoint=checkpoint,
            device=device,
            backend=backend,
            precision=precision,
            **options,
        )

    # ------------------------------------------------------------------ VecEnv API
    def reset(self):
        return self._sim.reset()

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seeds the next reset: env i gets ``seed + i`` (see base class)."""
        return self._sim.seed(seed)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        self._sim.set_options(options)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = check_actions(actions, self.action_space, self.num_envs)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        actions, self._actions = self._actions, None
        scorer, timer = self._scorer, self.timer
        scorer.begin()
        for rows in scorer.chunks:
            self._sim.advance(actions, rows, scorer.render_stream, timer)  # physics, then render
            if not self.defer_rewards:
                with self._sim.lend(rows, scorer.render_stream) as frames:
                    scorer.submit(frames, rows, timer)  # preprocess, encode, reward: not waited for
        scores = None if self.defer_rewards else scorer.finish(timer)
        obs, env_rewards, dones, infos = self._sim.finish(timer)  # observations; finished envs reset
        self._stepped = True
        for info, gt in zip(infos, env_rewards):
            info["gt_reward"] = float(gt)
        if scores is None:  # scored later (episode batches), mixed in there
            return obs, np.zeros(self.num_envs, dtype=np.float32), dones, infos
        if scores.ndim == 2:  # several prompt sets: all in the info, the first is the reward
            for info, row in zip(infos, scores.tolist()):
                info["vlm_rewards"] = dict(zip(self.reward_tasks, row))
            scores = np.ascontiguousarray(scores[:, 0])
        if self.env_reward_weight:
            for info, vlm in zip(infos, scores.tolist()):
                info["vlm_reward"] = vlm
            scores = (scores + self.env_reward_weight * env_rewards).astype(np.float32)
        return obs, scores, dones, infos

    def profile(self, enabled: bool = True) -> StageTimer:
        """Starts timing each stage of ``step_wait`` (see :mod:`vlmrm_fast.profiling`)."""
        self.timer = StageTimer(enabled, self.reward_model.device)
        return self.timer

    def last_frames(self) -> torch.Tensor:
        """The frames the last step reached (uint8 (N, H, W, 3); may be reused by the next step: copy to keep).

        With ``defer_rewards=True`` the step's rewards are zero and the caller scores
        these frames later (see ``training.callbacks.EpisodeBatchRewards``).
        """
        if not self._stepped:
            raise RuntimeError("no step has been taken yet")
        frames = self._sim.last_frames(self.reward_model.device if self.engine == "mujoco" and self.reward_model.device.type == "cuda" else None)
        return frames if isinstance(frames, torch.Tensor) else torch.from_numpy(frames)

    def close(self) -> None:
        self._sim.close()

    def get_images(self):
        return self._sim.get_images()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return self._sim.get_attr(attr_name, indices)

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        self._sim.set_attr(attr_name, value, indices)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        return self._sim.env_method(method_name, *method_args, indices=indices, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gymnasium.Wrapper], indices=None) -> list[bool]:
        return self._sim.env_is_wrapped(wrapper_class, indices)
