"""FastVLMRewardVecEnv: ``num_envs`` copies of a task as a Stable-Baselines3 VecEnv rewarded by CLIP.

A keyword front over :mod:`vlmrm_fast.stack.plan`: its arguments become an
:class:`~vlmrm_fast.envs.spec.EnvSpec` and a reward model (a
:class:`~vlmrm_fast.reward.spec.RewardModelSpec` to load, or a loaded one), which
:func:`~vlmrm_fast.stack.plan.plan_stack` resolves once into the stack's plan (:attr:`plan`): the envs
(MuJoCo tasks in the simulator env, :class:`~vlmrm_fast.stack.simulator_env.SimulatorVecEnv`, drawn by the EGL or
the MuJoCo Warp renderer; other tasks as gymnasium envs in SB3's DummyVecEnv, each wrapped in
:class:`~vlmrm_fast.stack.wrappers.RecordFrame`) under the VLM reward wrapper
(:class:`~vlmrm_fast.stack.wrappers.VLMRewardVecEnvWrapper`). See ``docs/architecture.md`` for the data
path of one step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gymnasium
from stable_baselines3.common.vec_env import DummyVecEnv

from vlmrm_fast.checks import non_negative_int
from vlmrm_fast.envs import TaskSpec
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.reward import load_reward_model
from vlmrm_fast.reward.protocol import RewardModel
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.runtime.memory import release_freed_memory
from vlmrm_fast.stack.plan import StackPlan, build_stack, plan_stack, specs_of_arguments
from vlmrm_fast.stack.wrappers import RecordFrame, VLMRewardVecEnvWrapper


class FastVLMRewardVecEnv(VLMRewardVecEnvWrapper):
    """A VecEnv of ``num_envs`` copies of ``task`` rewarded by a CLIP model.

    ``task`` names a built-in task (``vlmrm_fast.envs.TASKS``: the paper's humanoid poses,
    ``cartpole``, ``mountain-car``, ``mountain-car-textured``) or any gymnasium id.

    ``settings``: the fields of an :class:`~vlmrm_fast.envs.spec.EnvSpec` but ``task`` and ``n_envs``
    (their meaning and defaults are the spec's), and the reward model's (below).

    The reward model: pass a loaded one (``reward_model=``, to share it between envs), a
    :class:`~vlmrm_fast.reward.spec.RewardModelSpec` (``reward_spec=``), or its fields as keywords (``model``,
    ``target_prompts``, ``baseline_prompts``, ``alpha``, ``criteria``, ``device``, ``backend``,
    ``precision``, ...; prompts default to the task's, ``model`` to ViT-bigG-14). With
    ``criteria=[...]`` several prompt sets are scored from one encoder pass: the first drives the
    reward, every step's ``info["vlm_rewards"]`` holds all of them by name.

    The simulation: ``physics="batch"`` runs MuJoCo tasks in the simulator env on the host's threads,
    ``"warp"`` in MuJoCo Warp with every env's state on the GPU (the Newton solver; ``solver=`` names
    another; docs/physics.md), ``"gym"`` through gymnasium envs, ``"auto"`` the first when it can. ``renderer`` draws the simulator
    env's frames: ``"egl"`` (OpenGL, the same pixels as ``mujoco.Renderer``) or ``"warp"``
    (MuJoCo Warp's ray tracer, all envs in one launch; ``pip install 'vlmrm-fast[warp]'``);
    ``"auto"`` (the default) is Warp when the reward model runs on the CPU and MuJoCo Warp is
    installed, EGL otherwise; :attr:`renderer` says which draws, :attr:`plan` every choice made.
    ``pipeline_chunks`` splits a step's envs into ranges scored while the next is simulated
    and drawn (``"auto"``: up to 4 on a GPU, 1 on the CPU and with EGL, whose drawing cannot
    overlap the encoder); fixed-batch encoders are built for
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
        seed: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        defer_rewards: bool = False,
        **settings: Any,
    ):
        given = {"reward_model": reward_model, "reward_spec": reward_spec}
        arguments = {name: value for name, value in given.items() if value is not None}
        env, model, _ = specs_of_arguments(type(self).__name__, task, num_envs, {**arguments, **settings})
        self._build(plan_stack(env, model, defer_rewards=defer_rewards), model, seed=seed, env_kwargs=env_kwargs)

    @classmethod
    def from_specs(
        cls,
        env: EnvSpec,
        reward: RewardModelSpec | RewardModel,
        *,
        seed: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        defer_rewards: bool = False,
    ) -> FastVLMRewardVecEnv:
        """The stack of ``env`` scored by ``reward`` (a spec to load, or a loaded reward model), the specs
        taken whole."""
        return cls.from_plan(
            plan_stack(env, reward, defer_rewards=defer_rewards), reward, seed=seed, env_kwargs=env_kwargs
        )

    @classmethod
    def from_plan(
        cls,
        plan: StackPlan,
        reward: RewardModelSpec | RewardModel,
        *,
        seed: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ) -> FastVLMRewardVecEnv:
        """The stack of a plan already made (:func:`~vlmrm_fast.stack.plan.plan_stack`), scored by ``reward``, the
        spec or the loaded model it was planned for (``vlmrm-fast train`` plans before it loads anything)."""
        stack = cls.__new__(cls)
        stack._build(plan, reward, seed=seed, env_kwargs=env_kwargs)
        return stack

    def _build(
        self,
        plan: StackPlan,
        reward: RewardModelSpec | RewardModel,
        *,
        seed: int | None,
        env_kwargs: dict[str, Any] | None,
    ) -> None:
        seed = None if seed is None else non_negative_int(seed, "seed")
        self.plan: StackPlan = plan
        self._owns_reward_model = isinstance(reward, RewardModelSpec)  # loaded here: closed with the env
        venv, model = build_stack(plan, reward, env_kwargs=env_kwargs)
        # The plan checked the reward model against these envs: the wrapper takes its choices as they are.
        self._wrap(
            venv,
            model,
            ranges=list(plan.ranges),
            defer_rewards=plan.defer_rewards,
            env_reward_weight=plan.env.env_reward_weight,
            episode_length=plan.env.episode_length,  # the plan's, whatever VecEnv holds the envs
            score_terminal_on=plan.env.score_terminal_on,
        )
        if seed is not None:
            # Applied now, so stepping without reset() starts from (and auto-resets with) seeded states;
            # armed again for the first reset(), which then starts from these same states.
            self.seed(seed)
            self.reset()
            self.seed(seed)

    # The plan's choices under the names the stack has always had.
    @property
    def env_spec(self) -> EnvSpec:
        return self.plan.env

    @property
    def task(self) -> TaskSpec:
        return self.plan.task

    @property
    def render_size(self) -> tuple[int, int] | None:
        return self.plan.env.frame_shape

    @property
    def episode_length(self) -> int | None:
        return self.plan.env.episode_length

    @property
    def time_limit(self) -> str:
        return self.plan.env.time_limit

    @property
    def physics(self) -> str:
        return self.plan.physics

    @property
    def renderer(self) -> str | None:
        """The renderer that draws the frames; None when the task's gymnasium envs draw them."""
        return self.plan.renderer

    def close(self) -> None:
        """Closes the envs (renderer, simulator) and the reward model this env loaded itself, then hands
        the memory they freed back to the system (see :func:`vlmrm_fast.runtime.memory.release_freed_memory`)."""
        super().close()
        close_model = getattr(self.reward_model, "close", None)
        if self._owns_reward_model and close_model is not None:
            close_model()
        release_freed_memory()

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


def _recording(make: Callable[[], gymnasium.Env]) -> Callable[[], gymnasium.Env]:
    """A factory of ``make``'s env wrapped in RecordFrame (the frame of each reached state in its info)."""
    return lambda: RecordFrame(make())
