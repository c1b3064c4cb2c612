"""gymnasium's MuJoCo v5 suite in the simulator env (vlmrm_fast/envs/mujoco_suite.py) against gymnasium's own envs.

Physics, observations, rewards (float64 as the task computes them, float32 as SB3 gets them), terminations,
truncations, infos and resets are compared for equality, step by step over episodes that end both ways
(a forced termination where the task has one, the time limit), env ``i`` seeded ``seed + i``; frames
drawn by EGL are compared with gymnasium's own ``render()`` pixel for pixel.
"""

from __future__ import annotations

import warnings

import gymnasium
import mujoco
import numpy as np
import pytest

from vlmrm_fast import FastVLMRewardVecEnv
from vlmrm_fast.envs import TASKS, get_task
from vlmrm_fast.envs.mujoco_suite import GYMNASIUM_VIEW, SUITE, SuiteVectorTask, camera_config, suite_model
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.rendering.egl import EGLRenderer
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.stack.plan import plan_stack
from vlmrm_fast.stack.simulator_env import SimulatorVecEnv

N = 2
EPISODE = 6
SIZE = 16  # frames are drawn at every step; their pixels are test_frames_equal_gymnasiums_render's
SEED = 7
# A state gymnasium's env ends an episode in (qpos index, value), set in both envs at one step: the tasks with a
# termination, made to terminate within a short episode whatever the random actions do.
UNHEALTHY = {
    "Ant-v5": (2, 1.5),  # torso above healthy_z_range
    "Hopper-v5": (2, 0.5),  # torso tilted past healthy_angle_range
    "Walker2d-v5": (2, 1.5),
    "Humanoid-v5": (2, 0.6),  # torso below healthy_z_range
    "InvertedPendulum-v5": (1, 0.5),  # pole past 0.2 rad
    "InvertedDoublePendulum-v5": (1, 1.2),  # tip below 1 m
}


class RecordedRewards:
    """The simulator env's StepReward, keeping each step's float64 rewards (the VecEnv returns float32)."""

    def __init__(self, step_reward):
        self.step_reward, self.rewards = step_reward, []

    def before_step(self, fields, rows):
        self.step_reward.before_step(fields, rows)

    def __call__(self, fields, actions, dt):
        rewards, infos = self.step_reward(fields, actions, dt)
        self.rewards.append(rewards.copy())
        return rewards, infos


def simulator_env(task: str, **kwargs) -> SimulatorVecEnv:
    kwargs = {"render_size": (SIZE, SIZE), "episode_length": EPISODE, "renderer": "egl", "physics": "batch", **kwargs}
    return SimulatorVecEnv(get_task(task).vector_task, N, **kwargs)


def set_state(venv: SimulatorVecEnv, env: gymnasium.Env, index: int, qpos, qvel) -> None:
    """Env ``index`` of the simulator env and gymnasium's env put in the same state, as a reset puts them:
    mj_resetData (the solver's warm start, the time and the controls too), then qpos, qvel and mj_forward."""
    venv.sim.reset([index], qpos=qpos, qvel=qvel)
    mujoco.mj_resetData(env.unwrapped.model, env.unwrapped.data)
    env.unwrapped.set_state(qpos, qvel)


@pytest.mark.parametrize("task", list(SUITE))
def test_simulator_env_is_gymnasiums_env_step_by_step(task):
    """Each step's observations, rewards, dones, infos, terminal observations and resets equal those of
    gymnasium's env of the same id seeded seed + i, over episodes ended by the task and by the clock."""
    venv = simulator_env(task)
    recorded = venv._step_reward = RecordedRewards(venv._step_reward)
    envs = [gymnasium.wrappers.TimeLimit(get_task(task).make_env(render_mode=None), EPISODE) for _ in range(N)]
    venv.seed(SEED)
    obs = venv.reset()
    np.testing.assert_array_equal(obs, np.stack([env.reset(seed=SEED + i)[0] for i, env in enumerate(envs)]))
    assert venv.observation_space == envs[0].observation_space and venv.action_space == envs[0].action_space
    rng = np.random.default_rng(0)
    space = venv.action_space
    ended = {"terminated": 0, "truncated": 0}
    for step in range(2 * EPISODE + 2):
        if step == 2 and task in UNHEALTHY:
            index, value = UNHEALTHY[task]
            qpos, qvel = venv.sim.qpos[0].copy(), venv.sim.qvel[0].copy()
            qpos[index] = value
            set_state(venv, envs[0], 0, qpos, qvel)
        actions = rng.uniform(space.low, space.high, (N, *space.shape)).astype(np.float32)
        actions[1] = 0  # (the pendulums stay up long enough to reach the time limit)
        obs, rewards, dones, infos = venv.step(actions)
        for i, env in enumerate(envs):
            expected_obs, reward, terminated, truncated, info = env.step(actions[i])
            assert recorded.rewards[-1][i] == reward, f"step {step} env {i}: reward"
            assert rewards[i] == np.float32(reward)
            assert dones[i] == (terminated or truncated)
            assert set(infos[i]) - {"TimeLimit.truncated", "terminal_observation"} == set(info)
            for key, value in info.items():
                np.testing.assert_array_equal(infos[i][key], value, err_msg=f"step {step} env {i}: info {key}")
            if terminated or truncated:
                ended["terminated" if terminated else "truncated"] += 1
                np.testing.assert_array_equal(infos[i]["terminal_observation"], expected_obs)
                assert infos[i]["TimeLimit.truncated"] == (truncated and not terminated)
                expected_obs, _ = env.reset()
            np.testing.assert_array_equal(obs[i], expected_obs, err_msg=f"step {step} env {i}: observation")
    assert ended["truncated"] >= 1
    assert ended["terminated"] >= (1 if task in UNHEALTHY else 0)
    venv.close()


@pytest.mark.parametrize("task", list(SUITE))
def test_frames_equal_gymnasiums_render(task):
    """EGL's frames of set states equal gymnasium's render() of them, pixel for pixel: the gymnasium env of
    physics='gym' (given the camera config), and a plain gymnasium.make whose viewer was made at the
    model's initial pose (its free camera's lookat is the geoms' median at its first render())."""
    size = 48
    spec = get_task(task)
    ours = spec.make_env(render_mode="rgb_array", width=size, height=size)
    plain = gymnasium.make(task, render_mode="rgb_array", width=size, height=size)
    plain.reset(seed=0)
    model = spec.vector_task.build_model(size)
    plain.unwrapped.set_state(model.qpos0.copy(), np.zeros(model.nv))
    plain.render()  # the viewer, made at the initial pose
    renderer = EGLRenderer(model, 1, size, size, camera=spec.vector_task.camera)
    ours.reset(seed=1)
    rng = np.random.default_rng(2)
    for _ in range(4):
        for _ in range(3):
            ours.step(rng.uniform(-1, 1, ours.action_space.shape).astype(np.float32))
        qpos = ours.unwrapped.data.qpos.copy()
        frame = renderer.render(qpos[None])[0]
        for env in (ours, plain):
            env.unwrapped.set_state(qpos, np.zeros(model.nv))
            np.testing.assert_array_equal(env.render(), frame)
    renderer.close()
    ours.close()
    plain.close()


def test_a_suite_task_runs_under_its_gymnasium_id(humanoid_tiny_rm):
    """FastVLMRewardVecEnv('Ant-v5', n) runs in the simulator env with the task's own prompts."""
    task = get_task("Ant-v5")
    assert task.target_prompts and task.baseline_prompts and task.episode_length == 1000
    env = FastVLMRewardVecEnv("Ant-v5", 3, model="vlmrm-tiny", render_size=32, device="cpu", renderer="egl")
    assert env.plan.physics == "batch" and env.plan.task.vector_task is not None
    env.reset()
    obs, rewards, dones, infos = env.step(np.zeros((3, 8), np.float32))
    assert obs.shape == (3, 105) and np.isfinite(rewards).all() and "reward_contact" in infos[0]
    env.close()


def test_the_gymnasium_view_is_the_free_camera_gymnasium_draws():
    """The added camera sits where gymnasium's free camera looks from: a config's lookat, distance,
    elevation kept (Hopper), MjvCamera's and the viewer's defaults where a config is silent (Swimmer)."""
    hopper = camera_config("Hopper-v5")
    np.testing.assert_array_equal(hopper["lookat"], [0.0, 0.0, 1.15])
    assert (hopper["distance"], hopper["elevation"], hopper["azimuth"]) == (3.0, -20.0, 90.0)
    swimmer = camera_config("Swimmer-v5")
    model = mujoco.MjModel.from_xml_path(SUITE["Swimmer-v5"].model_path)
    assert (swimmer["distance"], swimmer["elevation"], swimmer["azimuth"]) == (model.stat.extent, -45.0, 90.0)
    model = suite_model("Ant-v5", 1024)
    assert model.camera(GYMNASIUM_VIEW).id >= 0 and model.vis.global_.offwidth >= 1024


def test_a_render_size_beyond_the_models_offscreen_buffer_is_given_one():
    """ant.xml's offscreen buffer is 640 x 480; a larger frame grows it (visual/global offwidth, offheight), as
    gymnasium grows it for its width and height, so mujoco.Renderer draws it too."""
    model = get_task("Ant-v5").vector_task.build_model(700)
    assert (model.vis.global_.offwidth, model.vis.global_.offheight) == (700, 700)
    with mujoco.Renderer(model, 700, 700) as renderer:
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        renderer.update_scene(data, GYMNASIUM_VIEW)
        assert renderer.render().shape == (700, 700, 3)


def test_a_camera_the_model_lacks_is_named_with_the_ones_it_has():
    with pytest.raises(ValueError) as error:
        EnvSpec("Ant-v5@side")
    message = str(error.value)
    assert "\n" not in message and "no camera 'side'" in message
    assert f"'{GYMNASIUM_VIEW}', 'track'" in message
    tracking = get_task("Ant-v5@track")
    assert tracking.vector_task.camera == "track" and tracking.name == "Ant-v5@track"


def test_another_camera_draws_the_same_picture_on_both_paths():
    """Ant-v5@track: the model's own tracking camera, drawn by EGL and by gymnasium's render() alike."""
    size = 32
    spec = get_task("Ant-v5@track")
    env = spec.make_env(render_mode="rgb_array", width=size, height=size)
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    mujoco.mj_forward(env.unwrapped.model, env.unwrapped.data)  # the positions reached, as EGL draws them
    frame = env.render()
    renderer = EGLRenderer(spec.vector_task.build_model(size), 1, size, size, camera="track")
    np.testing.assert_array_equal(renderer.render(env.unwrapped.data.qpos[None])[0], frame)
    renderer.close()
    env.close()


def pid_ant_task():
    """The Ant with a PID actuator: a feature MuJoCo Warp lacks."""

    class PidAnt(SuiteVectorTask):
        def build_model(self, render_size):
            spec = mujoco.MjSpec.from_file(SUITE["Ant-v5"].model_path)
            actuator = spec.actuators[0]
            actuator.dyntype, actuator.gaintype = mujoco.mjtDyn.mjDYN_PID, mujoco.mjtGain.mjGAIN_PID
            actuator.biastype = mujoco.mjtBias.mjBIAS_AFFINE
            return spec.compile()

    import dataclasses

    return dataclasses.replace(TASKS["Ant-v5"], name="ant-pid", vector_task=PidAnt("Ant-v5"))


@pytest.mark.warp
def test_warp_physics_for_a_model_warp_cannot_run_names_the_feature(monkeypatch):
    monkeypatch.setitem(TASKS, "ant-pid", pid_ant_task())
    with pytest.raises(ValueError) as error:
        plan_stack(EnvSpec("ant-pid", 2, physics="warp"), RewardModelSpec(model="vlmrm-tiny", device="cpu"))
    message = str(error.value)
    assert "\n" not in message and "mjDYN_PID" in message and "physics='batch'" in message


@pytest.mark.warp
@pytest.mark.slow
def test_warp_physics_runs_every_task_within_the_stated_tolerance():
    """physics='warp' (Warp's CPU backend) against CPU MuJoCo with the same Newton solver: the first steps'
    observations within 1e-3 of their scale (docs/physics.md), the same terminations and infos' keys."""
    from vlmrm_fast.physics.warp import CPUBackendWarning

    for task in SUITE:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CPUBackendWarning)
            warp = simulator_env(task, physics="warp", renderer="warp", solver="newton")
        cpu = simulator_env(task, solver="newton")
        for venv in (warp, cpu):
            venv.seed(SEED)
        scale = lambda x: max(1.0, float(np.abs(x).max()))  # noqa: E731
        obs_w, obs_c = warp.reset(), cpu.reset()
        assert np.abs(obs_w - obs_c).max() <= 1e-3 * scale(obs_c), task
        for _ in range(2):
            actions = np.full((N, *cpu.action_space.shape), 0.1, np.float32)
            (obs_w, _, done_w, info_w), (obs_c, _, done_c, info_c) = warp.step(actions), cpu.step(actions)
            assert np.abs(obs_w - obs_c).max() <= 1e-3 * scale(obs_c), task
            np.testing.assert_array_equal(done_w, done_c)
            assert info_w[0].keys() == info_c[0].keys()
        warp.close()
        cpu.close()


def test_the_locomotion_config_trains_shrunk_on_the_cpu(tmp_path):
    """configs/halfcheetah-running.yaml, with the tiny CLIP, two envs and a short run: vlmrm-fast train runs it."""
    import pathlib

    import yaml

    from vlmrm_fast.cli import main as cli_main

    config = yaml.safe_load(
        (pathlib.Path(__file__).resolve().parents[1] / "configs/halfcheetah-running.yaml").read_text()
    )
    config["output_dir"] = str(tmp_path / "run")
    config["reward"].update(model="vlmrm-tiny", device="cpu")
    config["env"].update(n_envs=2, episode_length=10, render_size=32)
    config["rl"].update(total_timesteps=40, device="cpu")
    config["rl"]["kwargs"].update(learning_starts=20, batch_size=8, buffer_size=40, train_freq=2, gradient_steps=1)
    config["logging"].update(checkpoint_every=40, video_every=40)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["train", str(path)]) == 0
    assert (tmp_path / "run" / "final_model.zip").is_file()
    assert list((tmp_path / "run" / "videos").glob("*.mp4"))


@pytest.mark.parametrize("task", list(SUITE))
def test_observations_of_torch_fields_are_the_numpy_ones(task):
    """A simulator's fields as torch tensors (MuJoCo Warp's on the device) give the same observations."""
    import torch

    from vlmrm_fast.physics.batch import BatchSimulator

    batch = get_task(task).vector_task
    model = batch.build_model(32)
    with BatchSimulator(model, 3, batch.frame_skip, batch.outputs, rne_post_constraint=True) as sim:
        sim.reset(seed=0, noise=batch.reset_noise)
        sim.step(np.full((3, model.nu), 0.3))
        expected = batch.observation(sim.outputs)
        got = batch.observation({key: torch.as_tensor(value) for key, value in sim.outputs.items()})
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got.numpy(), expected)
