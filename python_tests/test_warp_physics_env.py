"""physics="warp" through every interface (here on Warp's CPU backend): FastVLMRewardVecEnv against the CPU
simulator running the same Newton model, the rewards as the model scores the frames, seeds, resets and
time limits, SB3's PPO and SAC, gymnasium's vector API, a training config, and the refusals.

The stacks are built once per module (each builds a MuJoCo Warp model: seconds with Warp's kernel cache
warm, about a minute cold). Tolerances: observations hold the physics' own fields, compared as
test_warp_physics.py compares them (1e-3 of a field's scale: float32 against float64, Newton's
tolerance; measured below 5e-5); the VLM rewards of two simulators' frames agree to 1e-3 (the frames
differ where a float32 state moves an edge by a pixel); the environment's own reward (gt_reward) to
1e-3 of its scale, since its forward term is a velocity of a float32 state over dt = 0.015.
"""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO, SAC

from vlmrm_fast import FastVLMRewardVecEnv
from vlmrm_fast.physics.warp import CPUBackendWarning

pytestmark = pytest.mark.warp

TASK = "humanoid-kneeling"
N = 3
SMALL = {"render_size": 32, "episode_length": 4}
RTOL = 1e-3


@pytest.fixture(scope="module")
def rm(humanoid_tiny_rm):
    return humanoid_tiny_rm


def make_vec(rm, **kwargs):
    """gymnasium.make_vec of the task on physics="warp", 2 envs of 32 px, episodes of 3 steps."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CPUBackendWarning)
        return gymnasium.make_vec(
            f"vlmrm_fast.envs:vlmrm_fast/{TASK}",
            num_envs=2,
            vectorization_mode="vector_entry_point",
            reward_model=rm,
            physics="warp",
            render_size=32,
            max_episode_steps=3,
            **kwargs,
        )


def make(rm, physics: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CPUBackendWarning)
        return FastVLMRewardVecEnv(TASK, N, reward_model=rm, physics=physics, seed=0, **{**SMALL, **kwargs})


@pytest.fixture(scope="module")
def stacks(rm):
    warp = make(rm, "warp")
    cpu = make(rm, "batch", solver="newton", renderer="warp")
    yield warp, cpu
    warp.close()
    cpu.close()


def close_to_scale(a, b, what: str) -> None:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(1.0, float(np.abs(b).max()))
    assert np.abs(a - b).max() <= RTOL * scale, f"{what}: {np.abs(a - b).max()} > {RTOL} x {scale}"


def test_the_plan_runs_the_task_on_the_gpu_simulator(stacks):
    warp, cpu = stacks
    assert (warp.physics, warp.renderer, warp.plan.solver) == ("warp", "warp", "newton")
    assert warp.plan.ranges == (slice(0, N),)
    assert (cpu.physics, cpu.plan.solver) == ("batch", "newton")
    assert "physics warp (newton solver), renderer warp" in warp.plan.describe()


def test_steps_match_the_cpu_engine_with_the_same_solver(stacks):
    warp, cpu = stacks
    warp.seed(3), cpu.seed(3)
    close_to_scale(warp.reset(), cpu.reset(), "reset observations")
    rng = np.random.default_rng(0)
    for step in range(2 * SMALL["episode_length"] + 1):  # the auto-resets are crossed twice
        actions = rng.uniform(-0.4, 0.4, (N, 17)).astype(np.float32)
        obs_w, rew_w, done_w, info_w = warp.step(actions)
        obs_c, rew_c, done_c, info_c = cpu.step(actions)
        np.testing.assert_array_equal(done_w, done_c)
        close_to_scale(obs_w, obs_c, f"step {step} observations")
        np.testing.assert_allclose(rew_w, rew_c, rtol=0, atol=1e-3)
        close_to_scale([i["gt_reward"] for i in info_w], [i["gt_reward"] for i in info_c], "gt_reward")
        for i in np.flatnonzero(done_w):
            close_to_scale(info_w[i]["terminal_observation"], info_c[i]["terminal_observation"], "terminal obs")
            assert info_w[i]["TimeLimit.truncated"] is info_c[i]["TimeLimit.truncated"] is True


def test_rewards_are_the_reward_models_scores_of_the_frames(stacks, rm):
    warp, _ = stacks
    warp.reset()
    for _ in range(3):
        _, rewards, _, _ = warp.step(np.zeros((N, 17), np.float32))
        frames = warp.last_frames()
        assert frames.shape == (N, 32, 32, 3)
        np.testing.assert_allclose(rewards, rm(frames).numpy(), rtol=0, atol=1e-6)
    images = warp.get_images()
    assert len(images) == N and images[0].shape == (32, 32, 3) and images[0].dtype == np.uint8


@pytest.mark.slow
def test_same_seed_twice_gives_the_same_bits(stacks):
    warp, _ = stacks
    runs = []
    for _ in range(2):
        warp.seed(11)
        trajectory = [warp.reset()]
        for k in range(5):
            obs, rewards, dones, _ = warp.step(np.full((N, 17), 0.1 * k, np.float32))
            trajectory += [obs, rewards, dones]
        runs.append(trajectory)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_terminal_time_limit(rm):
    env = make(rm, "warp", time_limit="terminal")
    try:
        env.reset()
        for _ in range(SMALL["episode_length"]):
            _, _, dones, infos = env.step(np.zeros((N, 17), np.float32))
        assert dones.all() and not any(i["TimeLimit.truncated"] for i in infos)
        assert all("terminal_observation" in i for i in infos)
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [PPO, SAC])
def test_sb3_learns_on_it(stacks, algorithm):
    warp, _ = stacks
    kwargs = {"n_steps": 24, "batch_size": 36} if algorithm is PPO else {"learning_starts": 96, "batch_size": 32}
    small = {"net_arch": [32, 32]}  # SB3's loop on this env, not its networks' speed
    agent = algorithm("MlpPolicy", warp, device="cpu", seed=0, policy_kwargs=small, **kwargs)
    agent.learn(144)  # 48 steps of the 3 envs, learning from the 33rd (PPO's second rollout, SAC's updates)
    assert agent.num_timesteps >= 144


@pytest.mark.slow
def test_gymnasiums_vector_api(rm):
    env = make_vec(rm)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape[0] == 2 and env.unwrapped.stack.physics == "warp"
        for _ in range(3):
            obs, rewards, terminated, truncated, infos = env.step(env.action_space.sample())
        assert rewards.shape == (2,) and "gt_reward" in infos and truncated.all()  # max_episode_steps
        obs, rewards, terminated, truncated, infos = env.step(env.action_space.sample())
        assert not rewards.any() and not truncated.any()  # NEXT_STEP: the step after the end is the reset
    finally:
        env.close()


@pytest.mark.slow
def test_torch_outputs_for_a_gpu_native_learner(rm):
    """Observations computed where MuJoCo Warp keeps the state (here Warp's CPU backend: CPU tensors), the
    same bits as the host's; rewards and dones as tensors on the stack's device; actions taken as tensors."""
    env = make_vec(rm, torch_outputs=True)
    try:
        simulator_env = env.unwrapped.simulator_env
        obs, _ = env.reset(seed=0)
        assert isinstance(obs, torch.Tensor) and obs.device == torch.device("cpu")
        np.testing.assert_array_equal(obs.numpy(), simulator_env.vector_task.observation(simulator_env.sim.outputs))
        actions = torch.zeros((2, 17))
        obs, rewards, terminated, truncated, infos = env.step(actions)
        assert all(isinstance(x, torch.Tensor) for x in (obs, rewards, terminated, truncated))
        np.testing.assert_array_equal(obs.numpy(), simulator_env.vector_task.observation(simulator_env.sim.outputs))
        assert rewards.shape == (2,) and terminated.dtype == torch.bool
    finally:
        env.close()


def test_on_a_cpu_it_says_it_is_for_testing(rm):
    with pytest.warns(CPUBackendWarning, match="CPU backend: correct but slow, for testing"):
        env = FastVLMRewardVecEnv(TASK, 1, reward_model=rm, physics="warp", **SMALL)
    env.close()


@pytest.mark.parametrize(
    "task, kwargs, error, match",
    [
        (
            TASK,
            {"renderer": "egl"},
            ValueError,
            r"renderer='egl' cannot draw physics='warp': .*device worlds.*; use renderer='warp' with physics='warp', or physics='batch'",
        ),
        (TASK, {"solver": "pgs"}, ValueError, r"runs the newton or cg solver, not 'pgs'; .*physics='batch'"),
        (TASK, {"pipeline_chunks": 2}, ValueError, "steps every env at once"),
        ("cartpole", {}, ValueError, r"no simulator-env version; use physics='gym' \(or 'auto'\)"),
    ],
)
def test_refusals_name_the_way_out(rm, task, kwargs, error, match):
    with pytest.raises(error, match=match):
        FastVLMRewardVecEnv(task, 2, model="vlmrm-tiny", device="cpu", physics="warp", **kwargs)


@pytest.mark.slow
def test_a_training_config_takes_it(tmp_path):
    from vlmrm_fast.training.config import load_config

    path = tmp_path / "warp.yaml"
    path.write_text(
        "env: {task: humanoid-kneeling, n_envs: 2, physics: warp, solver: newton}\n"
        "reward: {model: vlmrm-tiny, device: cpu}\nrl: {total_timesteps: 8}\n"
    )
    cfg = load_config(str(path))
    assert (cfg.env.physics, cfg.env.solver) == ("warp", "newton")


def test_a_runs_videos_step_with_the_solver_it_trains_with():
    """The gymnasium env of a run's videos (StackPlan.env_factory) runs the solver of the run's physics."""
    import mujoco

    from vlmrm_fast import RewardModelSpec
    from vlmrm_fast.envs.spec import EnvSpec
    from vlmrm_fast.stack.plan import plan_stack

    for physics, solver, expected in [
        ("warp", None, mujoco.mjtSolver.mjSOL_NEWTON),
        ("batch", None, mujoco.mjtSolver.mjSOL_PGS),  # gymnasium's humanoid, as shipped
        ("batch", "cg", mujoco.mjtSolver.mjSOL_CG),
    ]:
        spec = EnvSpec(TASK, 1, physics=physics, solver=solver)
        env = plan_stack(spec, RewardModelSpec(model="vlmrm-tiny", device="cpu")).env_factory()()
        assert env.unwrapped.model.opt.solver == expected
        env.close()
    with pytest.raises(ValueError, match="is no MuJoCo task; leave solver out"):
        FastVLMRewardVecEnv("cartpole", 1, model="vlmrm-tiny", device="cpu", solver="newton")


@pytest.mark.gpu
def test_on_a_gpu_the_state_stays_there_and_matches_the_cpu_simulator():
    """physics="warp" on CUDA (the step and the draw as CUDA graphs on the simulator's stream) against the
    CPU simulator with the same Newton model drawn by the same renderer on the same GPU: the physics to the
    module's tolerance, the same picture, each side's rewards its model's scores of its own frames; and
    the observations computed on the device are the host's."""
    from tolerances import assert_same_picture

    common = dict(model="vlmrm-tiny", alpha=0.5, device="cuda", seed=0, **SMALL)
    warp = FastVLMRewardVecEnv(TASK, N, physics="warp", **common)
    cpu = FastVLMRewardVecEnv(TASK, N, physics="batch", solver="newton", renderer="warp", **common)
    try:
        assert warp.venv.sim.warp_stream is not None and warp.venv.frame_source.cuda_device == warp.plan.gpu
        close_to_scale(warp.reset(), cpu.reset(), "reset observations")
        rng = np.random.default_rng(1)
        for _ in range(2 * SMALL["episode_length"]):
            actions = rng.uniform(-0.4, 0.4, (N, 17)).astype(np.float32)
            obs_w, rew_w, done_w, _ = warp.step(actions)
            obs_c, rew_c, done_c, _ = cpu.step(actions)
            np.testing.assert_array_equal(done_w, done_c)
            close_to_scale(obs_w, obs_c, "observations")
            frames_w, frames_c = warp.last_frames(), cpu.last_frames()
            assert frames_w.device.type == "cuda"
            assert_same_picture(frames_w.cpu().numpy(), frames_c.cpu().numpy(), err_msg="warp vs batch physics")
            np.testing.assert_allclose(rew_w, warp.reward_model(frames_w).cpu().numpy(), rtol=0, atol=1e-6)
            device_obs = warp.venv.device_observation(warp.plan.device)
            assert device_obs.device == warp.plan.device
            host = warp.venv.vector_task.observation(warp.venv.sim.outputs)  # the state after the step's resets
            np.testing.assert_array_equal(device_obs.cpu().numpy(), host)
    finally:
        warp.close()
        cpu.close()
