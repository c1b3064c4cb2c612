"""The GPU hand-offs end to end: the renderer's pixel buffer lent to the CUDA preprocess through
GL interop (whole and range by range), the reward model scoring it in place, and FastVLMRewardVecEnv on CUDA against the same env on
the CPU. Each GPU result is held to a host twin reading the same frames.
"""

from __future__ import annotations

import os

import gymnasium
import mujoco
import numpy as np
import pytest
import torch
from kernel_references import MEAN, STD, assert_same_bits
from tolerances import assert_same_picture

from vlmrm_fast import EGLRenderer, FastVLMRewardVecEnv, build_info, load_reward_model
from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec
from vlmrm_fast.physics.batch import BatchSimulator

pytestmark = pytest.mark.gpu

HUMANOID_XML = os.path.join(os.path.dirname(gymnasium.__file__), "envs/mujoco/assets/humanoid.xml")
TINY = "vlmrm-tiny"
# bf16 encoder on the GPU against fp32 on the CPU: 1e-3 measured (tiny model, humanoid frames).
CROSS_DEVICE_ATOL = 4e-3


@pytest.fixture(scope="module")
def humanoid() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(HUMANOID_XML)


def poses(model: mujoco.MjModel, n: int, seed: int) -> np.ndarray:
    qpos = np.tile(model.qpos0, (n, 1))
    qpos[:, 7:] += np.random.default_rng(seed).uniform(-0.5, 0.5, (n, model.nq - 7))
    return qpos


def gpu_renderer(model: mujoco.MjModel, n: int, height: int, width: int) -> EGLRenderer:
    renderer = EGLRenderer(model, n, height, width, camera="track")
    if renderer.cuda_device is None:
        renderer.close()
        pytest.fail(f"the renderer is not on a CUDA GPU's EGL device: {build_info()['egl_devices']}")
    return renderer


def preprocess_lent(pre: FramePreprocessor, renderer: EGLRenderer) -> torch.Tensor:
    """The preprocess of the renderer's frames lent in place: mapped into CUDA on the current
    stream for a GPU preprocessor, into host memory for a CPU one."""
    stream = torch.cuda.current_stream() if pre.device.type == "cuda" else None
    with renderer.lend(stream=stream) as view:
        assert view.device.type == pre.device.type
        return pre.run(view)


@pytest.mark.egl
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_lent_frames_on_cuda_preprocess_as_the_host_twin(humanoid, dtype):
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD)
    with gpu_renderer(humanoid, 3, 48, 64) as renderer:  # not square: a swapped height and width shows
        renderer.render(poses(humanoid, 3, seed=0))
        host = preprocess_lent(FramePreprocessor(spec, "cpu", dtype), renderer)
        device = torch.device("cuda", renderer.cuda_device)
        got = preprocess_lent(FramePreprocessor(spec, device, dtype), renderer)
        assert got.device == device
        assert_same_bits(got, host)
        assert_same_bits(got, FramePreprocessor(spec, "cpu", dtype)(renderer.frames()))


@pytest.mark.egl
def test_preprocess_reads_the_frames_before_the_next_render_overwrites_them(humanoid):
    """cudaGraphicsUnmapResources on the stream must hold back GL's next write into the pixel buffer."""
    spec = PreprocessSpec(size=64, mean=MEAN, std=STD)
    host = FramePreprocessor(spec, "cpu")
    first, second = poses(humanoid, 4, seed=1), poses(humanoid, 4, seed=2)
    with gpu_renderer(humanoid, 4, 96, 96) as renderer:
        pre = FramePreprocessor(spec, torch.device("cuda", renderer.cuda_device))
        renderer.render(first)
        expected_first = preprocess_lent(host, renderer)
        renderer.render(second)
        expected_second = preprocess_lent(host, renderer)
        assert not torch.equal(expected_first, expected_second)
        renderer.render(first)
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time ahead of the kernel on this stream
        got_first = preprocess_lent(pre, renderer)
        renderer.render(second)  # GL must wait for the kernel above before it writes
        got_second = preprocess_lent(pre, renderer)
        torch.cuda.synchronize()
    assert_same_bits(got_first, expected_first)
    assert_same_bits(got_second, expected_second)


@pytest.mark.egl
def test_lent_ranges_on_cuda_preprocess_as_the_host_twin(humanoid):
    """Frames drawn and lent range by range (the pipelined step) read the right slots."""
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD)
    sim = BatchSimulator(humanoid, 5)
    sim.qpos[:] = poses(humanoid, 5, seed=7)
    with gpu_renderer(humanoid, 5, 48, 48) as renderer:
        pre = FramePreprocessor(spec, torch.device("cuda", renderer.cuda_device))
        stream = torch.cuda.Stream(renderer.cuda_device)
        parts = []
        for rows in (slice(0, 2), slice(2, 5)):
            renderer.draw(sim, rows, stream)
            with torch.cuda.stream(stream), renderer.lend(rows, stream) as view:
                assert view.num_frames == rows.stop - rows.start
                parts.append(pre.run(view))
        stream.synchronize()
        renderer.draw(sim)
        expected = FramePreprocessor(spec, "cpu")(renderer.frames())
    assert_same_bits(torch.cat(parts), expected)


def _gpu_ms(fn, reps: int = 30) -> float:
    """Median milliseconds of ``fn`` on the current stream (CUDA events), after a warm-up."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


@pytest.mark.egl
def test_host_reads_leave_the_pixel_buffer_where_kernels_read_it_fast(humanoid):
    """Host reads go through CUDA into page-locked memory, so the pixel buffer
    stays in video memory: the preprocess kernel reads it as fast after host reads as before."""
    n = 64
    sim = BatchSimulator(humanoid, n)
    sim.qpos[:] = poses(humanoid, n, seed=11)
    spec = PreprocessSpec(size=224, mean=MEAN, std=STD)
    with gpu_renderer(humanoid, n, 224, 224) as renderer:
        assert renderer.host_reads_through_cuda
        pre = FramePreprocessor(spec, torch.device("cuda", renderer.cuda_device), torch.bfloat16)
        renderer.draw(sim)  # no host read yet: the pixel buffer as GL placed it
        before = _gpu_ms(lambda: preprocess_lent(pre, renderer))
        frames = renderer.frames()  # host reads: copy_frames, lend_host
        with renderer.lend() as view:
            host_twin = FramePreprocessor(spec, "cpu", torch.bfloat16).run(view)
        after = _gpu_ms(lambda: preprocess_lent(pre, renderer))
        assert_same_bits(preprocess_lent(pre, renderer), host_twin)
        np.testing.assert_array_equal(frames, renderer.frames("cuda").cpu().numpy())
    sim.close()
    assert after < 1.5 * before, (
        f"the kernel reads the pixel buffer in {after:.3f} ms after a host read, {before:.3f} before"
    )


@pytest.mark.egl
def test_copy_frames_cuda_refuses_host_memory(humanoid):
    with gpu_renderer(humanoid, 1, 16, 16) as renderer:
        renderer.render(poses(humanoid, 1, seed=3))
        host = np.zeros((1, 16, 16, 3), np.uint8)
        with pytest.raises(ValueError, match="out is ordinary host memory"):
            renderer._native_live().copy_frames_cuda(host.ctypes.data, 0)
        np.testing.assert_array_equal(renderer.frames("cuda").cpu().numpy(), renderer.frames())


def _encoder_options(backend: str) -> dict:
    return {"compile_mode": "default", "progress": False} if backend == "compile" else {}


@pytest.mark.egl
@pytest.mark.parametrize("backend", ["torch", "compile"])
def test_scoring_lent_frames_on_cuda_equals_scoring_the_host_frames(humanoid, backend):
    n = 5
    rm = load_reward_model(
        TINY,
        target_prompts="a humanoid robot kneeling",
        baseline_prompts="a humanoid robot",
        alpha=0.5,
        device="cuda",
        backend=backend,
        batch_size=n,
        **_encoder_options(backend),
    )
    assert rm.encoder.backend == backend
    with gpu_renderer(humanoid, n, 48, 64) as renderer:
        for seed in (4, 5):
            renderer.render(poses(humanoid, n, seed=seed))
            with renderer.lend(stream=torch.cuda.current_stream()) as view:
                got = rm.score_pixels(rm.preprocess(view))
            assert got.shape == (n,) and got.device.type == "cuda"
            # The same frames read back to the host, uploaded and preprocessed as a stack: same encoder input.
            torch.testing.assert_close(got.cpu(), rm(renderer.frames()).cpu(), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "task, renderer, backend",
    [
        pytest.param("humanoid-kneeling", "egl", "compile", marks=pytest.mark.egl),
        pytest.param("humanoid-kneeling", "egl", "torch", marks=pytest.mark.egl),
        pytest.param("humanoid-kneeling", "warp", "compile", marks=pytest.mark.warp),
        ("cartpole", "auto", "compile"),
    ],
)
def test_vec_env_on_cuda_matches_the_same_env_on_cpu(task, renderer, backend):
    """The same physics bit for bit, the same picture (one renderer, drawn on the GPU and on the CPU,
    to the stated tolerance of tolerances.assert_same_picture), and each side's rewards exactly
    what its own model gives its own frames; the two models agree to bf16 on the same frames."""
    n = 3
    common = dict(model=TINY, alpha=0.5, seed=0, episode_length=5)
    if task.startswith("humanoid"):
        common.update(render_size=(48, 64), renderer=renderer)
    gpu = FastVLMRewardVecEnv(task, n, device="cuda", backend=backend, **_encoder_options(backend), **common)
    cpu = FastVLMRewardVecEnv(task, n, device="cpu", **common)
    assert gpu.reward_model.encoder.backend == backend and gpu.physics == cpu.physics
    assert gpu.renderer == cpu.renderer
    if gpu.physics == "batch":
        assert gpu.venv.frame_source.cuda_device == gpu.reward_model.device.index
    np.testing.assert_array_equal(gpu.reset(), cpu.reset())
    rng = np.random.default_rng(0)
    for _ in range(8):  # episodes of 5 steps: the auto-resets are crossed
        space = gpu.action_space
        if isinstance(space, gymnasium.spaces.Discrete):
            actions = rng.integers(0, space.n, size=n)
        else:
            actions = rng.uniform(space.low, space.high, (n,) + space.shape).astype(space.dtype)
        obs_g, rew_g, done_g, info_g = gpu.step(actions)
        obs_c, rew_c, done_c, info_c = cpu.step(actions)
        np.testing.assert_array_equal(obs_g, obs_c)
        np.testing.assert_array_equal(done_g, done_c)
        assert [i["gt_reward"] for i in info_g] == [i["gt_reward"] for i in info_c]
        frames_g, frames_c = gpu.last_frames(), cpu.last_frames()
        if gpu.physics == "batch":  # one renderer on two machines: the same picture, rounded apart
            assert_same_picture(frames_g.cpu().numpy(), frames_c.numpy(), err_msg=f"{renderer} frames")
        else:  # gymnasium's own drawing on the host, on both
            np.testing.assert_array_equal(frames_g.cpu().numpy(), frames_c.numpy())
        assert rew_g.dtype == np.float32 and rew_g.shape == (n,)
        # Exactly what each side's model gives its own frames (on the simulator env the GPU's are a CUDA
        # tensor, as episode-batch scoring takes them, and once more read back to the host).
        np.testing.assert_allclose(rew_g, gpu.reward_model(frames_g).cpu().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(rew_g, gpu.reward_model(frames_g.cpu()).cpu().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(rew_c, cpu.reward_model(frames_c).numpy(), rtol=0, atol=1e-6)
        # The bf16 GPU model against the fp32 CPU model on the same frames.
        np.testing.assert_allclose(rew_g, cpu.reward_model(frames_g.cpu()).numpy(), rtol=0, atol=CROSS_DEVICE_ATOL)
    gpu.close()
    cpu.close()
