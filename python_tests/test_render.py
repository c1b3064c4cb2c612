"""EGLRenderer: the same pixels as mujoco.Renderer, frames in order, errors, no leaks."""

from __future__ import annotations

import json
import textwrap
import threading

import mujoco
import numpy as np
import pytest
from child_process import run_python

from vlmrm_fast import BatchSimulator, EGLRenderer
from vlmrm_fast.runtime.device import native_cuda_usable

pytestmark = pytest.mark.egl


# Textures (2D checker, skybox), a reflective floor, shadows from a spot light, a mesh, a
# transparent geom, a tendon and sites: the renderer's features beyond the humanoid's.
SCENE_XML = """
<mujoco>
  <visual><quality shadowsize="1024"/></visual>
  <asset>
    <texture name="sky" type="skybox" builtin="gradient" rgb1=".3 .5 .7" rgb2="0 0 0" width="64" height="64"/>
    <texture name="grid" type="2d" builtin="checker" rgb1=".1 .2 .3" rgb2=".2 .3 .4" width="64" height="64"/>
    <material name="grid" texture="grid" texrepeat="4 4" reflectance=".3"/>
    <mesh name="tet" vertex="0 0 0  .2 0 0  0 .2 0  0 0 .2"/>
  </asset>
  <worldbody>
    <light name="spot" pos="0 0 3" dir="0 0 -1" castshadow="true"/>
    <geom type="plane" size="2 2 .1" material="grid"/>
    <camera name="side" pos="0 -2.5 1" xyaxes="1 0 0 0 .4 1"/>
    <body name="ball" pos="0 0 .5">
      <freejoint/>
      <geom type="sphere" size=".15" rgba=".9 .2 .2 1"/>
      <site name="mark" pos="0 0 .15" size=".03"/>
    </body>
    <body name="arm" pos=".6 0 .4">
      <joint name="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 .4 0 0" size=".05" rgba=".2 .8 .2 1"/>
      <geom type="mesh" mesh="tet" pos=".4 0 0" rgba=".8 .8 .2 1"/>
      <geom type="box" size=".1 .1 .1" pos="0 0 .2" rgba=".2 .2 .9 .5"/>
      <site name="tip" pos=".4 0 0"/>
    </body>
  </worldbody>
  <tendon><spatial width=".01"><site site="mark"/><site site="tip"/></spatial></tendon>
</mujoco>
"""


@pytest.fixture(scope="module")
def scene() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(SCENE_XML)


def random_qpos(model: mujoco.MjModel, n: int, seed: int, scale: float = 0.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    qpos = np.tile(model.qpos0, (n, 1))
    qpos += rng.uniform(-scale, scale, qpos.shape)
    for j in range(model.njnt):  # keep quaternions unit
        if model.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
            a = model.jnt_qposadr[j] + (3 if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 0)
            qpos[:, a : a + 4] /= np.linalg.norm(qpos[:, a : a + 4], axis=1, keepdims=True)
    return qpos


def reference_frames(model, qpos, height, width, camera=-1) -> np.ndarray:
    """mujoco.Renderer, one MjData per state after mj_forward."""
    frames = []
    with mujoco.Renderer(model, height=height, width=width) as renderer:
        for q in qpos:
            d = mujoco.MjData(model)
            d.qpos[:] = q
            mujoco.mj_forward(model, d)
            renderer.update_scene(d, camera)
            frames.append(renderer.render().copy())
    return np.stack(frames)


def assert_frames_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.uint8 and actual.shape == expected.shape
    for i, (a, e) in enumerate(zip(actual, expected)):
        differing = int((a != e).any(-1).sum())
        assert differing == 0, f"frame {i}: {differing} pixels differ (max {np.abs(a.astype(int) - e).max()})"


@pytest.mark.parametrize("camera", [-1, "track"])
def test_humanoid_pixels_equal_mujoco_renderer(humanoid, camera):
    qpos = random_qpos(humanoid, 3, seed=0, scale=0.3)
    with EGLRenderer(humanoid, 3, 64, 64, camera=camera) as renderer:
        frames = renderer.render(qpos)
    assert_frames_equal(frames, reference_frames(humanoid, qpos, 64, 64, camera))


@pytest.mark.parametrize("camera", [-1, "side", 0])
def test_scene_pixels_equal_mujoco_renderer(scene, camera):
    qpos = random_qpos(scene, 2, seed=1, scale=0.4)
    with EGLRenderer(scene, 2, 48, 80, camera=camera) as renderer:
        frames = renderer.render(qpos)
    assert_frames_equal(frames, reference_frames(scene, qpos, 48, 80, camera))


def test_frames_follow_the_order_of_states(scene):
    qpos = random_qpos(scene, 4, seed=2, scale=0.6)
    with EGLRenderer(scene, 4, 32, 32, camera="side") as renderer:
        frames = renderer.render(qpos)
        flat = frames.reshape(4, -1)
        assert all(not np.array_equal(flat[i], flat[j]) for i in range(4) for j in range(i))
        order = [2, 0, 3, 1]
        np.testing.assert_array_equal(renderer.render(qpos[order]), frames[order])
    with EGLRenderer(scene, 1, 32, 32, camera="side") as single:
        for i in range(4):
            np.testing.assert_array_equal(single.render(qpos[i : i + 1])[0], frames[i])


@pytest.mark.parametrize("persistent", [True, False])
def test_render_sim_equals_render_of_the_same_state(humanoid, persistent):
    n = 3
    sim = BatchSimulator(humanoid, n, frame_skip=5, nthread=2, persistent=persistent)
    sim.reset(seed=0, noise_scale=0.1)
    rng = np.random.default_rng(3)
    for _ in range(4):
        sim.step(rng.uniform(-0.4, 0.4, (n, humanoid.nu)))
    with EGLRenderer(humanoid, n, 48, 48) as renderer:
        from_sim = renderer.render_sim(sim)
        from_qpos = renderer.render(sim.qpos.copy())
    np.testing.assert_array_equal(from_sim, from_qpos)
    assert_frames_equal(from_sim, reference_frames(humanoid, sim.qpos.copy(), 48, 48))


def test_every_draw_of_a_frame_is_from_its_own_camera(scene):
    """One camera per frame for every draw (set_frame_camera; initially the renderer's): positions, a simulator's
    state reached, and its data as it lies alike."""
    free = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(scene, free)
    fields = {"type": int(mujoco.mjtCamera.mjCAMERA_FREE), "lookat": list(free.lookat), "distance": free.distance}
    fields |= {"azimuth": free.azimuth, "elevation": free.elevation}
    sim = BatchSimulator(scene, 3, nthread=2)
    sim.reset(qpos=random_qpos(scene, 3, seed=4, scale=0.4))
    qpos = sim.qpos.copy()
    expected = reference_frames(scene, qpos, 32, 40, "side")
    expected[1] = reference_frames(scene, qpos[1:2], 32, 40, -1)[0]
    with EGLRenderer(scene, 3, 32, 40, camera="side") as renderer:
        renderer._native_live().set_frame_camera(1, fields)
        assert_frames_equal(renderer.render(qpos), expected)
        assert_frames_equal(renderer.render_sim(sim), expected)
        assert_frames_equal(renderer.render_sim(sim, positions="gymnasium"), expected)  # (a reset's data is current)


def test_ranges_drawn_and_lent_in_place(humanoid):
    """The pipelined step's hand-off: frames drawn range by range, then lent where they lie."""
    import torch

    from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec

    n = 5
    sim = BatchSimulator(humanoid, n)
    sim.qpos[:] = random_qpos(humanoid, n, seed=8)
    spec = PreprocessSpec(size=32, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    pre = FramePreprocessor(spec, "cpu")
    with EGLRenderer(humanoid, n, 32, 40, camera="track") as renderer:
        whole = renderer.render_sim(sim)
        renderer.render(np.tile(humanoid.qpos0, (n, 1)))  # other frames in the buffer first
        renderer.draw(sim, slice(0, 3))
        renderer.draw(sim, slice(3, 5))
        assert_frames_equal(renderer.frames(), whole)
        with renderer.lend(slice(3, 5)) as view:
            assert view.num_frames == 2 and view.device == torch.device("cpu")
            lent = pre.run(view)
            with pytest.raises(RuntimeError, match="the frames are lent"):
                renderer.draw(sim)
            with pytest.raises(RuntimeError, match="the frames are lent"):
                with renderer.lend():
                    pass
        assert torch.equal(lent, pre(whole[3:5]))
        renderer.draw(sim)  # released: drawing works again
        with pytest.raises(ValueError, match="non-empty slice of consecutive"):
            renderer.draw(sim, slice(4, 2))
    sim.close()


def test_host_reads_go_through_cuda_only_on_a_cuda_egl_device(humanoid):
    """On a CUDA GPU's EGL device the host reads the pixel buffer through CUDA
    into page-locked memory (mapping it on the host may move it out of video memory); on Mesa it
    maps the buffer. Either way the host sees mujoco.Renderer's pixels, read after read."""
    import torch

    from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec

    qpos = random_qpos(humanoid, 3, seed=9, scale=0.3)
    spec = PreprocessSpec(size=32, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    with EGLRenderer(humanoid, 3, 40, 48, camera="track") as renderer:
        assert renderer.host_reads_through_cuda is (renderer.cuda_device is not None and native_cuda_usable())
        expected = reference_frames(humanoid, qpos, 40, 48, "track")
        assert_frames_equal(renderer.render(qpos), expected)
        assert_frames_equal(renderer.frames(), expected)
        with renderer.lend(slice(1, 3)) as view:
            assert view.device == torch.device("cpu")
            lent = FramePreprocessor(spec, "cpu").run(view)
        assert torch.equal(lent, FramePreprocessor(spec, "cpu")(expected[1:3]))
        renderer.render(qpos[::-1].copy())  # drawing after a host read, and reading again
        assert_frames_equal(renderer.frames(), expected[::-1])


def test_render_sim_leaves_the_physics_alone(humanoid):
    """Scene updates compute kinematics in the simulations' own mjData (persistent batch)."""
    n, rng = 2, np.random.default_rng(7)
    ctrls = rng.uniform(-0.4, 0.4, (4, n, humanoid.nu))
    outputs = ["qpos", "cinert", "cvel", "cfrc_ext"]
    plain = BatchSimulator(humanoid, n, 5, outputs, rne_post_constraint=True)
    drawn = BatchSimulator(humanoid, n, 5, outputs, rne_post_constraint=True)
    with EGLRenderer(humanoid, n, 16, 16) as renderer:
        for ctrl in ctrls:
            plain.step(ctrl)
            drawn.step(ctrl)
            renderer.render_sim(drawn)
            np.testing.assert_array_equal(drawn.output_array, plain.output_array)


def test_calls_from_another_thread(scene):
    qpos = random_qpos(scene, 2, seed=4)
    with EGLRenderer(scene, 2, 24, 24) as renderer:
        expected = renderer.render(qpos)
        results = []
        worker = threading.Thread(target=lambda: results.append(renderer.render(qpos)))
        worker.start()
        worker.join()
        np.testing.assert_array_equal(results[0], expected)
        np.testing.assert_array_equal(renderer.render(qpos), expected)


def test_errors_are_clear(scene, humanoid, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the max_geom case logs a MuJoCo warning to MUJOCO_LOG.TXT
    with pytest.raises(ValueError, match=r"camera 'nope' is not in the model; its cameras: 'side'"):
        EGLRenderer(scene, 1, 16, 16, camera="nope")
    with pytest.raises(ValueError, match=r"camera id 3 is outside \[-1, 1\)"):
        EGLRenderer(scene, 1, 16, 16, camera=3)
    with pytest.raises(TypeError, match="camera"):
        EGLRenderer(scene, 1, 16, 16, camera=1.5)
    with pytest.raises(ValueError, match="exceeds this OpenGL's limit"):
        EGLRenderer(scene, 1, 16, 1 << 20)
    with pytest.raises(ValueError, match="width: must be a positive integer, got 0"):
        EGLRenderer(scene, 1, 16, 0)
    with pytest.raises(ValueError, match="gpu=99"):
        EGLRenderer(scene, 1, 16, 16, gpu=99)
    with pytest.raises(RuntimeError, match="max_geom=2"):
        EGLRenderer(humanoid, 1, 16, 16, max_geom=2).render(humanoid.qpos0[None])
    renderer = EGLRenderer(scene, 2, 16, 16)
    with pytest.raises(ValueError, match=r"qpos must have shape \(2, 8\)"):
        renderer.render(np.zeros((3, scene.nq)))
    bad = np.tile(scene.qpos0, (2, 1))
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        renderer.render(bad)
    with pytest.raises(ValueError, match="simulations"):
        renderer.render_sim(BatchSimulator(scene, 3))
    with pytest.raises(ValueError, match="model"):
        renderer.render_sim(BatchSimulator(humanoid, 2))
    if not native_cuda_usable():
        with pytest.raises(RuntimeError, match="requested, but no (usable )?GPU"):
            renderer.render(np.tile(scene.qpos0, (2, 1)), device="cuda")
    renderer.close()
    renderer.close()
    with pytest.raises(RuntimeError, match="closed"):
        renderer.render(np.tile(scene.qpos0, (2, 1)))


def _run_child(code: str, env: dict | None = None) -> dict:
    result = run_python(["-c", textwrap.dedent(code)], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_missing_egl_names_the_packages():
    out = _run_child(
        """
        import json, mujoco, vlmrm_fast
        model = mujoco.MjModel.from_xml_string("<mujoco/>")
        try:
            vlmrm_fast.EGLRenderer(model, 1, 8, 8)
            print(json.dumps({"error": None}))
        except RuntimeError as e:
            print(json.dumps({"error": str(e)}))
        """,
        env={"__EGL_VENDOR_LIBRARY_FILENAMES": "/nonexistent/egl_vendor.json"},
    )
    if out["error"] is None:
        pytest.skip("this libEGL does not use glvnd vendor files: cannot hide EGL")
    for package in ("libegl1", "libegl-mesa0", "libgl1-mesa-dri", "NVIDIA driver"):
        assert package in out["error"]


@pytest.mark.slow  # a hundred renderers made and closed
def test_hundred_renderers_leak_no_contexts_or_memory():
    out = _run_child(
        f"""
        import json, resource, mujoco, numpy as np
        from vlmrm_fast import EGLRenderer
        from vlmrm_fast._core import render as native_render
        model = mujoco.MjModel.from_xml_string({SCENE_XML!r})
        qpos = np.tile(model.qpos0, (2, 1))

        def rss_mb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * resource.getpagesize() / 2**20

        rss, live = [], []
        for i in range(100):
            renderer = EGLRenderer(model, 2, 16, 16)
            if i % 4 == 0:  # drawing costs a shader compile per context on llvmpipe
                renderer.render(qpos)
            renderer.close()
            live.append(native_render.live_egl_contexts())
            rss.append(rss_mb())
        print(json.dumps({{"live": live, "rss": rss}}))
        """
    )
    assert max(out["live"]) == 0
    growth = out["rss"][-1] - out["rss"][19]
    assert growth < 16, f"RSS grew {growth:.1f} MiB over 80 renderers: {out['rss'][19::20]}"


# ---------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_cuda_frames_equal_host_frames(humanoid):
    import torch

    qpos = random_qpos(humanoid, 5, seed=5, scale=0.3)
    with EGLRenderer(humanoid, 5, 64, 96, camera="track") as renderer:
        assert renderer.cuda_device is not None
        host = renderer.render(qpos)
        device = renderer.render(qpos, device="cuda")
        assert isinstance(device, torch.Tensor) and device.is_cuda and device.dtype == torch.uint8
        np.testing.assert_array_equal(device.cpu().numpy(), host)


@pytest.mark.gpu
def test_render_sim_on_device(humanoid):
    n = 4
    sim = BatchSimulator(humanoid, n, frame_skip=5)
    sim.reset(seed=1, noise_scale=0.1)
    sim.step(np.random.default_rng(6).uniform(-0.4, 0.4, (n, humanoid.nu)))
    with EGLRenderer(humanoid, n, 64, 64) as renderer:
        device = renderer.render_sim(sim, device="cuda")
        host = renderer.render_sim(sim)
    np.testing.assert_array_equal(device.cpu().numpy(), host)
