"""gymnasium's vector API: the registered tasks, VLMRewardVectorEnv (the simulator env) and
VLMRewardVectorWrapper, against gymnasium's own checker and its own SyncVectorEnv.

The reference for the vector env's contract is gymnasium itself: the same task's single envs
(gymnasium.make) vectorized by SyncVectorEnv with the same seeds and autoreset mode give the same
observations, terminations, truncations and infos bit for bit, and the VLM reward wrapper over
that SyncVectorEnv gives the same rewards (to float precision, tolerances.py).
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.utils.passive_env_checker import env_render_passive_checker
from gymnasium.vector import AutoresetMode, VectorEnv
from tolerances import assert_rewards_close

import vlmrm_fast.envs  # noqa: F401  (registers vlmrm_fast/<task>)
from vlmrm_fast import RecordFrame, load_reward_model
from vlmrm_fast.envs import get_task
from vlmrm_fast.stack.gym_vector import VLMRewardVectorEnv, VLMRewardVectorWrapper

N = 3
HUMANOID = "humanoid-kneeling"
SIZE = 48
LENGTH = 4  # short episodes: the tests see two autoresets


@pytest.fixture(scope="module")
def rm():
    spec = get_task(HUMANOID)
    return load_reward_model(
        "vlmrm-tiny",
        target_prompts=spec.target_prompts,
        baseline_prompts=spec.baseline_prompts,
        alpha=0.5,
        device="cpu",
    )


def fast_env(rm, mode=AutoresetMode.NEXT_STEP) -> VectorEnv:
    return gymnasium.make_vec(
        f"vlmrm_fast/{HUMANOID}",
        num_envs=N,
        vectorization_mode="vector_entry_point",
        reward_model=rm,
        render_size=SIZE,
        max_episode_steps=LENGTH,
        autoreset_mode=mode,
    )


def sync_env(mode=AutoresetMode.NEXT_STEP, record=False) -> gymnasium.vector.SyncVectorEnv:
    def make():
        env = gymnasium.make(f"vlmrm_fast/{HUMANOID}", width=SIZE, height=SIZE, max_episode_steps=LENGTH)
        return RecordFrame(env) if record else env

    return gymnasium.vector.SyncVectorEnv([make] * N, autoreset_mode=mode)


def test_tasks_are_registered_with_a_vector_entry_point():
    for task in (HUMANOID, "humanoid-lotus", "cartpole", "mountain-car"):
        spec = gymnasium.spec(f"vlmrm_fast/{task}")
        assert spec.vector_entry_point is not None
        assert spec.max_episode_steps == get_task(task).episode_length
    assert get_task(f"vlmrm_fast/{HUMANOID}") is get_task(HUMANOID)


@pytest.mark.egl
def test_gymnasiums_check_env_on_a_single_env():
    """gymnasium's checker; its render check would also open a "human" window (fatal headless), so the
    rgb_array frames go through gymnasium's render checker on their own."""
    env = gymnasium.make(f"vlmrm_fast/{HUMANOID}", width=SIZE, height=SIZE)
    check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=0)
    env_render_passive_checker(env.unwrapped)
    assert env.render().shape == (SIZE, SIZE, 3)
    env.close()


def test_gymnasiums_check_env_on_a_classic_control_task():
    env = gymnasium.make("vlmrm_fast/cartpole", render_mode="rgb_array")
    check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=0)
    env_render_passive_checker(env.unwrapped)
    env.close()


@pytest.mark.slow  # gymnasium's env checker and a SyncVectorEnv side by side
@pytest.mark.egl
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_vector_env_matches_gymnasiums_sync_vector_env(rm, mode):
    """Shapes, dtypes, seeding, autoreset and infos as gymnasium's own SyncVectorEnv of the task's
    envs; the VLM rewards as the vector reward wrapper's over it (0 on NEXT_STEP's reset steps)."""
    fast = fast_env(rm, mode)
    assert isinstance(fast, VLMRewardVectorEnv) and fast.metadata["autoreset_mode"] == mode
    reference = VLMRewardVectorWrapper(sync_env(mode, record=mode == AutoresetMode.SAME_STEP), rm)
    assert fast.single_observation_space == reference.single_observation_space
    assert fast.single_action_space == reference.single_action_space
    assert fast.observation_space.shape == (N, *fast.single_observation_space.shape)

    obs_f, info_f = fast.reset(seed=7)
    obs_s, info_s = reference.reset(seed=7)
    np.testing.assert_array_equal(obs_f, obs_s)
    assert obs_f in fast.observation_space and info_f == {}
    rng = np.random.default_rng(0)
    resets = 0
    done_before = np.zeros(N, dtype=bool)
    for _ in range(2 * LENGTH + 2):
        actions = rng.uniform(-0.4, 0.4, fast.action_space.shape).astype(np.float32)
        obs_f, rew_f, term_f, trunc_f, info_f = fast.step(actions)
        obs_s, rew_s, term_s, trunc_s, info_s = reference.step(actions)
        # (read before the batch renderer's frames: mujoco.Renderer draws in whichever EGL context is current)
        frames_s = np.stack(reference.env.render()) if mode == AutoresetMode.NEXT_STEP else None
        assert obs_f.dtype == np.float64 and rew_f.dtype == np.float64
        assert term_f.dtype == trunc_f.dtype == np.bool_ and rew_f.shape == term_f.shape == (N,)
        np.testing.assert_array_equal(obs_f, obs_s)
        np.testing.assert_array_equal(term_f, term_s)
        np.testing.assert_array_equal(trunc_f, trunc_s)
        # Each reward is the model's score of the frame of the state the step reached, as its renderer
        # drew it (the EGL batch renderer and mujoco.Renderer may differ in a pixel), 0 on NEXT_STEP's
        # reset steps.
        expected_f = rm(fast.unwrapped.stack.last_frames()).numpy().astype(np.float64)
        if mode == AutoresetMode.NEXT_STEP:
            expected_s = rm(frames_s).numpy().astype(np.float64)
            expected_f[done_before] = expected_s[done_before] = 0.0
            assert_rewards_close(rew_s, expected_s)
        assert_rewards_close(rew_f, expected_f)
        # The simulator env computes the infos of a step (not Humanoid-v5's tendon infos, which its reward does
        # not need), each as gymnasium's, value and mask; the info of an env the step reset is empty
        # (gymnasium gives the reset's info there). Values come from the same states in numpy over all envs at once
        # (a norm may round its last bit otherwise than gymnasium's per env).
        stepped = ~done_before if mode == AutoresetMode.NEXT_STEP else ~(term_s | trunc_s)
        keys = {k for k in info_f if not k.startswith("_") and k not in ("final_obs", "final_info")}
        assert keys <= set(info_s) and (keys or not stepped.any()), sorted(set(info_f) ^ set(info_s))
        for key in keys:
            np.testing.assert_array_equal(info_f["_" + key], info_s["_" + key] & stepped, err_msg=key)
            rows = info_f["_" + key]
            expected = info_s[key][rows].astype(np.float32) if key == "gt_reward" else info_s[key][rows]
            np.testing.assert_allclose(info_f[key][rows], expected, rtol=1e-12, atol=0, err_msg=key)
        if mode == AutoresetMode.SAME_STEP and trunc_s.any():
            np.testing.assert_array_equal(info_f["_final_obs"], info_s["_final_obs"])
            for i in np.flatnonzero(trunc_s):
                np.testing.assert_array_equal(info_f["final_obs"][i], info_s["final_obs"][i])
            np.testing.assert_allclose(
                info_f["final_info"]["x_position"], info_s["final_info"]["x_position"], rtol=1e-12
            )
        resets += int(trunc_f.sum())
        done_before = term_s | trunc_s
    assert resets == 2 * N
    assert len(fast.render()) == N and fast.render()[0].shape == (SIZE, SIZE, 3)
    fast.close()
    reference.close()


@pytest.mark.egl
def test_vector_env_seeding(rm):
    fast = fast_env(rm)
    first, _ = fast.reset(seed=3)
    again, _ = fast.reset(seed=3)
    np.testing.assert_array_equal(first, again)
    listed, _ = fast.reset(seed=[3, 4, 5])
    np.testing.assert_array_equal(listed, first)  # seed s: env i gets s + i
    other, _ = fast.reset(seed=4)
    assert not np.array_equal(other, first)
    with pytest.raises(ValueError, match="one per env"):
        fast.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="no reset options"):
        fast.reset(options={"reset_mask": np.ones(N, bool)})
    fast.close()


def test_the_vector_env_has_the_plan_choose_among_the_simulator_env_physics(rm, monkeypatch):
    """physics "auto" (the default) is the plan's to resolve, among the simulator env's rows only; a physics of
    gymnasium envs asked for is refused, and where no simulator-env physics can run here the plan says why each could not."""
    import dataclasses

    from vlmrm_fast import RewardModelSpec, rendering
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.stack.plan import plan_stack

    spec = RewardModelSpec(model="vlmrm-tiny", device="cpu")
    assert plan_stack(EnvSpec(HUMANOID, 1), spec, simulator_env_only=True).physics == "batch"
    with pytest.raises(ValueError, match=r"^VLMRewardVectorEnv drives the simulator env \(physics='batch' or"):
        VLMRewardVectorEnv(HUMANOID, N, reward_model=rm, physics="gym")
    for name, row in list(rendering.RENDERERS.items()):
        monkeypatch.setitem(rendering.RENDERERS, name, dataclasses.replace(row, unavailable=lambda device: "no GL"))
    assert plan_stack(EnvSpec(HUMANOID, 1), spec).physics == "gym"  # elsewhere "auto" falls back on gymnasium envs
    with pytest.raises(RuntimeError) as refused:
        plan_stack(EnvSpec(HUMANOID, 1), spec, simulator_env_only=True)
    assert str(refused.value) == (
        "physics='auto': nothing can run task 'humanoid-kneeling' here (batch: no renderer can draw here "
        "(egl: no GL; warp: no GL))"
    )


def test_disabled_autoreset_is_refused_naming_the_modes(rm):
    with pytest.raises(ValueError, match="NextStep"):
        VLMRewardVectorEnv(HUMANOID, N, reward_model=rm, autoreset_mode=AutoresetMode.DISABLED)


@pytest.mark.egl
def test_wrapper_over_same_step_needs_recorded_frames(rm):
    wrapped = VLMRewardVectorWrapper(sync_env(AutoresetMode.SAME_STEP), rm)
    wrapped.reset(seed=0)
    with pytest.raises(ValueError, match="RecordFrame"):
        wrapped.step(np.zeros(wrapped.action_space.shape, np.float32))
    wrapped.close()


@pytest.mark.parametrize("env_reward_weight", [0.0, 1.0])  # a reset step: the scorer's 0 and gymnasium's 0
def test_cartpole_make_vec_is_sync_under_the_reward_wrapper(rm, env_reward_weight):
    env = gymnasium.make_vec(
        "vlmrm_fast/cartpole",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        reward_model=rm,
        max_episode_steps=3,
        env_reward_weight=env_reward_weight,
    )
    assert isinstance(env, VLMRewardVectorWrapper)
    env.reset(seed=0)
    rewards = []
    for _ in range(4):
        _, reward, _, truncated, info = env.step(env.action_space.sample())
        rewards.append(reward)
        assert info["_gt_reward"].all()
    np.testing.assert_array_equal(rewards[3], 0.0)  # the step after the third one is the reset step
    assert np.all(rewards[0] != 0.0)
    env.close()


@pytest.mark.slow  # the example's PPO loop
@pytest.mark.egl
def test_cleanrl_style_ppo_example_runs(capsys):
    """examples/cleanrl_ppo.py: two PPO iterations on make_vec's vector env (tiny model, CPU)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "cleanrl_ppo.py"
    module_spec = importlib.util.spec_from_file_location("cleanrl_ppo", path)
    assert module_spec is not None and module_spec.loader is not None
    example = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(example)
    args = "--device cpu --num-envs 2 --num-steps 8 --total-timesteps 32 --render-size 48 --episode-length 6"
    returns = example.main(args.split())
    assert len(returns) >= 2 and all(np.isfinite(returns))  # episodes ended and were counted
    assert "steps 32: VLM episode return" in capsys.readouterr().out
