"""The paper's setting: humanoid scenes and camera, classic control semantics, configs/paper/."""

from __future__ import annotations

import copy
import math
import pathlib

import gymnasium
import mujoco
import numpy as np
import pytest

from vlmrm_fast.envs import TASKS, get_task, humanoid, textures
from vlmrm_fast.envs.classic_control import PaperCartPoleEnv, PaperMountainCarContinuousEnv
from vlmrm_fast.envs.mountain_car import PaperMountainCarContinuousTexturedEnv

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAPER_CONFIGS = sorted((ROOT / "configs" / "paper").rglob("*.yaml"))

# ------------------------------------------------------------------------------ humanoid scenes


def _gymnasium_paper_camera_frames(env, states: list[np.ndarray], size: int) -> list[np.ndarray]:
    """The frames gymnasium draws with kube/job.yaml's camera_config, as the paper's env sets it up:
    MujocoRenderer(default_cam_config=camera_config) rendering the free camera (camera_id=-1)."""
    from gymnasium.envs.mujoco.mujoco_rendering import MujocoRenderer

    base = env.unwrapped
    config = dict(humanoid.PAPER_CAMERA_CONFIG, lookat=np.array(humanoid.PAPER_CAMERA_CONFIG["lookat"]))
    renderer = MujocoRenderer(base.model, base.data, default_cam_config=config, width=size, height=size, camera_id=-1)
    frames = []
    for qpos, qvel in states:
        base.set_state(qpos, qvel)
        frames.append(renderer.render("rgb_array").copy())
    renderer.close()
    return frames


def _mujoco_free_camera_frames(env, states: list[np.ndarray], size: int) -> list[np.ndarray]:
    """The same with ``mujoco.Renderer`` and an ``MjvCamera`` of type free set to the paper's numbers."""
    base = env.unwrapped
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    for key, value in humanoid.PAPER_CAMERA_CONFIG.items():
        setattr(camera, key, value)
    renderer = mujoco.Renderer(base.model, size, size)
    frames = []
    for qpos, qvel in states:
        base.set_state(qpos, qvel)
        renderer.update_scene(base.data, camera)
        frames.append(renderer.render().copy())
    renderer.close()
    return frames


@pytest.mark.egl
def test_paper_scene_frames_are_gymnasiums_free_camera_with_the_papers_numbers():
    """The task's frames (gymnasium env and batch renderer, model camera ``vlmrm_paper``) equal
    gymnasium's free camera (and mujoco.Renderer's) set to distance 3.5, elevation -10, azimuth
    180, lookat (0, 0, 1).
    Measured at 480 x 480 with Mesa: 0 pixels differ. gymnasium renders a free camera, so
    ``trackbodyid`` does nothing: the view stays put when the robot moves 1.5 m."""
    from vlmrm_fast.rendering.egl import EGLRenderer

    size = 96
    env = get_task("humanoid-kneeling").make_env(width=size, height=size)
    env.reset(seed=3)
    qpos, qvel = env.unwrapped.data.qpos.copy(), env.unwrapped.data.qvel.copy()
    moved = qpos.copy()
    moved[0] += 1.5
    states = [(qpos, qvel), (moved, qvel)]
    env_frames = []
    for state in states:  # one GL context at a time: gymnasium's renderers do not switch contexts between them
        env.unwrapped.set_state(*state)
        env_frames.append(env.render().copy())
    env.unwrapped.mujoco_renderer.close()
    batch = EGLRenderer(env.unwrapped.model, 2, size, size, camera=humanoid.PAPER_CAMERA)
    batch_frames = list(batch.render(np.stack([qpos, moved])))
    batch.close()
    expected = _gymnasium_paper_camera_frames(env, states, size)
    for frames in (env_frames, batch_frames, _mujoco_free_camera_frames(env, states, size)):
        for frame, reference in zip(frames, expected):
            difference = np.abs(frame.astype(int) - reference.astype(int))
            assert difference.mean() < 0.01 and np.mean(difference.max(-1) > 0) < 1e-3, difference.mean()
    assert np.abs(expected[0].astype(int) - expected[1].astype(int)).mean() > 1.0, "the robot moved in the frame"


DATA = pathlib.Path(__file__).resolve().parent / "data"
#: A frame the paper's own code drew: data/README.md gives the commit and the command.
PAPER_FRAME = DATA / "paper_humanoid_reset_seed0.png"


def stand_in_textures(folder: pathlib.Path) -> pathlib.Path:
    """Images of our own under the paper's file names and sizes (RGBA, as its files are): smooth colours
    and a checker on the sky and the robot, a gradient on the floor tiles. The paper's frame in
    ``data/`` was drawn from these very files."""
    from PIL import Image

    def pattern(size: int, seed: int, checker: bool = True) -> np.ndarray:
        y, x = np.mgrid[0:size, 0:size] / size
        if not checker:
            rgb = [150 + 60 * x, 140 + 50 * y, 120 + 40 * x * y]
        else:
            blue = np.where(((x * 4).astype(int) + (y * 4).astype(int)) % 2 == 0, 200, 60)
            rgb = [
                128 + 100 * np.sin(2 * np.pi * (x + seed / 3)),
                128 + 100 * np.cos(2 * np.pi * (y * 2 - seed / 5)),
                blue,
            ]
        return np.stack([*rgb, np.full_like(x, 255)], -1).round().astype(np.uint8)

    folder.mkdir(parents=True, exist_ok=True)
    for name, image in (
        ("sky.png", pattern(778, 0)),
        ("tiles.png", pattern(493, 1, checker=False)),
        ("robot.png", pattern(200, 2)),
    ):
        Image.fromarray(image, "RGBA").save(folder / name)
    return folder


def test_the_papers_image_files_keep_the_papers_shadow_map(tmp_path):
    """The paper's model sets no shadow map, so MuJoCo's default; drawn with its image files, ours keeps it.
    The generated textures take a smaller one, sized for the frames."""
    folder = str(stand_in_textures(tmp_path))
    assert humanoid.humanoid_model("paper", 480, folder).vis.quality.shadowsize == 4096
    assert humanoid.humanoid_model("paper-textures", 224, folder).vis.quality.shadowsize == 4096
    assert humanoid.humanoid_model("paper", 480).vis.quality.shadowsize == 2048
    assert mujoco.MjModel.from_xml_string("<mujoco/>").vis.quality.shadowsize == humanoid.PAPER_SHADOW_MAP_SIZE


@pytest.mark.egl
def test_the_papers_scene_is_the_papers_picture(tmp_path):
    """With the paper's image files (here stand-ins under its names), the paper scene's frame of the reset
    with seed 0 equals, pixel for pixel, the frame the paper's own code drew of its env reset with seed 0
    at 480 x 480 (``data/README.md``): drawn by mujoco.Renderer from our gymnasium env, and by the EGL
    batch renderer from the simulator env's reset. The frame in ``data/`` is Mesa's (llvmpipe); a GPU's
    rasterizer rounds shadow and polygon edges its own way, so elsewhere it is skipped."""
    from PIL import Image

    from vlmrm_fast.physics.batch import BatchSimulator
    from vlmrm_fast.rendering.egl import EGLRenderer

    paper = np.asarray(Image.open(PAPER_FRAME).convert("RGB"))
    size = paper.shape[0]
    task = get_task("humanoid-kneeling").with_scene_assets(str(stand_in_textures(tmp_path)))
    model = task.vector_task.build_model(size)
    sim = BatchSimulator(model, 1)
    sim.reset(seed=0, noise_scale=humanoid.RESET_NOISE_SCALE)
    batch = EGLRenderer(model, 1, size, size, camera=task.vector_task.camera)
    try:
        if not batch.software:
            pytest.skip("the paper's frame in data/ was drawn by Mesa's llvmpipe; this EGL is a GPU's")
        drawn = batch.render_sim(sim)[0]
    finally:
        batch.close()
    env = task.make(render_size=(size, size))
    env.reset(seed=0)
    base = env.unwrapped
    np.testing.assert_array_equal(base.data.qpos, sim.qpos[0])
    with mujoco.Renderer(base.model, size, size) as renderer:
        renderer.update_scene(base.data, task.vector_task.camera)
        rendered = renderer.render()
    env.close()
    for frame in (rendered, drawn):
        differing = np.argwhere((frame != paper).any(-1))
        assert differing.size == 0, (
            f"{len(differing)} pixels differ from the paper's frame, the first at {differing[:3].tolist()}"
        )


def test_every_scene_keeps_gymnasiums_physics():
    """Scenes change textures, materials, the light and cameras only: stepping is bit-identical."""
    reference = mujoco.MjModel.from_xml_path(humanoid.gymnasium_humanoid_xml())
    rng = np.random.default_rng(0)
    ctrls = rng.uniform(-0.4, 0.4, (30, reference.nu))
    qpos = reference.qpos0 + rng.uniform(-0.01, 0.01, reference.nq)

    def rollout(model):
        data = mujoco.MjData(model)
        data.qpos[:] = qpos
        for ctrl in ctrls:
            data.ctrl[:] = ctrl
            mujoco.mj_step(model, data, nstep=humanoid.FRAME_SKIP)
        return np.concatenate([data.qpos, data.qvel, data.cfrc_ext.ravel()])

    expected = rollout(reference)
    for scene in humanoid.SCENES:
        model = humanoid.humanoid_model(scene, 64)
        np.testing.assert_array_equal(rollout(model), expected, err_msg=scene)
        for camera in (humanoid.PAPER_CAMERA, humanoid.FRONT_CAMERA, humanoid.GYMNASIUM_CAMERA):
            assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) >= 0


def test_paper_camera_pose_from_the_free_camera_numbers():
    position, xyaxes = humanoid.free_camera_pose((0, 0, 1), 3.5, -10.0, 180.0)
    # In front of the robot (it faces +x), 3.5 m from (0, 0, 1), looking slightly down; right is +y.
    np.testing.assert_allclose(
        position, [3.5 * math.cos(math.radians(10)), 0.0, 1 + 3.5 * math.sin(math.radians(10))], atol=1e-12
    )
    np.testing.assert_allclose(xyaxes[:3], [0, 1, 0], atol=1e-12)


def test_scenes_as_task_names():
    assert get_task("humanoid-kneeling").scene == "paper" == humanoid.DEFAULT_SCENE
    assert get_task("humanoid-kneeling").vector_task.camera == humanoid.PAPER_CAMERA
    builtin = get_task("humanoid-lotus@builtin")
    assert builtin.scene == "builtin" and builtin.vector_task.camera == humanoid.FRONT_CAMERA
    assert builtin.target_prompts == TASKS["humanoid-lotus"].target_prompts and builtin.vector_task is not None
    assert get_task("humanoid-kneeling@gymnasium").vector_task.camera == "track"
    with pytest.raises(
        ValueError, match="unknown scene 'fancy'; scenes are: paper, paper-textures, gymnasium, builtin"
    ):
        get_task("humanoid-kneeling@fancy")
    with pytest.raises(ValueError, match="only humanoid tasks take a scene"):
        get_task("cartpole@paper")
    with pytest.raises(ValueError, match="unknown humanoid scene"):
        humanoid.HumanoidPoseEnv(scene="fancy")


def test_textures_are_fixed_and_tile():
    for make in (textures.sky_cube, textures.stone_tiles, textures.brushed_metal):
        np.testing.assert_array_equal(make(), make.__wrapped__(), err_msg=make.__name__)
    tiles = textures.stone_tiles().astype(int)
    # Seamless: across the wrap the image changes no more than between neighbouring columns inside.
    inside = np.abs(np.diff(tiles, axis=1)).mean()
    assert np.abs(tiles[:, 0] - tiles[:, -1]).mean() < 2 * inside
    assert tiles.mean() < 90, "dark stone"
    directions = textures.cube_directions(8)
    centre = directions[:, 3:5, 3:5].mean(axis=(1, 2))
    np.testing.assert_allclose(
        centre / np.linalg.norm(centre, axis=1, keepdims=True),
        [[1, 0, 0], [-1, 0, 0], [0, 0, 1], [0, 0, -1], [0, -1, 0], [0, 1, 0]],
        atol=1e-9,
    )


@pytest.mark.egl
def test_sky_texels_land_where_mujoco_draws_them():
    """cube_directions follows MuJoCo's skybox layout: the texel in a view direction is the pixel drawn there."""
    model = humanoid.humanoid_model("paper", 64)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    sky = textures.sky_cube().reshape(6, textures.SKY_FACE, textures.SKY_FACE, 3).astype(int)
    directions = textures.cube_directions(textures.SKY_FACE)
    option = mujoco.MjvOption()
    option.geomgroup[:] = 0  # the sky alone
    camera = mujoco.MjvCamera()
    camera.type, camera.distance = mujoco.mjtCamera.mjCAMERA_FREE, 1.0
    renderer = mujoco.Renderer(model, 32, 32)
    for azimuth, elevation in [(0, 20), (70, 35), (160, 10), (250, 50), (330, 80)]:
        camera.azimuth, camera.elevation = azimuth, elevation  # looking up: the sky above the horizon
        renderer.update_scene(data, camera, option)
        pixel = renderer.render()[15:17, 15:17].reshape(-1, 3).mean(0)
        az, el = math.radians(azimuth), math.radians(elevation)
        view = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
        nearest = np.unravel_index(np.argmax(directions @ view), directions.shape[:3])
        texel = sky[nearest[0], nearest[1] - 2 : nearest[1] + 3, nearest[2] - 2 : nearest[2] + 3].reshape(-1, 3)
        assert np.all(np.abs(pixel - texel.mean(0)) < 12), (azimuth, elevation, pixel, texel.mean(0))
    renderer.close()


# ------------------------------------------------------------------------------ classic control


def _balance(obs) -> int:
    return int(obs[2] + 0.5 * obs[3] > 0)  # push the cart under the falling pole


def _pump(obs) -> np.ndarray:
    return np.array([1.0 if obs[1] >= 0 else -1.0], np.float32)  # push along the velocity: energy pumping


def _episode(env, policy, seed: int):
    obs, _ = env.reset(seed=seed)
    steps, infos, rewards = 0, [], []
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        steps += 1
        infos.append(info)
        rewards.append(reward)
        assert not terminated, "the paper's envs never terminate"
        if truncated:
            return steps, infos, rewards, obs


@pytest.mark.parametrize("task", ["cartpole", "mountain-car", "mountain-car-textured"])
def test_episodes_run_to_their_length(task):
    spec = get_task(task)
    assert spec.episode_length == 200
    env = gymnasium.wrappers.TimeLimit(spec.make_env(render_mode=None), spec.episode_length)
    rng = np.random.default_rng(0)
    random_policy = (
        (lambda obs: int(rng.integers(2)))
        if task == "cartpole"
        else (lambda obs: rng.uniform(-1, 1, 1).astype(np.float32))
    )
    good_policy = _balance if task == "cartpole" else _pump
    steps, infos, _, _ = _episode(env, random_policy, seed=1)
    assert steps == 200 and all("success" in info for info in infos)
    if task == "cartpole":
        assert not all(info["success"] for info in infos), "random pushes drop the pole"
    steps, infos, _, obs = _episode(env, good_policy, seed=1)
    assert steps == 200
    success = [info["success"] for info in infos]
    if task == "cartpole":
        assert all(success)
    else:
        first = success.index(True)
        assert first < 150 and all(success[first:]), "success is sticky"
    env.close()


def test_cartpole_success_on_hand_set_states():
    env = PaperCartPoleEnv()
    env.reset(seed=0)
    threshold = 12 * 2 * math.pi / 360
    for state, success in [
        ((0.0, 0.0, 0.0, 0.0), True),
        ((0.0, 0.0, threshold - 0.01, 0.0), True),
        ((0.0, 0.0, threshold + 0.01, 0.0), False),
        ((0.0, 0.0, 2 * math.pi, 0.0), True),  # a full turn: upright again
        ((0.0, 0.0, math.pi, 0.0), False),  # hanging down
        ((2.3, 0.0, 0.0, 0.0), True),
        ((2.5, 0.0, 0.0, 0.0), False),
    ]:
        assert env.is_success(state) == success, state
    # Stepped: a pole leaning past 12 degrees fails; the pole swings on, its angle wrapped, the cart stopped at the end.
    env.state = np.array([2.39, 5.0, 3.1, 5.0])
    obs, reward, terminated, truncated, info = env.step(1)
    assert not terminated and not info["success"] and reward == 1.0  # CartPole-v1 pays the falling step too
    assert obs[0] == np.float32(2.4) and -math.pi <= obs[2] < math.pi and obs[2] < 0
    env.state = np.array([0.0, 0.0, 0.0, 0.0])
    obs, reward, _, _, info = env.step(0)
    assert info["success"] and reward == 0.0, "upright again, but the ground truth paid up to the first fall only"
    env.reset(seed=0)
    assert env.step(0)[1] == 1.0


def test_cartpole_matches_cartpole_v1_until_the_pole_falls():
    paper, stock = PaperCartPoleEnv(), gymnasium.make("CartPole-v1").unwrapped
    obs_p, _ = paper.reset(seed=5)
    obs_s, _ = stock.reset(seed=5)
    np.testing.assert_array_equal(obs_p, obs_s)
    stock_return = paper_return = 0.0
    for t in range(200):
        action = t % 2 if t < 20 else 1
        obs_p, reward_p, _, _, info = paper.step(action)
        obs_s, reward_s, terminated, _, _ = stock.step(action)
        np.testing.assert_array_equal(obs_p, obs_s)
        assert info["success"] == (not terminated)
        paper_return += reward_p
        stock_return += reward_s
        if terminated:
            break
    assert terminated
    for _ in range(30):
        paper_return += paper.step(1)[1]
    assert paper_return == stock_return


def test_mountain_car_success_is_sticky_and_held_at_the_flag():
    env = PaperMountainCarContinuousEnv()
    env.reset(seed=0)
    env.state = np.array([0.3, 0.0], np.float32)
    assert not env.step(np.array([0.0], np.float32))[4]["success"]
    env.state = np.array([0.44, 0.05], np.float32)
    obs, reward, terminated, _, info = env.step(np.array([1.0], np.float32))
    assert info["success"] and not terminated and obs[0] == np.float32(0.45)  # held at the flag
    np.testing.assert_allclose(reward, 100.0 - 0.1)  # the stock reward of the step that reaches it
    obs, reward, _, _, info = env.step(np.array([1.0], np.float32))
    assert info["success"] and obs[0] == np.float32(0.45) and reward == 0.0
    for _ in range(120):  # not pushing: the car rolls back down, success stays (the paper's code)
        obs, _, _, _, info = env.step(np.array([-1.0], np.float32))
    assert obs[0] < 0.45 and info["success"]
    env.reset(seed=0)
    assert not env.success
    absorbing = PaperMountainCarContinuousEnv(absorbing=True)
    absorbing.reset(seed=0)
    absorbing.state = np.array([0.44, 0.05], np.float32)
    absorbing.step(np.array([1.0], np.float32))
    for _ in range(5):
        obs, reward, _, _, info = absorbing.step(np.array([-1.0], np.float32))
    np.testing.assert_array_equal(obs, np.array([0.45, 0.0], np.float32))
    assert reward == 0.0 and info["success"]


def test_mountain_car_ground_truth_return_is_mountain_car_continuous_v0s():
    for cls in (PaperMountainCarContinuousEnv, PaperMountainCarContinuousTexturedEnv):
        paper, stock = cls(render_mode=None), gymnasium.make("MountainCarContinuous-v0").unwrapped
        obs_p, _ = paper.reset(seed=2)
        obs_s, _ = stock.reset(seed=2)
        paper_return = stock_return = 0.0
        for _ in range(200):
            action = _pump(obs_s)
            obs_p, reward_p, _, _, info = paper.step(action)
            obs_s, reward_s, terminated, _, _ = stock.step(action)
            np.testing.assert_array_equal(obs_p[1], obs_s[1])
            paper_return += reward_p
            stock_return += reward_s
            assert info["success"] == terminated
            if terminated:
                break
        assert terminated
        for _ in range(20):
            paper_return += paper.step(np.array([1.0], np.float32))[1]
        assert paper_return == pytest.approx(stock_return)


def test_stock_semantics_under_gymnasiums_ids():
    stock = get_task("CartPole-v1")
    assert stock.target_prompts == TASKS["cartpole"].target_prompts and stock.resize_mode == "squash"
    assert stock.episode_length == 500
    env = stock.make_env(render_mode=None)
    env.reset(seed=0)
    terminated = False
    for _ in range(500):
        terminated = env.step(1)[2]
        if terminated:
            break
    assert terminated, "CartPole-v1 still ends when the pole falls"
    assert get_task("MountainCarContinuous-v0").baseline_prompts == ("a car in the mountain",)
    for env_id in (
        "vlmrm_fast/PaperCartPole-v0",
        "vlmrm_fast/PaperMountainCarContinuous-v0",
        "vlmrm_fast/PaperMountainCarContinuousTextured-v0",
    ):
        env = gymnasium.make(env_id)
        assert env.spec.max_episode_steps == 200
        env.close()


def test_vec_env_reports_success_and_runs_to_the_episode_length():
    from vlmrm_fast import FastVLMRewardVecEnv

    env = FastVLMRewardVecEnv("mountain-car-textured", 2, model="vlmrm-tiny", device="cpu", episode_length=6, seed=0)
    env.reset()
    for step in range(1, 7):
        _, rewards, dones, infos = env.step(np.ones((2, 1), np.float32))
        assert all(isinstance(info["success"], bool) for info in infos)
        assert dones.tolist() == [step == 6] * 2
    assert all(info["TimeLimit.truncated"] for info in infos)
    env.close()


# ------------------------------------------------------------------------------ configs/paper


def test_paper_configs_cover_the_papers_experiments():
    names = {str(p.relative_to(ROOT / "configs" / "paper")) for p in PAPER_CONFIGS}
    assert {"cartpole.yaml", "mountain-car.yaml", "mountain-car-textured.yaml"} <= names
    assert {f"humanoid/{task[len('humanoid-') :]}.yaml" for task in TASKS if task.startswith("humanoid-")} <= names
    assert {"scene-ablation/kneeling-gymnasium.yaml", "scene-ablation/kneeling-paper-textures.yaml"} <= names
    assert {f"model-scaling/kneeling-{arch}.yaml" for arch in ("RN50", "ViT-L-14", "ViT-H-14")} <= names
    assert len([n for n in names if n.startswith("goal-baseline/")]) == 9


@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=lambda p: str(p.relative_to(ROOT / "configs" / "paper")))
def test_paper_config_loads_and_builds_its_env(path, tmp_path):
    import open_clip

    from vlmrm_fast.training.config import load_config
    from vlmrm_fast.training.train import build_model, make_env

    cfg = load_config(path)
    spec = get_task(cfg.task)
    assert (
        tuple(cfg.reward.target_prompts) == spec.target_prompts
        and tuple(cfg.reward.baseline_prompts) == spec.baseline_prompts
    )
    architecture, tag = cfg.reward.model.split("/")
    assert tag in open_clip.list_pretrained_tags_by_model(architecture), "a checkpoint open_clip knows"
    # As the paper's code ran: fp16 autocast, torchvision's resize on tensors, a time limit that terminates.
    assert (cfg.reward.precision, cfg.reward.resize_mode, cfg.env.time_limit) == ("fp16", "paper", "terminal")
    kwargs = cfg.rl.kwargs
    if spec.vector_task is not None:  # Appendix C.2 and kube/job.yaml, the same for every humanoid run
        assert (cfg.rl.algorithm, cfg.env.n_envs, cfg.env.episode_length, cfg.env.render_size) == ("SAC", 32, 100, 480)
        assert kwargs == {
            "learning_starts": 50000,
            "train_freq": 100,
            "gradient_steps": 100,
            "batch_size": 512,
            "tau": 0.005,
            "gamma": 0.95,
            "learning_rate": 6e-4,
            "buffer_size": 1_000_000,
        }
        assert cfg.rl.total_timesteps == 10_000_000 and cfg.logging.checkpoint_every == 128_000
        assert cfg.env.renderer == "egl", "the paper's pixels: mujoco.Renderer's, whatever 'auto' would pick"
    else:
        assert cfg.env.episode_length == 200 and cfg.rl.total_timesteps == 3_000_000
        assert cfg.rl.algorithm == ("DQN" if cfg.task == "cartpole" else "SAC")
        # The paper's code refuses a CLIP-rewarded run unless updates come after whole episodes.
        assert kwargs["train_freq"] % cfg.env.episode_length == 0 and cfg.rl.episode_batch
    # The paper's scoring of an episode's last step (on the next episode's first frame) is a line away, off.
    line = "  # score_terminal_on: reset_frame"
    assert cfg.env.score_terminal_on == "terminal_state" and path.read_text().count(line) == 1
    exact = tmp_path / "exact.yaml"
    exact.write_text(path.read_text().replace(line, line.replace("# ", "")))
    assert load_config(exact).env.score_terminal_on == "reset_frame"
    # Build it for real (the paper's scoring on) with the tiny CLIP swapped in (nothing to download) and small sizes.
    small = copy.deepcopy(load_config(exact))
    small.reward = small.reward.replace(model="vlmrm-tiny", device="cpu", precision="fp32")  # fp16 is for GPUs
    small.env = small.env.replace(n_envs=2, render_size=48 if spec.vector_task is not None else None)
    small.rl = small.rl.replace(device="cpu", kwargs=dict(kwargs, buffer_size=100))
    venv = make_env(small)
    try:
        assert venv.episode_length == cfg.env.episode_length
        model = build_model(small, venv, tmp_path)
        venv.reset()
        actions = np.stack([venv.action_space.sample() for _ in range(venv.num_envs)])
        _, rewards, _, _ = venv.step(actions)
        assert rewards.shape == (2,)
        assert type(model).__name__ == cfg.rl.algorithm
    finally:
        venv.close()
