"""VLM rewards behind gymnasium's vector API (CleanRL, TorchRL, Tianshou, RLlib), beside SB3's VecEnv.

- :class:`VLMRewardVectorEnv`: a ``gymnasium.vector.VectorEnv`` of a MuJoCo task driven by the same
  simulator env and scoring pipeline as :class:`~vlmrm_fast.FastVLMRewardVecEnv` (it wraps that
  stack: every env simulated in the native core, drawn by one batch renderer, scored range by
  range while the next range is simulated). ``gymnasium.make_vec("vlmrm_fast/humanoid-kneeling",
  num_envs=64, vectorization_mode="vector_entry_point", model=..., alpha=...)`` returns one.
- :class:`VLMRewardVectorWrapper`: a ``gymnasium.vector.VectorWrapper`` that replaces the reward of
  any gymnasium vector env whose sub-envs render ``rgb_array`` (``SyncVectorEnv``,
  ``AsyncVectorEnv``, ``make_vec(..., vectorization_mode="sync")``) by a reward model's.

Both follow gymnasium 1.x: ``reset(seed=s)`` seeds env ``i`` with ``s + i`` (or one seed per env from
a list); autoreset follows ``metadata["autoreset_mode"]`` (``NEXT_STEP``, gymnasium's default: a
finished env's next step is its reset, with reward 0 and its action ignored; ``SAME_STEP``: it is
reset in the step that ends it, the final observation and info under ``infos["final_obs"]`` and
``infos["final_info"]``); infos are a dict of arrays with a ``"_key"`` mask per key. The VLM
reward's parts go where the SB3 wrapper puts them: the env's own reward in ``infos["gt_reward"]``,
each criterion's in ``infos["vlm_rewards"][name]`` with several criteria. See docs/gymnasium.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

import vlmrm_fast.envs  # noqa: F401  (registers the tasks as vlmrm_fast/<task>)
from vlmrm_fast.checks import boolean
from vlmrm_fast.reward.protocol import RewardModel
from vlmrm_fast.stack.simulator_env import SimulatorVecEnv
from vlmrm_fast.stack.wrappers import RewardMix, criterion_names

#: The keys of the SB3 stack's infos that the gymnasium API says otherwise (terminated/truncated, final_obs).
_SB3_KEYS = ("terminal_observation", "TimeLimit.truncated")
_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
_RESET_FRAME_NEXT_STEP = (
    "score_terminal_on='reset_frame' scores an episode's last step on the frame of the reset within that step, as SB3's "
    "vector envs reset; under gymnasium's NEXT_STEP autoreset the reset comes a step later: use "
    "autoreset_mode='SameStep', or score_terminal_on='terminal_state'"
)


def _autoreset_mode(mode: Any) -> AutoresetMode:
    try:
        mode = AutoresetMode(mode)
    except ValueError:
        raise ValueError(f"autoreset_mode {mode!r} is unknown; use one of {[m.value for m in AutoresetMode]}") from None
    if mode not in _MODES:
        raise ValueError(
            f"autoreset_mode={mode.value!r}: the simulator env resets finished envs itself; use "
            f"{' or '.join(repr(m.value) for m in _MODES)} (gymnasium's default is 'NextStep')"
        )
    return mode


def _seeds(seed: int | Sequence[int] | None, num_envs: int) -> list[int] | None:
    if seed is None:
        return None
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed) if not isinstance(seed, (bool, int, np.integer)) else []
    if len(seeds) != num_envs or not all(isinstance(s, (int, np.integer)) for s in seeds):
        raise ValueError(f"seed must be an int or {num_envs} ints (one per env), got {seed!r}")
    return [int(s) for s in seeds]


class VLMRewardVectorEnv(VectorEnv):
    """``num_envs`` envs of a MuJoCo task with VLM rewards, as a ``gymnasium.vector.VectorEnv``.

    Takes :class:`~vlmrm_fast.FastVLMRewardVecEnv`'s arguments (the reward model's fields, or
    ``reward_model=`` / ``reward_spec=``; ``episode_length``, ``render_size``, ``renderer``,
    ``pipeline_chunks``, ``env_reward_weight``) and builds that stack on the simulator env, whose
    finished envs it resets by ``autoreset_mode``. Episodes end by truncation after
    ``episode_length`` steps (gymnasium's ``max_episode_steps``), as the paper's tasks never
    terminate.

    ``torch_outputs=True``: for a GPU-native learner, ``reset`` and ``step`` return observations,
    rewards, terminations and truncations as torch tensors on the stack's device (what gymnasium's
    ``NumpyToTorch`` wrapper returns, and it takes actions as tensors too). With
    ``physics="warp"`` the observations are computed where the state lies, never passing through the
    host; otherwise the host's arrays are copied there.
    """

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        task: str,
        num_envs: int = 1,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = "rgb_array",
        max_episode_steps: int | None = None,
        torch_outputs: bool = False,
        **stack: Any,
    ):
        from vlmrm_fast.physics import PHYSICS
        from vlmrm_fast.stack.plan import plan_stack, specs_of_arguments
        from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv

        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: the simulator env renders 'rgb_array' frames")
        torch_outputs = boolean(torch_outputs, "torch_outputs")
        stack = _with_episode_length(stack, max_episode_steps)
        env, reward, options = specs_of_arguments(type(self).__name__, task, num_envs, stack)
        if env.physics != "auto" and not PHYSICS[env.physics].in_simulator_env:
            batch_physics = " or ".join(repr(name) for name, row in PHYSICS.items() if row.in_simulator_env)
            raise ValueError(
                f"VLMRewardVectorEnv drives the simulator env (physics={batch_physics}); for gymnasium envs use "
                "gymnasium.make_vec(..., vectorization_mode='sync') under VLMRewardVectorWrapper"
            )
        mode = _autoreset_mode(autoreset_mode)
        if mode == AutoresetMode.NEXT_STEP and env.score_terminal_on == "reset_frame":
            raise ValueError(_RESET_FRAME_NEXT_STEP)
        defer = options.pop("defer_rewards", False)
        plan = plan_stack(env, reward, simulator_env_only=True, defer_rewards=defer)
        self.stack = FastVLMRewardVecEnv.from_plan(plan, reward, **options)
        simulator_env = self.stack.venv  # the SimulatorVecEnv under the VLM reward
        assert isinstance(simulator_env, SimulatorVecEnv), "a simulator-env physics builds the simulator env"
        self.simulator_env: SimulatorVecEnv = simulator_env
        self.simulator_env.reset_on_next_step = mode == AutoresetMode.NEXT_STEP
        self.num_envs = int(num_envs)
        self.single_observation_space = self.simulator_env.observation_space
        self.single_action_space = self.simulator_env.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.render_mode = render_mode
        self.spec = None
        self.torch_outputs = torch_outputs

    @property
    def reward_model(self) -> RewardModel:
        return self.stack.reward_model

    def _outputs(self, obs: np.ndarray, *arrays: np.ndarray) -> tuple[Any, ...]:
        """``obs`` and ``arrays`` as the caller asked for them: numpy, or torch on the stack's device."""
        if not self.torch_outputs:
            return (obs, *arrays)
        import torch

        device = self.stack.plan.device
        return (self.simulator_env.device_observation(device), *(torch.as_tensor(a, device=device) for a in arrays))

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None):
        if options:
            raise ValueError(f"the simulator env takes no reset options, got {sorted(options)}")
        seeds = _seeds(seed, self.num_envs)
        super().reset(seed=None if seeds is None else seeds[0])
        if seeds is not None:
            self.simulator_env.seed(seeds)  # one per env, applied at the reset
        obs = self.stack.reset()
        return self._outputs(obs)[0], {}

    def step(self, actions):
        if not isinstance(actions, np.ndarray) and hasattr(actions, "detach"):  # a learner's torch tensor
            actions = _tensor_actions(actions)
        obs, rewards, dones, step_infos = self.stack.step(np.asarray(actions))
        truncated = np.array([info["TimeLimit.truncated"] for info in step_infos], dtype=bool)
        terminated = dones & ~truncated
        rewards = np.asarray(
            rewards, dtype=np.float64
        )  # (a NEXT_STEP reset step's: 0, the scorer's and the simulator env's)
        reset_now = self.simulator_env.autoreset_envs  # NEXT_STEP: these envs' step was their reset, its info empty
        same_step = self.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        infos: dict[str, Any] = {}
        for i, raw in enumerate(step_infos):
            info = {} if reset_now[i] else {k: v for k, v in raw.items() if k not in _SB3_KEYS}
            if same_step and dones[i]:  # as SyncVectorEnv: the step's info under final_info, the reset's on top
                info = {"final_obs": raw["terminal_observation"], "final_info": info}
            infos = self._add_info(infos, info, i)
        obs, rewards, terminated, truncated = self._outputs(obs, rewards, terminated, truncated)
        return obs, rewards, terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        if self.render_mode is None:
            return None
        return tuple(frame for frame in self.simulator_env.get_images() if frame is not None)

    def close_extras(self, **kwargs: Any) -> None:
        self.stack.close()


def _tensor_actions(actions: Any) -> np.ndarray:
    """A learner's torch tensor of actions as numpy, from any device that holds values and any float dtype."""
    import torch

    if actions.device.type == "meta":
        raise ValueError(
            "actions are on the meta device, which holds no values (a model built under torch.device('meta')?); "
            "pass actions on the CPU or a GPU"
        )
    actions = actions.detach()
    if actions.is_floating_point() and actions.dtype not in (torch.float32, torch.float64):
        actions = actions.float()  # bf16 (which numpy lacks), fp16: the action space is float32
    return actions.cpu().numpy()


class VLMRewardVectorWrapper(VectorWrapper):
    """Replaces a gymnasium vector env's reward by a reward model's score of each step's frame.

    The frame is the sub-env's ``render()`` after the step (the state it reached), or the
    ``info["vlmrm_frame"]`` of sub-envs wrapped in :class:`~vlmrm_fast.RecordFrame`, which a
    ``SAME_STEP`` vector env needs (it resets a finished env before ``render()`` could show the
    state that ended it). Under ``NEXT_STEP`` a reset step gets reward 0. ``env_reward_weight``
    (rho): the reward is ``vlm + rho * env``; the env's own reward is in ``infos["gt_reward"]``,
    each criterion's in ``infos["vlm_rewards"][name]`` with several criteria. ``score_terminal_on``:
    ``"reset_frame"`` scores an episode's last step on the frame its reset drew, as the paper's code did
    (``SAME_STEP`` only; ``envs.time_limits``).
    """

    def __init__(
        self,
        env: VectorEnv,
        reward_model: RewardModel,
        *,
        env_reward_weight: float = 0.0,
        episode_length: int | None = None,
        score_terminal_on: str = "terminal_state",
    ):
        from vlmrm_fast.checks import one_of
        from vlmrm_fast.envs.time_limits import SCORE_TERMINAL_ON
        from vlmrm_fast.frames.views import HostFrames
        from vlmrm_fast.reward.protocol import check_reward_model
        from vlmrm_fast.reward.schedule import schedule_of
        from vlmrm_fast.stack.plan import check_needs
        from vlmrm_fast.stack.scorer import ChunkedScorer

        super().__init__(env)
        self.reward_model = check_reward_model(reward_model)
        self.reward_mix = RewardMix(criterion_names(reward_model), env_reward_weight)
        self._mode = AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        self.score_terminal_on = one_of(score_terminal_on, "score_terminal_on", SCORE_TERMINAL_ON)
        # The one check of the model against these envs (no plan made them).
        check_needs(
            reward_model.needs,
            schedule_of(reward_model),
            episode_length=episode_length,
            score_terminal_on=self.score_terminal_on,
            defer_rewards=False,
        )
        if self.score_terminal_on == "reset_frame" and self._mode != AutoresetMode.SAME_STEP:
            raise ValueError(_RESET_FRAME_NEXT_STEP)
        self._done = np.zeros(env.num_envs, dtype=bool)
        # The SB3 wrapper's scorer, in one range: the reward model's schedule (and windows) as there.
        self._scorer = ChunkedScorer(reward_model, [slice(0, env.num_envs)], episode_length=episode_length)
        self._host_frames = HostFrames()

    @property
    def reward_criteria(self) -> tuple[str, ...]:
        return self.reward_mix.criteria

    @property
    def env_reward_weight(self) -> float:
        return self.reward_mix.env_reward_weight

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        self._done[:] = False
        self._scorer.restart()
        return self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]  # vector envs take a list

    def step(self, actions):
        obs, env_rewards, terminated, truncated, infos = self.env.step(actions)
        dones = np.logical_or(terminated, truncated)
        frames = list(self._frames(infos))
        if self.score_terminal_on == "reset_frame" and dones.any():  # SAME_STEP reset them: the frame they show now
            shown = self.env.render()
            for env in np.flatnonzero(dones):
                frames[env] = shown[env]
        self._host_frames.stack(frames)
        next_step = self._mode == AutoresetMode.NEXT_STEP
        self._scorer.begin(resetting=self._done if next_step else None, last=dones)
        rows = slice(0, self.num_envs)
        with self._host_frames.lend(rows) as view:
            self._scorer.submit(view, rows)
        mixed = self.reward_mix(self._scorer.finish(dones), env_rewards)
        infos = dict(infos)
        if mixed.per_criterion is not None:
            infos["vlm_rewards"] = {name: values.astype(np.float64) for name, values in mixed.per_criterion.items()}
            infos["_vlm_rewards"] = np.ones(self.num_envs, dtype=bool)
        if mixed.vlm is not None:
            infos["vlm_reward"] = mixed.vlm.astype(np.float64)
            infos["_vlm_reward"] = np.ones(self.num_envs, dtype=bool)
        infos["gt_reward"] = np.asarray(env_rewards, dtype=np.float64)
        infos["_gt_reward"] = np.ones(self.num_envs, dtype=bool)
        rewards = mixed.rewards.astype(np.float64)  # (a NEXT_STEP reset step's: 0, the scorer's and gymnasium's)
        self._done = dones
        return obs, rewards, terminated, truncated, infos

    def _frames(self, infos: dict[str, Any]) -> np.ndarray:
        from vlmrm_fast.stack.wrappers import FRAME_KEY

        final = infos.get("final_info") or {}
        if FRAME_KEY in infos or FRAME_KEY in final:  # RecordFrame-wrapped sub-envs
            frames = infos.pop(FRAME_KEY, None)
            infos.pop("_" + FRAME_KEY, None)
            if FRAME_KEY in final:  # SAME_STEP: a finished env's frame is in its final info
                ended, mask = final.pop(FRAME_KEY), final.pop("_" + FRAME_KEY)
                frames = np.array(ended) if frames is None else np.array(frames)
                frames[mask] = ended[mask]
            return np.ascontiguousarray(frames)
        if self._mode == AutoresetMode.SAME_STEP:
            raise ValueError(
                "a SAME_STEP vector env resets finished envs before render() shows the state that ended them: "
                "wrap each sub-env in vlmrm_fast.RecordFrame (its frame then rides in the step's info)"
            )
        frames = self.env.render()
        if frames is None:
            raise ValueError("the vector env renders nothing: make its sub-envs with render_mode='rgb_array'")
        return np.stack(frames)


def make_vector_env(task: str, num_envs: int = 1, **kwargs: Any) -> VectorEnv:
    """The vector entry point of the tasks registered as ``vlmrm_fast/<task>`` (``gymnasium.make_vec``):
    MuJoCo tasks get :class:`VLMRewardVectorEnv`; the others gymnasium's ``SyncVectorEnv`` of the
    task's envs under :class:`VLMRewardVectorWrapper`. ``kwargs``: the reward model's fields (or
    ``reward_model=``), ``autoreset_mode``, ``max_episode_steps``, ``render_size``, ..."""
    from vlmrm_fast.envs import get_task

    if get_task(task).vector_task is not None:
        return VLMRewardVectorEnv(task, num_envs, **kwargs)
    return _sync_vector_env(task, num_envs, **kwargs)


def _sync_vector_env(
    task: str,
    num_envs: int,
    *,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    render_mode: str | None = "rgb_array",
    max_episode_steps: int | None = None,
    **stack: Any,
) -> VectorEnv:
    from vlmrm_fast.stack.plan import build_stack, plan_stack, specs_of_arguments

    if render_mode != "rgb_array":
        raise ValueError(f"render_mode={render_mode!r}: VLM rewards score 'rgb_array' frames")
    stack = _with_episode_length(stack, max_episode_steps)
    # Planned as FastVLMRewardVecEnv plans it (a batch physics is refused for a task without a simulator-env
    # version, naming the one that runs it), and built by the same builder, gymnasium's vector env holding the envs.
    # gymnasium's vector env holds the sub-envs, each drawing its own render() (the batched drawing runs under
    # FastVLMRewardVecEnv): no renderer unless one is named, which the builder then refuses in one line
    own_render = {"renderer": None} if stack.get("physics", "auto") in ("auto", "gym") else {}
    env, reward, _ = specs_of_arguments("make_vec", task, num_envs, {**own_render, **stack})
    plan = plan_stack(env, reward)
    assert not plan.in_simulator_env, "a task without a simulator-env version runs its gymnasium envs"
    mode = AutoresetMode(autoreset_mode)
    vector, reward_model = build_stack(
        plan, reward, vector=lambda envs: gymnasium.vector.SyncVectorEnv(envs, autoreset_mode=mode)
    )
    return VLMRewardVectorWrapper(
        vector,
        reward_model,
        env_reward_weight=plan.env.env_reward_weight,
        episode_length=plan.env.episode_length,
        score_terminal_on=plan.env.score_terminal_on,
    )


def _with_episode_length(stack: dict[str, Any], max_episode_steps: int | None) -> dict[str, Any]:
    """gymnasium's ``max_episode_steps`` as the stack's ``episode_length`` (one of the two, or both equal)."""
    if max_episode_steps is None:
        return stack
    if stack.get("episode_length") not in (None, max_episode_steps):
        raise ValueError("give episode_length or max_episode_steps, not both")
    return {**stack, "episode_length": max_episode_steps}
