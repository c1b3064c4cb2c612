"""env.scene_assets: the paper's own image files, by their names, drawn instead of the generated
textures. The tests write small PNGs of plain colours under the paper's file names and find those
colours where the files belong in the frame (no network, no files of the paper's)."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
from PIL import Image

from vlmrm_fast import FastVLMRewardVecEnv
from vlmrm_fast.checks import FieldError
from vlmrm_fast.envs import get_task, paper_assets
from vlmrm_fast.envs.mountain_car import HEIGHT, WIDTH, PaperMountainCarContinuousTexturedEnv, hill_height
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.training.config import ConfigError, load_config

SKY, TILES, ROBOT = (30, 200, 60), (200, 40, 40), (40, 40, 220)
BACKGROUND, CAR = (20, 120, 220), (250, 10, 10)


def humanoid_assets(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, colour, size in (("sky.png", SKY, 24), ("tiles.png", TILES, 16), ("robot.png", ROBOT, 16)):
        Image.new("RGB", (size, size), colour).save(folder / name)
    return folder


def mountain_car_assets(folder: pathlib.Path) -> pathlib.Path:
    """The background, and a 70 x 33 car sprite: opaque red with a transparent margin, as the paper's has."""
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGBA", (WIDTH, HEIGHT), (*BACKGROUND, 255)).save(folder / "mountain_car_background.png")
    car = np.zeros((33, 70, 4), np.uint8)
    car[6:27, 8:62] = (*CAR, 255)
    Image.fromarray(car).save(folder / "mountain_car.png")
    return folder


def dominant(pixels: np.ndarray, channel: int) -> np.ndarray:
    """Which pixels have ``channel`` over twice each other channel."""
    pixels = pixels.astype(int)
    others = [c for c in range(3) if c != channel]
    return (pixels[..., channel] > 2 * pixels[..., others[0]]) & (pixels[..., channel] > 2 * pixels[..., others[1]])


@pytest.mark.egl
def test_humanoid_frames_show_the_files_where_they_belong(tmp_path):
    """Sky above the horizon in the sky file's colour (the skybox is unlit), the floor in the tiles'
    hue, the robot in its skin's; on the gymnasium env and the simulator env alike."""
    folder = humanoid_assets(tmp_path / "assets")
    env = get_task("humanoid-kneeling").with_scene_assets(str(folder)).make(render_size=(64, 64))
    env.reset(seed=0)
    frame = env.render()
    env.close()
    assert (frame[:10] == SKY).all(), "the top of the frame is sky"
    assert dominant(frame[-12:], 0).mean() > 0.95, "the bottom of the frame is floor"
    robot = dominant(frame[18:56, 24:40], 2)
    assert robot.mean() > 0.2, "the robot stands in the middle"
    assert not dominant(frame, 1)[26:].any(), "no sky colour below the horizon (row 24 of 64)"
    venv = FastVLMRewardVecEnv(
        "humanoid-kneeling",
        2,
        model="vlmrm-tiny",
        device="cpu",
        render_size=64,
        physics="batch",
        scene_assets=str(folder),
        seed=0,
    )
    try:
        venv.reset()
        venv.step(np.zeros((2, venv.action_space.shape[0]), np.float32))
        drawn = venv.last_frames().numpy()
        assert (drawn[:, :10] == SKY).all() and dominant(drawn[:, -12:], 0).mean() > 0.95
        assert dominant(drawn[:, 18:56, 24:40], 2).mean() > 0.2
    finally:
        venv.close()
    generated = get_task("humanoid-kneeling").make(render_size=(64, 64))
    generated.reset(seed=0)
    assert not (generated.render()[:10] == SKY).all(), "without scene_assets the generated sky is drawn"
    generated.close()


def test_mountain_car_frames_show_the_background_and_the_car_where_the_paper_put_them(tmp_path):
    folder = mountain_car_assets(tmp_path / "assets")
    env = PaperMountainCarContinuousTexturedEnv(scene_assets=str(folder))
    env.reset(seed=0)
    for position in (-1.0, -0.5, 0.3):
        env.state = np.array([position, 0.0])
        frame = env.render()
        assert frame.shape == (HEIGHT, WIDTH, 3)
        car = np.argwhere((frame == CAR).all(-1))
        assert len(car) > 0.8 * 21 * 54, "the car's opaque pixels, rotated"
        assert ((frame == BACKGROUND).all(-1) | (frame == CAR).all(-1)).mean() > 0.99, "the rest is background"
        # The paper centres the car 15 px above the hill at its position (600 px span 1.8 world units).
        scale = WIDTH / (env.max_position - env.min_position)
        expected = (HEIGHT - (15 + hill_height(position) * scale), (position - env.min_position) * scale)
        centre = car.mean(axis=0)
        assert np.abs(centre - np.array(expected)).max() < 4, (position, centre, expected)
        # Tilted along the slope: the car's long axis (its pixels' principal axis) leans as the hill does.
        xy = np.stack([car[:, 1], -car[:, 0]], axis=1).astype(float)
        _, axes = np.linalg.eigh(np.cov(xy.T))
        long_axis = axes[:, -1]
        lean = math.degrees(math.atan(long_axis[1] / long_axis[0]))
        slope = math.degrees(math.atan(math.cos(3 * position) * 0.45 * 3))
        assert abs(lean - slope) < 3, (position, lean, slope)
    env.close()
    drawn = PaperMountainCarContinuousTexturedEnv()
    drawn.reset(seed=0)
    assert not (drawn.render() == BACKGROUND).all(-1).any(), "without scene_assets the drawn scene"


def test_the_vec_env_draws_mountain_car_with_the_files(tmp_path):
    folder = mountain_car_assets(tmp_path / "assets")
    venv = FastVLMRewardVecEnv("mountain-car-textured", 2, model="vlmrm-tiny", device="cpu", scene_assets=str(folder))
    try:
        venv.reset()
        venv.step(np.zeros((2, 1), np.float32))
        frames = venv.last_frames().numpy()
        assert (frames == BACKGROUND).all(-1).mean() > 0.9 and (frames == CAR).all(-1).any()
    finally:
        venv.close()


def test_files_are_found_in_a_checkout_of_the_papers_repository(tmp_path):
    humanoid_assets(tmp_path / "vlmrm" / "src" / "vlmrm" / "envs" / "mujoco")
    mountain_car_assets(tmp_path / "vlmrm" / "src" / "vlmrm" / "envs" / "classic_control")
    checkout = str(tmp_path / "vlmrm")
    assert EnvSpec("humanoid-kneeling", scene_assets=checkout).scene_assets == checkout
    assert EnvSpec("mountain-car-textured", scene_assets=checkout).task_spec().scene_assets == checkout
    assert paper_assets.find_asset(checkout, "robot.png") == tmp_path / "vlmrm/src/vlmrm/envs/mujoco/robot.png"
    assert get_task("humanoid-kneeling@paper-textures").with_scene_assets(checkout).vector_task.scene_assets == checkout


def test_missing_files_and_tasks_without_them_are_refused_with_the_fix(tmp_path):
    folder = tmp_path / "partial"
    folder.mkdir()
    Image.new("RGB", (4, 4)).save(folder / "sky.png")
    with pytest.raises(FieldError, match=r"scene_assets: .*partial lacks tiles.png, robot.png .*git clone https"):
        EnvSpec("humanoid-kneeling", scene_assets=str(folder))
    for task in ("cartpole", "mountain-car", "humanoid-kneeling@builtin", "humanoid-kneeling@gymnasium"):
        with pytest.raises(FieldError, match=f"task '{task}' draws none of the paper's image files"):
            EnvSpec(task, scene_assets=str(folder))
    with pytest.raises(FieldError, match="scene_assets: must be a folder"):
        EnvSpec("humanoid-kneeling", scene_assets=3)
    with pytest.raises(FileNotFoundError, match="no mountain_car_background.png in .*git clone"):
        PaperMountainCarContinuousTexturedEnv(scene_assets=str(folder))


def test_scene_assets_in_a_training_config(tmp_path):
    folder = humanoid_assets(tmp_path / "assets")
    config = {
        "output_dir": str(tmp_path / "run"),
        "reward": {"model": "vlmrm-tiny", "device": "cpu"},
        "env": {"task": "humanoid-kneeling", "scene_assets": str(folder), "time_limit": "terminal"},
    }
    cfg = load_config(config)
    assert cfg.env.scene_assets == str(folder) and cfg.env.time_limit == "terminal"
    with pytest.raises(ConfigError, match="env.scene_assets: .* lacks"):
        load_config({**config, "env": {"task": "humanoid-kneeling", "scene_assets": str(tmp_path)}})
