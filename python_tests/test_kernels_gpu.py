"""The CUDA kernels against their C++ twins (which test_kernels_cpu.py holds to
open_clip and the plain reward formulas).

Preprocess must match the twin bit for bit in every dtype and layout; rewards
agree within float32 summation-order tolerances. Outputs are poisoned with NaN
before each run so an element the kernel skips cannot pass.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from kernel_references import (
    DTYPES,
    GOAL_BASELINE_ATOL,
    MEAN,
    PROBABILITY_ATOL,
    STD,
    TaskTable,
    assert_rewards_match_twin,
    assert_same_bits,
    gl_atlas,
    gl_tiles_layout,
    normalized,
    random_frames,
    reward_table,
    strided_embeddings,
)

from vlmrm_fast import build_info
from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec
from vlmrm_fast.frames.views import FrameLayout, FrameView
from vlmrm_fast.reward.head import RewardHead
from vlmrm_fast.reward.kinds import BinaryCriterion, GoalBaselineCriterion
from vlmrm_fast.runtime import kernels
from vlmrm_fast.runtime.device import native_cuda_usable
from vlmrm_fast.runtime.kernels import kernel_dtype


def twin(spec: PreprocessSpec, frames: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return FramePreprocessor(spec, "cpu", dtype)(frames)


# (frames, height, width, model size, interpolation, resize mode): the common
# cases (480 and 224 px frames into 224), batches that pick every tile height,
# up- and downscaling, tall frames (vertical pass first on Pillow >= 13), and a
# large frame whose block needs more than 48 KiB of shared memory.
PREPROCESS_CASES = [
    (1, 224, 224, 224, "bicubic", "shortest"),
    (3, 480, 480, 224, "bicubic", "shortest"),
    (64, 480, 480, 224, "bicubic", "shortest"),
    (300, 64, 64, 32, "bicubic", "shortest"),
    (7, 33, 47, 32, "bilinear", "shortest"),
    (2, 20, 20, 32, "bicubic", "shortest"),
    (5, 64, 40, 32, "bicubic", "squash"),
    (4, 300, 90, 64, "bilinear", "squash"),
    (2, 1200, 1600, 224, "bicubic", "shortest"),
    # The paper's float bicubic: its humanoid and classic-control frame sizes, a batch, upscaling.
    (3, 480, 480, 224, "bicubic", "paper"),
    (2, 400, 600, 224, "bicubic", "paper"),
    (64, 120, 180, 64, "bicubic", "paper"),
    (2, 20, 20, 32, "bicubic", "paper"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", PREPROCESS_CASES, ids=lambda c: "{}x{}x{}->{}-{}-{}".format(*c))
@pytest.mark.parametrize("layout", ["stacked", "gl_rgb", "gl_rgba"])
def test_preprocess_cuda_matches_twin(case, layout):
    n, h, w, size, interpolation, resize_mode = case
    spec = PreprocessSpec(size=size, mean=MEAN, std=STD, interpolation=interpolation, resize_mode=resize_mode)
    frames = random_frames(n, h, w, seed=n + h + w)
    plan = FramePreprocessor(spec, "cpu").plan(h, w)
    device_plan = kernels.DevicePreprocessPlan(plan, torch.cuda.current_device())
    if layout == "stacked":
        buffer = torch.from_numpy(frames).cuda()
        frame_layout = FrameLayout.stacked(buffer)
    else:
        channels = 3 if layout == "gl_rgb" else 4
        tiles_per_row = max(1, min(n, 4096 // w))
        buffer = torch.from_numpy(gl_atlas(frames, tiles_per_row, channels)).cuda()
        frame_layout = gl_tiles_layout(n, h, w, tiles_per_row, channels)
    for dtype in DTYPES:
        out = torch.full((n, 3, size, size), float("nan"), dtype=dtype, device="cuda")
        kernels.preprocess_cuda(
            device_plan,
            *FramePreprocessor._layout_args(buffer.data_ptr(), frame_layout),
            out.data_ptr(),
            kernel_dtype(dtype),
            torch.cuda.current_stream().cuda_stream,
        )
        torch.cuda.synchronize()
        assert_same_bits(out, twin(spec, frames, dtype))


@pytest.mark.gpu
def test_preprocess_cuda_orders_on_the_given_stream():
    spec = PreprocessSpec(size=224, mean=MEAN, std=STD)
    frames = random_frames(16, 480, 480, seed=1)
    pre = FramePreprocessor(spec, "cuda", torch.float16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        buffer = torch.from_numpy(frames).cuda(non_blocking=False)
        out = torch.full((16, 3, 224, 224), float("nan"), dtype=torch.float16, device="cuda")
        pre(buffer, out=out)
        result = out.cpu()  # ordered after the kernel on this stream
    assert_same_bits(result, twin(spec, frames, torch.float16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_frame_preprocessor_on_cuda(dtype):
    spec = PreprocessSpec(size=224, mean=MEAN, std=STD)
    frames = random_frames(6, 480, 480, seed=2)
    pre = FramePreprocessor(spec, "cuda", dtype)
    assert pre._use_cuda_kernel
    assert_same_bits(pre(torch.from_numpy(frames).cuda()), twin(spec, frames, dtype))
    atlas = torch.from_numpy(gl_atlas(frames, 3, 4)).cuda()
    assert_same_bits(pre.run(FrameView.of(atlas, gl_tiles_layout(6, 480, 480, 3, 4))), twin(spec, frames, dtype))


@pytest.mark.gpu
def test_preprocess_cuda_rejects_bad_input():
    plan = FramePreprocessor(PreprocessSpec(size=32, mean=MEAN, std=STD), "cpu").plan(32, 32)
    device_plan = kernels.DevicePreprocessPlan(plan, torch.cuda.current_device())
    frames = torch.zeros((1, 32, 32, 3), dtype=torch.uint8)
    out = torch.zeros((1, 3, 32, 32), device="cuda")
    args = [device_plan, frames.data_ptr(), 1, 32, 32, 3, 96, 1, 0, 3072, out.data_ptr(), kernels.DType.float32, 0]
    with pytest.raises(ValueError, match="frames is ordinary host memory"):
        kernels.preprocess_cuda(*args)
    frames_cuda = frames.cuda()
    args[1] = frames_cuda.data_ptr()
    with pytest.raises(ValueError, match="plan was made for 32x32"):
        kernels.preprocess_cuda(*args[:3], 31, *args[4:])
    with pytest.raises(ValueError, match="out is a null pointer"):
        kernels.preprocess_cuda(*args[:10], 0, *args[11:])
    with pytest.raises(ValueError, match="dtype must be DType.float32"):
        kernels.preprocess_cuda(*args[:11], kernels.DType(5), 0)


@pytest.mark.gpu
def test_device_plans_free_their_memory():
    spec = PreprocessSpec(size=224, mean=MEAN, std=STD)
    plan = FramePreprocessor(spec, "cpu").plan(4000, 4000)  # ~73 taps per axis: ~130 KB of tables
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    plans = [kernels.DevicePreprocessPlan(plan, torch.cuda.current_device()) for _ in range(200)]
    free_during, _ = torch.cuda.mem_get_info()
    del plans
    gc.collect()
    free_after, _ = torch.cuda.mem_get_info()
    held = free_before - free_during
    assert held >= 10 * 2**20
    assert free_after >= free_during + 0.9 * held


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_kernels_run_on_the_plans_device_and_restore_the_current_one():
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD)
    frames = random_frames(3, 40, 40, seed=3)
    torch.cuda.set_device(0)
    pre = FramePreprocessor(spec, "cuda:1")
    got = pre(torch.from_numpy(frames).to("cuda:1"))
    assert torch.cuda.current_device() == 0
    assert_same_bits(got, twin(spec, frames, torch.float32))


# --------------------------------------------------------------------- reward


def cuda_keeping_strides(x: torch.Tensor) -> torch.Tensor:
    """x on the GPU with the same (padded) strides; .cuda() would compact it."""
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cuda").copy_(x)


def run_reward(embeddings: torch.Tensor, table: TaskTable) -> torch.Tensor:
    n, d = embeddings.shape
    text = table.text.to(embeddings.device)
    out = torch.full((n, len(table.tasks)), float("nan"), device=embeddings.device)
    args = (
        embeddings.data_ptr(),
        kernel_dtype(embeddings.dtype),
        n,
        d,
        embeddings.stride(0),
        text.data_ptr(),
        text.shape[0],
        table.tasks,
        out.data_ptr(),
    )
    if embeddings.is_cuda:
        kernels.reward_cuda(*args, embeddings.device.index, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
    else:
        kernels.reward_cpu(*args)
    return out.cpu()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d", [(1, 512), (37, 768), (1024, 1280), (5, 16)])
def test_reward_cuda_matches_twin(dtype, n, d):
    table, goal = reward_table(d, seed=n + d)
    x = strided_embeddings(n, d, dtype, seed=n * d)
    x[: n // 2] += (3.0 * goal).to(dtype)
    expected = run_reward(x, table)
    x_cuda = cuda_keeping_strides(x)
    assert x_cuda.stride(0) == d + 5
    assert_rewards_match_twin(run_reward(x_cuda, table), expected)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_reward_head_on_cuda(dtype):
    d = 64
    gen = torch.Generator().manual_seed(0)
    prompts = ["a humanoid robot kneeling", "a humanoid robot", "a robot standing", "a robot lying down", "a cat"]
    table = {p: normalized(torch.randn(d, generator=gen)) for p in prompts}
    tasks = [
        GoalBaselineCriterion(target_prompts=prompts[:1], baseline_prompts=prompts[1:2], alpha=0.5),
        GoalBaselineCriterion(target_prompts=prompts[2:4]),
        BinaryCriterion(goal_prompt=prompts[0], negative_prompts=prompts[2:], probability=True),
    ]
    head_cpu = RewardHead(tasks, table.__getitem__, logit_scale=100.0, device="cpu")
    head_cuda = RewardHead(tasks, table.__getitem__, logit_scale=100.0, device="cuda")
    assert head_cuda._use_cuda_kernel
    x = torch.randn(50, d, generator=gen).to(dtype)
    got = head_cuda(x.cuda()).cpu()
    expected = head_cpu(x)
    torch.testing.assert_close(got[:, :2], expected[:, :2], atol=GOAL_BASELINE_ATOL, rtol=0)
    torch.testing.assert_close(got[:, 2], expected[:, 2], atol=PROBABILITY_ATOL, rtol=0)


@pytest.mark.gpu
def test_reward_head_splits_more_tasks_than_one_launch_takes():
    d, k = 48, kernels.MAX_CUDA_REWARD_TASKS + 9
    gen = torch.Generator().manual_seed(1)
    prompts = [f"prompt {i}" for i in range(k + 1)]
    table = {p: normalized(torch.randn(d, generator=gen)) for p in prompts}
    tasks = [
        GoalBaselineCriterion(target_prompts=[prompts[i]], baseline_prompts=[prompts[-1]], alpha=(i % 5) / 4)
        for i in range(k)
    ]
    head_cpu = RewardHead(tasks, table.__getitem__, logit_scale=100.0, device="cpu")
    head_cuda = RewardHead(tasks, table.__getitem__, logit_scale=100.0, device="cuda")
    x = torch.randn(20, d, generator=gen)
    got = head_cuda(x.cuda()).cpu()
    assert got.shape == (20, k)
    torch.testing.assert_close(got, head_cpu(x), atol=GOAL_BASELINE_ATOL, rtol=0)


@pytest.mark.gpu
def test_reward_cuda_rejects_host_memory_and_too_many_tasks():
    table, _ = reward_table(32, seed=0)
    x = torch.randn(4, 32)
    text = table.text.cuda()
    out = torch.zeros((4, len(table.tasks)), device="cuda")
    with pytest.raises(ValueError, match="embeddings is ordinary host memory"):
        kernels.reward_cuda(
            x.data_ptr(),
            kernels.DType.float32,
            4,
            32,
            32,
            text.data_ptr(),
            text.shape[0],
            table.tasks,
            out.data_ptr(),
            0,
            0,
        )
    with pytest.raises(ValueError, match="at most 32 per call"):
        kernels.reward_cuda(
            x.cuda().data_ptr(),
            kernels.DType.float32,
            4,
            32,
            32,
            text.data_ptr(),
            text.shape[0],
            table.tasks * 6,
            out.data_ptr(),
            0,
            0,
        )


# ---------------------------------------------- without CUDA (runs everywhere)


@pytest.mark.skipif(native_cuda_usable(), reason="a CUDA device is usable here")
def test_cuda_entry_points_raise_clear_runtime_errors_without_cuda():
    plan = kernels.PreprocessPlan(32, 32, 32, kernels.ResizeMode.shortest, kernels.Filter.bicubic, MEAN, STD)
    expected = "built without CUDA" if not build_info()["cuda_compiled"] else "is not usable"
    with pytest.raises(RuntimeError, match=expected):
        kernels.DevicePreprocessPlan(plan, 0)
    table, _ = reward_table(8, seed=0)
    x, text, out = torch.randn(2, 8), table.text, torch.zeros(2, len(table.tasks))
    with pytest.raises(RuntimeError, match=expected):
        kernels.reward_cuda(
            x.data_ptr(),
            kernels.DType.float32,
            2,
            8,
            8,
            text.data_ptr(),
            text.shape[0],
            table.tasks,
            out.data_ptr(),
            0,
            0,
        )
