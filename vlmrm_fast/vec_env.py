"""FastVLMRewardVecEnv: ``num_envs`` copies of a task as a Stable-Baselines3 VecEnv rewarded by CLIP.

The convenient constructor of an SB3 stack: a VecEnv that simulates the task (MuJoCo
tasks: :class:`~vlmrm_fast.envs.batch.MujocoBatchVecEnv`, all envs in the native core,
drawn by the EGL or the MuJoCo Warp renderer; other tasks: gymnasium envs in SB3's
DummyVecEnv, each wrapped in :class:`~vlmrm_fast.wrappers.RecordFrame`), under the VLM
reward wrapper (:class:`~vlmrm_fast.wrappers.VLMRewardVecEnvWrapper`). Its arguments are
checked once, as an :class:`~vlmrm_fast.envs.spec.EnvSpec` and a
:class:`~vlmrm_fast.reward.spec.RewardModelSpec`. See ``docs/architecture.md`` for the data
path of one step.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable
from typing import Any

import gymnasium
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from vlmrm_fast.checks import non_negative_int, positive_int
from vlmrm_fast.device import resolve_device
from vlmrm_fast.envs import TaskSpec
from vlmrm_fast.envs.batch import MujocoBatchVecEnv, choose_renderer
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.memory import release_freed_memory
from vlmrm_fast.pipeline import plan_chunks
from vlmrm_fast.rendering import egl_unavailable
from vlmrm_fast.reward import load_reward_model
from vlmrm_fast.reward.protocol import RewardModel, check_reward_model
from vlmrm_fast.reward.spec import RewardModelSpec, spec_fields
from vlmrm_fast.wrappers import RecordFrame, VLMRewardVecEnvWrapper

#: EnvSpec fields that FastVLMRewardVecEnv takes as keywords (task and num_envs come first).
ENV_ARGUMENTS = (
    "episode_length",
    "render_size",
    "physics",
    "renderer",
    "pipeline_chunks",
    "env_reward_weight",
    "time_limit",
    "scene_assets",
)
#: FastVLMRewardVecEnv's keywords beside the two specs' fields.
OPTIONS = ("reward_model", "reward_spec", "seed", "env_kwargs", "defer_rewards")


def _recording(make: Callable[[], gymnasium.Env]) -> Callable[[], gymnasium.Env]:
    """A factory of ``make``'s env wrapped in RecordFrame (the frame of each reached state in its info)."""
    return lambda: RecordFrame(make())


def _choose_physics(env: EnvSpec, task: TaskSpec, renderer: str) -> str:
    """ "batch" (the MuJoCo batch engine) or "gym" (gymnasium envs) for ``env``'s task on this machine,
    ``renderer`` being the one that would draw the batch engine's frames (``env.renderer`` resolved)."""
    physics = env.physics
    if physics == "gym":
        chosen = "gym"
    elif task.batch is None:
        if physics == "batch":
            raise ValueError(f"task {task.name!r} has no batch-engine version; use physics='gym' (or 'auto')")
        chosen = "gym"
    elif renderer == "egl" and egl_unavailable():
        if physics == "batch":
            raise RuntimeError(
                f"physics='batch' with renderer='egl' needs headless EGL: {egl_unavailable()}; or use renderer='warp'"
            )
        chosen = "gym"
    else:
        chosen = "batch"
    if env.renderer == "warp" and chosen != "batch":
        raise ValueError(
            f"renderer='warp' draws the MuJoCo batch engine's tasks; task {task.name!r} runs on gymnasium envs "
            "(physics='gym'), which draw their own frames"
        )
    return chosen


def reward_spec_of(reward_spec: RewardModelSpec | None, fields: dict[str, Any]) -> RewardModelSpec:
    """The reward model's spec from ``reward_spec=`` or from its fields as keywords (not both)."""
    if reward_spec is None:
        return RewardModelSpec.from_kwargs(**fields)
    if fields:
        raise ValueError(f"give reward_spec= alone, or its fields, not both (got {sorted(fields)})")
    return reward_spec


def stack_arguments(env: EnvSpec, reward: RewardModelSpec | RewardModel) -> dict[str, Any]:
    """The keywords of FastVLMRewardVecEnv (and ShardedVecEnv) that rebuild ``env`` scored by ``reward``
    (after ``env.task`` and ``env.n_envs``)."""
    model = {"reward_spec": reward} if isinstance(reward, RewardModelSpec) else {"reward_model": reward}
    return {**{name: getattr(env, name) for name in ENV_ARGUMENTS}, **model}


def check_arguments(kwargs: dict[str, Any]) -> None:
    """Refuses a keyword that is neither FastVLMRewardVecEnv's, nor a reward model field or encoder
    option, naming the closest one of all of them."""
    from vlmrm_fast.encoders import BACKEND_OPTIONS

    known = {*ENV_ARGUMENTS, *OPTIONS, *spec_fields(), *(o for opts in BACKEND_OPTIONS.values() for o in opts)}
    for key in kwargs:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"FastVLMRewardVecEnv got an unknown argument {key!r}{hint}")


class FastVLMRewardVecEnv(VLMRewardVecEnvWrapper):
    """A VecEnv of ``num_envs`` copies of ``task`` rewarded by a CLIP model.

    ``task`` names a built-in task (``vlmrm_fast.envs.TASKS``: the paper's humanoid poses,
    ``cartpole``, ``mountain-car``, ``mountain-car-textured``) or any gymnasium id.

    The reward model: pass a loaded one (``reward_model=``, to share it between envs), a
    :class:`~vlmrm_fast.reward.spec.RewardModelSpec` (``reward_spec=``), or its fields as keywords (``model``,
    ``target_prompts``, ``baseline_prompts``, ``alpha``, ``tasks``, ``device``, ``backend``,
    ``precision``, ...; prompts default to the task's, ``model`` to ViT-bigG-14). With
    ``tasks=[...]`` several prompt sets are scored from one encoder pass: the first drives the
    reward, every step's ``info["vlm_rewards"]`` holds all of them by name.

    The simulation: ``physics="batch"`` runs MuJoCo tasks in the batch engine, ``"gym"``
    through gymnasium envs, ``"auto"`` the former when it can. ``renderer`` draws the batch
    engine's frames: ``"egl"`` (OpenGL, the same pixels as ``mujoco.Renderer``) or ``"warp"``
    (MuJoCo Warp's ray tracer, all envs in one launch; ``pip install 'vlmrm-fast[warp]'``);
    ``"auto"`` (the default) is Warp when the reward model runs on the CPU and MuJoCo Warp is
    installed, EGL otherwise; :attr:`renderer` says which draws.
    ``pipeline_chunks`` splits a step's envs into ranges scored while the next is simulated
    and drawn (``"auto"``: up to 4 on a GPU, 1 on the CPU); fixed-batch encoders are built for
    the largest range. ``env_reward_weight`` (rho) mixes in the env's own reward,
    ``vlm + rho * env``; ``defer_rewards`` leaves scoring to the caller (episode batches).
    """

    def __init__(
        self,
        task: str,
        num_envs: int = 1,
        *,
        reward_model: RewardModel | None = None,
        reward_spec: RewardModelSpec | None = None,
        episode_length: int | None = None,
        render_size: int | tuple[int, int] | None = None,
        seed: int | None = None,
        physics: str = "auto",
        renderer: str = "auto",
        pipeline_chunks: int | str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        defer_rewards: bool = False,
        env_reward_weight: float = 0.0,
        time_limit: str = "truncate",
        scene_assets: str | None = None,
        **reward: Any,
    ):
        check_arguments(reward)
        seed = None if seed is None else non_negative_int(seed, "seed")
        env = EnvSpec(
            task,
            positive_int(num_envs, "num_envs"),  # named as the caller named it (n_envs in a config)
            episode_length=episode_length,
            render_size=render_size,
            physics=physics,
            renderer=renderer,
            pipeline_chunks=pipeline_chunks,
            env_reward_weight=env_reward_weight,
            time_limit=time_limit,
            scene_assets=scene_assets,
        ).with_task_defaults()
        task_spec = env.task_spec()
        self.env_spec = env
        self.task = task_spec
        self.render_size = env.frame_shape
        self.episode_length = env.episode_length
        self.time_limit = env.time_limit
        self._owns_reward_model = reward_model is None  # loaded here: closed with the env
        if reward_model is not None:
            check_reward_model(reward_model)
            if reward or reward_spec is not None:
                raise ValueError(
                    f"reward_model= is already loaded; drop the reward model fields {sorted(reward) or ['reward_spec']}"
                )
            scored_on = reward_model.device
        else:
            model_spec = reward_spec_of(reward_spec, reward).with_task_defaults(task_spec)
            scored_on = resolve_device(model_spec.device)
        # The frames are drawn where they are scored: "auto" picks the renderer for that device.
        renderer = choose_renderer(env.renderer, scored_on.index if scored_on.type == "cuda" else None)
        self.physics = _choose_physics(env, task_spec, renderer)
        self.renderer = renderer if self.physics == "batch" else None
        if self.physics == "batch" and env_kwargs:
            raise ValueError("env_kwargs apply to gymnasium envs; use physics='gym' to pass them")
        if reward_model is None:
            reward_model = _load_for(env, model_spec)
        if self.physics == "batch":
            assert self.render_size is not None and task_spec.batch is not None, (
                "batch tasks have glue and a frame size"
            )
            device = reward_model.device
            venv: VecEnv = MujocoBatchVecEnv(
                task_spec.batch,
                env.n_envs,
                render_size=self.render_size,
                episode_length=self.episode_length,
                time_limit=env.time_limit,
                gpu=device.index if device.type == "cuda" else None,  # draw on the reward model's GPU
                renderer=renderer,
            )
        else:
            venv = DummyVecEnv([_recording(self._env_factory(task_spec, env_kwargs))] * env.n_envs)
        super().__init__(
            venv,
            reward_model,
            pipeline_chunks=env.pipeline_chunks,
            defer_rewards=defer_rewards,
            env_reward_weight=env.env_reward_weight,
        )
        if seed is not None:
            # Applied now, so stepping without reset() starts from (and auto-resets with) seeded states;
            # armed again for the first reset(), which then starts from these same states.
            self.seed(seed)
            self.reset()
            self.seed(seed)

    def close(self) -> None:
        """Closes the envs (renderer, simulator) and the reward model this env loaded itself, then hands
        the memory they freed back to the system (see :func:`vlmrm_fast.memory.release_freed_memory`)."""
        super().close()
        close_model = getattr(self.reward_model, "close", None)
        if self._owns_reward_model and close_model is not None:
            close_model()
        release_freed_memory()

    @classmethod
    def from_specs(cls, env: EnvSpec, reward: RewardModelSpec | RewardModel, **options: Any) -> FastVLMRewardVecEnv:
        """The stack of ``env`` scored by ``reward`` (a spec to load, or a loaded reward model);
        ``options``: ``seed``, ``env_kwargs``, ``defer_rewards``."""
        return cls(env.task, env.n_envs, **stack_arguments(env, reward), **options)

    def _env_factory(self, spec: TaskSpec, env_kwargs: dict[str, Any] | None) -> Callable[[], gymnasium.Env]:
        size, limit, kwargs = self.render_size, self.episode_length, dict(env_kwargs or {})
        time_limit = self.time_limit
        return lambda: spec.make(render_size=size, episode_length=limit, time_limit=time_limit, **kwargs)

    @classmethod
    def from_env_fns(
        cls, env_fns: Iterable[Callable[[], gymnasium.Env]], *, reward_model: RewardModel | None = None, **reward: Any
    ) -> VLMRewardVecEnvWrapper:
        """Your own env factories (each env made with ``render_mode='rgb_array'``) under the VLM reward:
        a ``VLMRewardVecEnvWrapper`` over a DummyVecEnv of :class:`RecordFrame`-wrapped envs."""
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("env_fns is empty")
        if reward_model is None:
            reward_model = load_reward_model(RewardModelSpec.from_kwargs(**reward))
        elif reward:
            raise ValueError(f"reward_model= is already loaded; drop the reward model fields {sorted(reward)}")
        return VLMRewardVecEnvWrapper(DummyVecEnv([_recording(fn) for fn in env_fns]), reward_model)


def _load_for(env: EnvSpec, spec: RewardModelSpec) -> RewardModel:
    """Loads ``spec``'s model; a fixed-batch encoder (compile, TensorRT) without a batch size is built
    for the largest range of envs a step scores."""
    if spec.batch_size is None:
        ranges = plan_chunks(env.n_envs, env.pipeline_chunks, resolve_device(spec.device))
        spec = dataclasses.replace(spec, batch_size=max(rows.stop - rows.start for rows in ranges))
    return load_reward_model(spec)
