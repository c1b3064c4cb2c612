"""FastVLMRewardVecEnv: ``num_envs`` copies of a task as a Stable-Baselines3 VecEnv rewarded by CLIP.

The convenient constructor of an SB3 stack: a VecEnv that simulates the task (MuJoCo
tasks: :class:`~vlmrm_fast.envs.batch.MujocoBatchVecEnv`, all envs in the native core,
drawn by the EGL or the MuJoCo Warp renderer; other tasks: gymnasium envs in SB3's
DummyVecEnv, each wrapped in :class:`~vlmrm_fast.wrappers.RecordFrame`), under the VLM
reward wrapper (:class:`~vlmrm_fast.wrappers.VLMRewardVecEnvWrapper`) with a reward model
loaded from a :class:`~vlmrm_fast.reward.spec.RewardModelSpec`. See ``docs/architecture.md``
for the data path of one step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from vlmrm_fast.checks import positive_int
from vlmrm_fast.device import resolve_device
from vlmrm_fast.envs import TaskSpec, get_task
from vlmrm_fast.envs.batch import RENDERERS, MujocoBatchVecEnv
from vlmrm_fast.pipeline import plan_chunks
from vlmrm_fast.rendering import egl_unavailable
from vlmrm_fast.reward import load_reward_model
from vlmrm_fast.reward.protocol import RewardModel
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.wrappers import RecordFrame, VLMRewardVecEnvWrapper

DEFAULT_MODEL = "ViT-bigG-14/laion2b_s39b_b160k"  # the paper's largest model
PHYSICS = ("auto", "batch", "gym")


def _render_shape(render_size: Any) -> tuple[int, int] | None:
    if render_size is None:
        return None
    if isinstance(render_size, (int, np.integer)) and not isinstance(render_size, bool):
        size = (int(render_size), int(render_size))
    elif (
        isinstance(render_size, Sequence)
        and len(render_size) == 2
        and all(isinstance(v, (int, np.integer)) for v in render_size)
    ):
        size = (int(render_size[0]), int(render_size[1]))
    else:
        raise ValueError(f"render_size must be an int or (height, width), got {render_size!r}")
    if min(size) < 8 or max(size) > 4096:
        raise ValueError(f"render_size {size} is outside [8, 4096] pixels; CLIP takes e.g. 224 or the paper's 480")
    return size


def _recording(make: Callable[[], gymnasium.Env]) -> Callable[[], gymnasium.Env]:
    """A factory of ``make``'s env wrapped in RecordFrame (the frame of each reached state in its info)."""
    return lambda: RecordFrame(make())


def _choose_physics(physics: str, spec: TaskSpec, renderer: str) -> str:
    """ "batch" (the MuJoCo batch engine) or "gym" (gymnasium envs) for ``spec``."""
    if physics not in PHYSICS:
        raise ValueError(f"physics {physics!r} is unknown; use one of {PHYSICS}")
    if renderer not in RENDERERS:
        raise ValueError(f"renderer {renderer!r} is unknown; use one of {RENDERERS}")
    if physics == "gym":
        chosen = "gym"
    elif spec.batch is None:
        if physics == "batch":
            raise ValueError(f"task {spec.name!r} has no batch-engine version; use physics='gym' (or 'auto')")
        chosen = "gym"
    elif renderer == "egl" and egl_unavailable():
        if physics == "batch":
            raise RuntimeError(
                f"physics='batch' with renderer='egl' needs headless EGL: {egl_unavailable()}; or use renderer='warp'"
            )
        chosen = "gym"
    else:
        chosen = "batch"
    if renderer == "warp" and chosen != "batch":
        raise ValueError(
            f"renderer='warp' draws the MuJoCo batch engine's tasks; task {spec.name!r} runs on gymnasium envs "
            "(physics='gym'), which draw their own frames"
        )
    return chosen


def _reward_spec(spec: TaskSpec, fields: dict[str, Any], batch_size: int) -> RewardModelSpec:
    """The task's reward model: its prompts and preprocessing unless the caller gives others."""
    fields = {"model": DEFAULT_MODEL, "batch_size": batch_size, "resize_mode": spec.resize_mode, **fields}
    if "tasks" not in fields:
        if fields.get("target_prompts") is None:
            if not spec.target_prompts:
                raise ValueError(f"task {spec.name!r} has no default prompts; pass target_prompts='...'")
            fields["target_prompts"] = spec.target_prompts
        if fields.get("baseline_prompts") is None:
            fields["baseline_prompts"] = spec.baseline_prompts
    return RewardModelSpec.from_kwargs(**fields)


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
    (MuJoCo Warp's ray tracer, all envs in one launch; ``pip install 'vlmrm-fast[warp]'``).
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
        renderer: str = "egl",
        pipeline_chunks: int | str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        defer_rewards: bool = False,
        env_reward_weight: float = 0.0,
        **reward: Any,
    ):
        num_envs = positive_int(num_envs, "num_envs")
        spec = get_task(task)
        self.task = spec
        self.render_size = _render_shape(render_size) or spec.render_size
        self.episode_length = positive_int(episode_length, "episode_length", allow_none=True) or spec.episode_length
        self.physics = _choose_physics(physics, spec, renderer)
        self.renderer = renderer if self.physics == "batch" else None
        if self.physics == "batch" and env_kwargs:
            raise ValueError("env_kwargs apply to gymnasium envs; use physics='gym' to pass them")
        reward_model = self._reward_model(spec, num_envs, pipeline_chunks, reward_model, reward_spec, reward)
        if self.physics == "batch":
            assert self.render_size is not None and spec.batch is not None, "batch tasks have glue and a frame size"
            device = reward_model.device
            venv: VecEnv = MujocoBatchVecEnv(
                spec.batch,
                num_envs,
                render_size=self.render_size,
                episode_length=self.episode_length,
                gpu=device.index if device.type == "cuda" else None,
                renderer=renderer,  # draw on the reward model's GPU
            )
        else:
            venv = DummyVecEnv([_recording(self._env_factory(spec, env_kwargs))] * num_envs)
        super().__init__(
            venv,
            reward_model,
            pipeline_chunks=pipeline_chunks,
            defer_rewards=defer_rewards,
            env_reward_weight=env_reward_weight,
        )
        if seed is not None:
            # Applied now, so stepping without reset() starts from (and auto-resets with) seeded states;
            # armed again for the first reset(), which then starts from these same states.
            self.seed(seed)
            self.reset()
            self.seed(seed)

    @staticmethod
    def _reward_model(
        spec: TaskSpec,
        num_envs: int,
        pipeline_chunks: int | str,
        given: RewardModel | None,
        spec_given: RewardModelSpec | None,
        fields: dict[str, Any],
    ):
        if given is not None:
            if fields or spec_given is not None:
                raise ValueError(
                    f"reward_model= is already loaded; drop the reward model fields {sorted(fields) or ['reward_spec']}"
                )
            return given
        device = resolve_device((spec_given.device if spec_given else None) or fields.get("device", "auto"))
        # Fixed-batch backends (compile, TensorRT) are built for one range of envs.
        largest = max(rows.stop - rows.start for rows in plan_chunks(num_envs, pipeline_chunks, device))
        if spec_given is not None:
            if fields:
                raise ValueError(f"give reward_spec= alone, or its fields, not both (got {sorted(fields)})")
            reward_spec = spec_given if spec_given.batch_size else dataclasses.replace(spec_given, batch_size=largest)
        else:
            reward_spec = _reward_spec(spec, fields, largest)
        return load_reward_model(reward_spec)

    def _env_factory(self, spec: TaskSpec, env_kwargs: dict[str, Any] | None) -> Callable[[], gymnasium.Env]:
        size, limit, kwargs = self.render_size, self.episode_length, dict(env_kwargs or {})
        return lambda: spec.make(render_size=size, episode_length=limit, **kwargs)

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
            reward_model = load_reward_model(RewardModelSpec.from_kwargs(**{"model": DEFAULT_MODEL, **reward}))
        elif reward:
            raise ValueError(f"reward_model= is already loaded; drop the reward model fields {sorted(reward)}")
        return VLMRewardVecEnvWrapper(DummyVecEnv([_recording(fn) for fn in env_fns]), reward_model)
