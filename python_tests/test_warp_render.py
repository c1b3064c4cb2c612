"""WarpRenderer (MuJoCo Warp, here on Warp's CPU backend) against mujoco.Renderer.

The two renderers are different algorithms (a ray tracer and OpenGL rasterization),
so the pictures are held to the same geometry, orientation and colours with a bound
on the mean absolute difference, not to equal pixels.
"""

from __future__ import annotations

import pathlib
import time

import mujoco
import numpy as np
import pytest
import torch

from vlmrm_fast.envs import humanoid
from vlmrm_fast.physics.batch import BatchSimulator

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
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 4
    qpos = poses(humanoid_model, n)
    with WarpRenderer(humanoid_model, n, SIZE, SIZE, camera=CAMERA, device="cpu") as renderer:
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
    from vlmrm_fast.rendering.warp import WarpRenderer

    qpos = np.tile(scene.qpos0, (2, 1))
    qpos[1, 7] = 0.4  # the blue ball slides up in env 1
    with WarpRenderer(scene, 2, SIZE, SIZE, camera="front", device="cpu") as renderer:
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
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 5
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = poses(humanoid_model, n)
    with WarpRenderer(humanoid_model, n, 32, 32, camera=CAMERA, device="cpu") as renderer:
        whole = renderer.render_sim(sim)
        renderer.draw(sim, slice(0, 2))
        renderer.draw(sim, slice(2, 5))
        np.testing.assert_array_equal(renderer.frames(), whole)
        with renderer.lend(slice(2, 5)) as view:
            assert view.num_frames == 3 and view.device == torch.device("cpu")
            np.testing.assert_array_equal(view.owner.numpy(), whole[2:5])
        sim.close()


def test_bad_inputs_are_refused(humanoid_model, scene):
    from vlmrm_fast.rendering.warp import WarpRenderer

    with pytest.raises(ValueError, match="free camera"):
        WarpRenderer(scene, 1, 16, 16, camera=-1, device="cpu")
    with pytest.raises(ValueError, match="its cameras: front"):
        WarpRenderer(scene, 1, 16, 16, camera="back", device="cpu")
    with pytest.raises(ValueError, match="num_envs"):
        WarpRenderer(scene, 0, 16, 16, camera="front", device="cpu")
    with WarpRenderer(scene, 2, 16, 16, camera="front", device="cpu") as renderer:
        with pytest.raises(ValueError, match=r"qpos must have shape \(2, 8\)"):
            renderer.render(np.zeros((3, 8)))
        bad = np.tile(scene.qpos0, (2, 1))
        bad[0, 0] = np.nan
        with pytest.raises(ValueError, match="non-finite"):
            renderer.render(bad)
        # Frames asked on a GPU: refused, as the EGL renderer refuses them (rendering.base._target)
        expected = (
            (ValueError, "draws on the CPU")
            if torch.cuda.is_available()  # only torch's CUDA matters to Warp's frames (not the core's)
            else (RuntimeError, "requested, but no (usable )?GPU")
        )
        with pytest.raises(expected[0], match=expected[1]):
            renderer.render(np.tile(scene.qpos0, (2, 1)), device="cuda")
        with pytest.raises(ValueError, match="the renderer draws 2 of a model with nq=8"):
            renderer.draw(BatchSimulator(scene, 3))
    with pytest.raises(ValueError, match="width: must be at most 8192 pixels"):
        WarpRenderer(scene, 1, 16, 9000, camera="front", device="cpu")
    with pytest.raises(RuntimeError, match="closed"):
        renderer.frames()


@pytest.mark.gpu
def test_cuda_frames_equal_cpu_frames_up_to_the_bound(humanoid_model):
    """On a GPU: frames as a CUDA tensor (no host copy), close to the CPU backend's, graph replays repeat."""
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 3
    qpos = poses(humanoid_model, n)
    with WarpRenderer(humanoid_model, n, SIZE, SIZE, camera=CAMERA, device="cpu") as cpu:
        expected = cpu.render(qpos)
    with WarpRenderer(humanoid_model, n, SIZE, SIZE, camera=CAMERA, device="cuda") as gpu:
        first = gpu.render(qpos, device="cuda")
        assert first.device.type == "cuda" and first.shape == (n, SIZE, SIZE, 3)
        again = gpu.render(qpos[::-1].copy(), device="cuda")  # a replay of the captured graph, other states
        np.testing.assert_array_equal(again.cpu().numpy()[::-1], first.cpu().numpy())
    assert mad(first.cpu().numpy(), expected).max() < 2.0


# ------------------------------------------------------------- streams, buffers and closing
# The invariants that the GPU paths rest on, checked on Warp's CPU backend where they can be;
# the GPU tests below run the CUDA paths themselves (each one found on the first GPU run, one test or more each).


def test_overlapping_ranges_have_their_own_staging_rows(humanoid_model):
    """A whole-batch range and a range inside it never share the host rows an upload reads."""
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 4
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = poses(humanoid_model, n)
    # one thread: a slot per range drawn (test_cpu_threads_draw_the_same_frames splits them)
    with WarpRenderer(humanoid_model, n, 16, 16, camera=CAMERA, device="cpu", cpu_threads=1) as renderer:
        renderer.draw(sim)
        renderer.draw(sim, slice(0, 2))
        renderer.draw(sim, slice(1, 4))
        spans = []
        for slot in renderer._slots.values():
            start = slot.staging.data_ptr()
            spans.append((start, start + slot.staging.numel() * slot.staging.element_size()))
            assert slot.staging.shape == (slot.rows.stop - slot.rows.start, humanoid_model.nq)
        spans.sort()
        assert len(spans) == 3
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), spans
    sim.close()


class _Event:
    """Stands for a CUDA event: records when it was waited for, and what the renderer still held then."""

    def __init__(self, renderer, waits: list):
        self.renderer, self.waits = renderer, waits

    def synchronize(self) -> None:
        self.waits.append(len(self.renderer._slots))


def test_close_waits_for_the_queued_uploads_and_draws_before_it_frees(scene):
    from vlmrm_fast.rendering.warp import WarpRenderer

    renderer = WarpRenderer(scene, 2, 16, 16, camera="front", device="cpu")
    renderer.render(np.tile(scene.qpos0, (2, 1)))
    renderer._slot(slice(0, 1))
    waits: list[int] = []
    for slot in renderer._slots.values():
        slot.uploaded, slot.drawn = _Event(renderer, waits), _Event(renderer, waits)
    renderer._ready = _Event(renderer, waits)
    renderer.close()
    assert waits == [2] * 5, "every range's upload and draw, and the last draw, waited for while the ranges lived"
    assert renderer._slots == {} and renderer._ready is None
    renderer.close()
    assert len(waits) == 5, "closing twice waits for nothing more"


def test_one_warp_stream_per_torch_stream_handle_for_the_process(monkeypatch):
    """Warp unregisters a raw handle when any wrapper of it is collected: the renderers share one
    wrapper per handle, which no renderer owns."""
    import types

    import warp

    from vlmrm_fast.runtime import warp as warp_rendering

    made: list[object] = []

    def stream_from_torch(stream):
        made.append(types.SimpleNamespace(cuda_stream=stream.cuda_stream))
        return made[-1]

    monkeypatch.setattr(warp, "stream_from_torch", stream_from_torch)
    monkeypatch.setattr(warp_rendering, "_WARP_STREAMS", {})
    device = torch.device("cuda", 0)
    first = types.SimpleNamespace(cuda_stream=0x1234, device=device)
    recycled = types.SimpleNamespace(cuda_stream=0x1234, device=device)  # a new torch Stream on a pooled handle
    other = types.SimpleNamespace(cuda_stream=0x5678, device=device)
    wrapper = warp_rendering.warp_stream_of(first)
    assert warp_rendering.warp_stream_of(recycled) is wrapper
    assert warp_rendering.warp_stream_of(other) is not wrapper
    assert (
        warp_rendering.warp_stream_of(types.SimpleNamespace(cuda_stream=0x1234, device=torch.device("cuda", 1)))
        is not wrapper
    )
    assert len(made) == 3


def test_drawing_allocates_no_contact_or_constraint_rows(scene):
    from vlmrm_fast.rendering.warp import WarpRenderer

    with WarpRenderer(scene, 3, 16, 16, camera="front", device="cpu") as renderer:
        renderer.render(np.tile(scene.qpos0, (3, 1)))
        assert renderer._slots  # (one per part of the envs drawn at once on the CPU's threads)
        for slot in renderer._slots.values():
            assert slot.data.naconmax == 0 and slot.data.njmax == 0
            assert slot.data.contact.dist.shape[0] == 0 and slot.data.efc.J.size == 0


def test_the_warp_kernel_cache_stays_where_warp_puts_it(scene, monkeypatch, tmp_path):
    """The package never moves Warp's kernel cache: WARP_CACHE_PATH, else Warp's own default."""
    import warp

    from vlmrm_fast.rendering.warp import WarpRenderer

    before = warp.config.kernel_cache_dir
    with WarpRenderer(scene, 1, 16, 16, camera="front", device="cpu") as renderer:
        renderer.render(scene.qpos0[None])
    assert warp.config.kernel_cache_dir == before
    assert any(pathlib.Path(before).glob("*")), "the kernels went into Warp's cache"


def _busy(stream: torch.cuda.Stream, seconds: float) -> None:
    """Keeps ``stream`` busy for at least about ``seconds``: a kernel spinning 2e9 clock cycles per
    second, an H100's boost clock (longer at a lower clock)."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(seconds * 2e9))


@pytest.mark.gpu
def test_cuda_draws_on_torchs_default_stream_capture_and_replay(humanoid_model):
    """Defect 1: without a stream, render, render_sim and draw run on torch's current stream, the
    legacy default stream, where CUDA cannot capture: the graph is captured on the renderer's own
    stream and replayed on the caller's."""
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 3
    qpos = poses(humanoid_model, n)
    assert torch.cuda.current_stream().cuda_stream == 0, "torch's current stream is the legacy default stream"
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = qpos[::-1]
    with WarpRenderer(humanoid_model, n, 32, 32, camera=CAMERA, device="cuda") as renderer:
        eager = renderer.render(qpos)  # the first draw: eager, then captured
        replayed = renderer.render(qpos)
        np.testing.assert_array_equal(replayed, eager)
        assert all(slot.graph is not None for slot in renderer._slots.values())
        np.testing.assert_array_equal(renderer.render_sim(sim), eager[::-1])
        renderer.draw(sim, slice(1, 3))
        renderer.draw(sim, slice(1, 3))
        np.testing.assert_array_equal(renderer.frames()[1:], eager[::-1][1:])
    sim.close()


@pytest.mark.gpu
def test_simulator_env_steps_with_the_warp_renderer_without_the_reward_wrapper():
    """Defect 1, through SimulatorVecEnv.step_wait and get_images (no stream given)."""
    from vlmrm_fast.envs import get_task
    from vlmrm_fast.stack.simulator_env import SimulatorVecEnv

    task = get_task("humanoid-kneeling")
    env = SimulatorVecEnv(task.vector_task, 4, render_size=(32, 32), episode_length=5, device="cuda:0", renderer="warp")
    try:
        env.seed(0)
        env.reset()
        for _ in range(3):
            env.step(np.zeros((4, env.action_space.shape[0]), np.float32))
        images = env.get_images()
        assert len(images) == 4 and images[0].shape == (32, 32, 3) and images[0].any()
        np.testing.assert_array_equal(np.stack(images), env.last_frames())
    finally:
        env.close()


@pytest.mark.gpu
def test_a_draw_on_a_side_stream_does_not_wait_for_the_legacy_stream(humanoid_model):
    """Defect 2: a replayed draw on a side stream completes while the legacy stream is still busy
    (the encoder's stream, in the pipelined step)."""
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 4
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = poses(humanoid_model, n)
    side = torch.cuda.Stream()
    with WarpRenderer(humanoid_model, n, 32, 32, camera=CAMERA, device="cuda") as renderer:
        for _ in range(2):  # eager + capture, then a replay
            renderer.draw(sim, stream=side)
        side.synchronize()
        _busy(torch.cuda.current_stream(), 2.0)
        legacy_done = torch.cuda.Event()
        legacy_done.record()
        renderer.draw(sim, stream=side)
        drawn = renderer._ready
        deadline = time.monotonic() + 1.5
        while not drawn.query() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert drawn.query(), "the draw waited for the legacy stream"
        assert not legacy_done.query()
        torch.cuda.synchronize()
    sim.close()


@pytest.mark.gpu
def test_a_collected_renderer_leaves_the_stream_of_a_live_one_usable(humanoid_model):
    """Defect 3: two renderers on one torch stream; the first collected, the second still captures,
    replays, and Warp still knows the stream's handle (a capture on it works)."""
    import gc

    import warp as wp

    from vlmrm_fast.rendering.warp import WarpRenderer, warp_stream_of

    n = 2
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = poses(humanoid_model, n)
    stream = torch.cuda.Stream()
    first = WarpRenderer(humanoid_model, n, 16, 16, camera=CAMERA, device="cuda")
    second = WarpRenderer(humanoid_model, n, 16, 16, camera=CAMERA, device="cuda")
    for renderer in (first, second):
        renderer.draw(sim, stream=stream)
    del first
    gc.collect()
    second.draw(sim, slice(0, 1), stream)  # a new range: eager, then a capture
    second.draw(sim, slice(0, 1), stream)
    second.draw(sim, stream=stream)
    stream.synchronize()
    target = wp.zeros(1, dtype=wp.float32, device=str(second.device))
    with (
        wp.ScopedStream(warp_stream_of(stream), sync_enter=False),
        wp.ScopedCapture(stream=warp_stream_of(stream)) as capture,
    ):
        target.fill_(1.0)
    wp.capture_launch(capture.graph, stream=warp_stream_of(stream))
    stream.synchronize()
    assert target.numpy()[0] == 1.0
    second.close()
    sim.close()


@pytest.mark.gpu
def test_overlapping_ranges_do_not_overwrite_an_upload_in_flight(humanoid_model):
    """Defect 5: range (0, 2) uploads state B behind a busy stream; the whole batch then stages
    state A at once. The range's frames are B's."""
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 4
    a, b = BatchSimulator(humanoid_model, n), BatchSimulator(humanoid_model, n)
    a.qpos[:] = poses(humanoid_model, n)
    b.qpos[:] = poses(humanoid_model, n)[::-1]
    stream = torch.cuda.Stream()
    with WarpRenderer(humanoid_model, n, 32, 32, camera=CAMERA, device="cuda") as renderer:
        expected_b = renderer.render_sim(b)[:2]
        for _ in range(2):  # every range captured before the race
            renderer.draw(b, slice(0, 2), stream)
            renderer.draw(a, stream=stream)
        stream.synchronize()
        _busy(stream, 0.5)
        renderer.draw(b, slice(0, 2), stream)  # its upload waits behind the busy stream
        with torch.cuda.stream(stream), renderer.lend(slice(0, 2), stream) as view:
            snapshot = view.owner.clone()
        renderer.draw(a, stream=stream)  # stages A's rows while B's upload is still queued
        stream.synchronize()
        np.testing.assert_array_equal(snapshot.cpu().numpy(), expected_b)
    a.close()
    b.close()


@pytest.mark.gpu
def test_close_returns_after_the_queued_draws_ran(humanoid_model):
    """Defect 6: closing right after a draw queued behind a busy stream frees nothing it still uses."""
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 2
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = poses(humanoid_model, n)
    stream = torch.cuda.Stream()
    renderer = WarpRenderer(humanoid_model, n, 16, 16, camera=CAMERA, device="cuda")
    renderer.draw(sim, stream=stream)
    renderer.draw(sim, stream=stream)
    _busy(stream, 0.5)
    renderer.draw(sim, stream=stream)
    drawn = renderer._ready
    assert not drawn.query()
    renderer.close()
    assert drawn.query(), "close() returned before the queued draw ran"
    sim.close()


@pytest.mark.gpu
def test_the_warp_kernel_cache_holds_the_gpu_modules(humanoid_model):
    """Defect 8: the CUDA modules land in Warp's kernel cache (WARP_CACHE_PATH, else Warp's
    default), where the next process on this machine finds them."""
    import os

    import warp

    from vlmrm_fast.rendering.warp import WarpRenderer

    with WarpRenderer(humanoid_model, 1, 16, 16, camera=CAMERA, device="cuda") as renderer:
        renderer.render(humanoid_model.qpos0[None])
    cache = pathlib.Path(warp.config.kernel_cache_dir)
    if "WARP_CACHE_PATH" in os.environ:
        assert cache.parent == pathlib.Path(os.environ["WARP_CACHE_PATH"]).resolve()
    binaries = [p for p in cache.rglob("*") if p.suffix in (".cubin", ".ptx")]
    assert binaries, f"no CUDA module in {cache}"


@pytest.mark.gpu
def test_render_data_without_contact_rows_draws_the_full_data_frames(humanoid_model, monkeypatch):
    """Defect 9: drawing from Data without contact and constraint rows gives the frames of a full Data."""
    import mujoco_warp as mjw

    from vlmrm_fast.rendering import warp as warp_rendering
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 3
    qpos = poses(humanoid_model, n)
    with WarpRenderer(humanoid_model, n, 32, 32, camera=CAMERA, device="cuda") as renderer:
        lean = renderer.render(qpos)
        (slot,) = renderer._slots.values()
        assert slot.data.naconmax == 0
    monkeypatch.setattr(warp_rendering, "render_data_sizes", dict)  # mujoco_warp's default sizes
    with WarpRenderer(humanoid_model, n, 32, 32, camera=CAMERA, device="cuda") as renderer:
        full = renderer.render(qpos)
        (slot,) = renderer._slots.values()
        assert slot.data.naconmax == mjw.make_data(renderer._render_model, nworld=n).naconmax > 0
    np.testing.assert_array_equal(lean, full)


def test_cpu_threads_draw_the_same_frames(humanoid_model):
    """On Warp's CPU backend a draw's envs are split into parts drawn at once on threads (a kernel runs on one
    thread there): the frames are those of one thread drawing them all, bit for bit, whole and by range."""
    from vlmrm_fast.rendering.warp import WarpRenderer

    n = 5
    sim = BatchSimulator(humanoid_model, n)
    sim.qpos[:] = poses(humanoid_model, n)
    frames = {}
    for threads in (1, 3):
        with WarpRenderer(humanoid_model, n, 24, 24, camera=CAMERA, device="cpu", cpu_threads=threads) as renderer:
            renderer.draw(sim)  # the first draw loads Warp's modules, one part after another
            renderer.draw(sim)  # then the parts at once
            whole = renderer.frames()
            renderer.draw(sim, slice(1, 5))
            frames[threads] = (whole, renderer.frames())
            if threads > 1:
                assert len({slot.rows.start for slot in renderer._slots.values()}) >= 3
    np.testing.assert_array_equal(frames[3][0], frames[1][0])
    np.testing.assert_array_equal(frames[3][1], frames[1][1])
