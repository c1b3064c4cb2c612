"""WarpBatchRenderer (MuJoCo Warp, here on Warp's CPU backend) against mujoco.Renderer.

The two renderers are different algorithms (a ray tracer and OpenGL rasterization),
so the pictures are held to the same geometry, orientation and colours with a bound
on the mean absolute difference, not to equal pixels.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from vlmrm_fast.envs import humanoid
from vlmrm_fast.sim import BatchSimulator

pytestmark = pytest.mark.warp

SIZE = 64
CAMERA = humanoid.SCENES[humanoid.DEFAULT_SCENE].camera  # the humanoid tasks' camera
# Mean absolute difference to mujoco.Renderer in grey levels, 64 px frames on this machine:
# humanoid in the paper scene (textures, skybox, shadows) 8.8-9.1, the test scene below 0.83-0.86.
HUMANOID_MAD = 14.0
SCENE_MAD = 3.0

SCENE = """
<mujoco>
  <visual><global offwidth="128" offheight="128"/></visual>
  <worldbody>
    <light pos="0 0 4" dir="0 0 -1" castshadow="false"/>
    <geom name="floor" type="plane" size="3 3 0.1" rgba="0.1 0.6 0.1 1"/>
    <body name="red" pos="-0.6 0 0.6">
      <freejoint/>
      <geom type="box" size="0.25 0.25 0.25" rgba="0.9 0.05 0.05 1"/>
    </body>
    <body name="blue" pos="0.6 0 0.3">
      <joint type="slide" axis="0 0 1"/>
      <geom type="sphere" size="0.25" rgba="0.05 0.05 0.9 1"/>
    </body>
    <camera name="front" pos="0 -3 1.2" xyaxes="1 0 0 0 0.35 0.94"/>
  </worldbody>
</mujoco>
"""


def reference(model: mujoco.MjModel, qpos: np.ndarray, camera: int | str) -> np.ndarray:
    data = mujoco.MjData(model)
    frames = []
    with mujoco.Renderer(model, SIZE, SIZE) as renderer:
        for row in qpos:
            data.qpos[:] = row
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera=camera)
            frames.append(renderer.render())
    return np.stack(frames)


def mad(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean absolute difference per frame."""
    return np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(len(a), -1).mean(axis=1)


@pytest.fixture(scope="module")
def humanoid_model() -> mujoco.MjModel:
    return humanoid.humanoid_model(humanoid.DEFAULT_SCENE, SIZE)


@pytest.fixture(scope="module")
def scene() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(SCENE)


def poses(model: mujoco.MjModel, n: int, spread: float = 0.6) -> np.ndarray:
    qpos = np.tile(model.qpos0, (n, 1))
    qpos[:, 7:] += np.linspace(0.0, spread, n)[:, None]  # env i bends further than env i - 1
    return qpos


@pytest.mark.egl
def test_humanoid_matches_mujoco_renderer(humanoid_model):
    from vlmrm_fast.warp_rendering import WarpBatchRenderer

    n = 4
    qpos = poses(humanoid_model, n)
    with WarpBatchRenderer(humanoid_model, n, SIZE, SIZE, camera=CAMERA, device="cpu") as renderer:
        frames = renderer.render(qpos)
    assert frames.shape == (n, SIZE, SIZE, 3) and frames.dtype == np.uint8
    expected = reference(humanoid_model, qpos, CAMERA)
    assert mad(frames, expected).max() < HUMANOID_MAD
    # Frame i is env i's: each frame is closest to its own reference.
    cross = np.array([[mad(frames[i : i + 1], expected[j : j + 1])[0] for j in range(n)] for i in range(n)])
    assert (cross.argmin(axis=1) == np.arange(n)).all(), cross.round(1)
    assert len({frame.tobytes() for frame in frames}) == n


@pytest.mark.egl
def test_scene_orientation_and_channels(scene):
    from vlmrm_fast.warp_rendering import WarpBatchRenderer

    qpos = np.tile(scene.qpos0, (2, 1))
    qpos[1, 7] = 0.4  # the blue ball slides up in env 1
    with WarpBatchRenderer(scene, 2, SIZE, SIZE, camera="front", device="cpu") as renderer:
        frames = renderer.render(qpos)
    expected = reference(scene, qpos, "front")
    assert mad(frames, expected).max() < SCENE_MAD
    frame = frames[0].astype(int)

    def dominant(image: np.ndarray, channel: int) -> np.ndarray:
        others = np.delete(image, channel, axis=-1)
        return (image[..., channel] > 60) & (image[..., channel] > 3 * others.max(axis=-1))

    red, green, blue = (dominant(frame, c) for c in range(3))
    assert red.sum() > 50 and blue.sum() > 50, "RGB channels in RGB order"
    cols = np.arange(SIZE)
    rows = np.arange(SIZE)[:, None]
    assert (cols * red).sum() / red.sum() < SIZE / 2 < (cols * blue).sum() / blue.sum(), "red box left, blue ball right"
    assert (rows * red).sum() / red.sum() < (rows * green).sum() / green.sum(), "upright: the floor below the box"
    blue_up = dominant(frames[1].astype(int), 2)
    assert (rows * blue_up).sum() / blue_up.sum() < (rows * blue).sum() / blue.sum(), "env 1's ball is higher"


def test_ranges_draw_the_same_frames_as_one_call(humanoid_model):
    from vlmrm_fast.warp_rendering import WarpBatchRenderer

    n = 5
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = poses(humanoid_model, n)
    with WarpBatchRenderer(humanoid_model, n, 32, 32, camera=CAMERA, device="cpu") as renderer:
        whole = renderer.render_sim(sim)
        renderer.draw(sim, slice(0, 2))
        renderer.draw(sim, slice(2, 5))
        np.testing.assert_array_equal(renderer.frames(), whole)
        with renderer.lend(slice(2, 5)) as view:
            assert view.num_frames == 3 and view.device == torch.device("cpu")
            np.testing.assert_array_equal(view.owner.numpy(), whole[2:5])
        sim.close()


def test_bad_inputs_are_refused(humanoid_model, scene):
    from vlmrm_fast.warp_rendering import WarpBatchRenderer

    with pytest.raises(ValueError, match="free camera"):
        WarpBatchRenderer(scene, 1, 16, 16, camera=-1, device="cpu")
    with pytest.raises(ValueError, match="its cameras: front"):
        WarpBatchRenderer(scene, 1, 16, 16, camera="back", device="cpu")
    with pytest.raises(ValueError, match="num_envs"):
        WarpBatchRenderer(scene, 0, 16, 16, camera="front", device="cpu")
    with WarpBatchRenderer(scene, 2, 16, 16, camera="front", device="cpu") as renderer:
        with pytest.raises(ValueError, match=r"qpos must have shape \(2, 8\)"):
            renderer.render(np.zeros((3, 8)))
        bad = np.tile(scene.qpos0, (2, 1))
        bad[0, 0] = np.nan
        with pytest.raises(ValueError, match="non-finite"):
            renderer.render(bad)
        with pytest.raises(ValueError, match="draws on cpu"):
            renderer.render(np.tile(scene.qpos0, (2, 1)), device="cuda")
    with pytest.raises(RuntimeError, match="closed"):
        renderer.frames()


@pytest.mark.gpu
def test_cuda_frames_equal_cpu_frames_up_to_the_bound(humanoid_model):
    """On a GPU: frames as a CUDA tensor (no host copy), close to the CPU backend's, graph replays repeat."""
    from vlmrm_fast.warp_rendering import WarpBatchRenderer

    n = 3
    qpos = poses(humanoid_model, n)
    with WarpBatchRenderer(humanoid_model, n, SIZE, SIZE, camera=CAMERA, device="cpu") as cpu:
        expected = cpu.render(qpos)
    with WarpBatchRenderer(humanoid_model, n, SIZE, SIZE, camera=CAMERA, device="cuda") as gpu:
        first = gpu.render(qpos, device="cuda")
        assert first.device.type == "cuda" and first.shape == (n, SIZE, SIZE, 3)
        again = gpu.render(qpos[::-1].copy(), device="cuda")  # a replay of the captured graph, other states
        np.testing.assert_array_equal(again.cpu().numpy()[::-1], first.cpu().numpy())
    assert mad(first.cpu().numpy(), expected).max() < 2.0
