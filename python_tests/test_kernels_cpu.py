"""The C++ twins of the fused kernels against their references.

Preprocess: open_clip's own PIL transform, to the bit. Reward: the formulas of
design.md section 2 written plainly here (the O(D^2) projection, a plain softmax).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_references import (
    DTYPES,
    MEAN,
    STD,
    TaskTable,
    gl_atlas,
    gl_tiles_layout,
    normalized,
    open_clip_reference,
    plain_binary_probability,
    plain_goal_baseline,
    random_frames,
    strided_embeddings,
)

from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec, pillow_pass_order
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.runtime import kernels
from vlmrm_fast.runtime.kernels import kernel_dtype

# ----------------------------------------------------------------- preprocess

# Frame sizes against a 32 px model: equal, larger, smaller, wide, tall, odd.
SIZES = [(32, 32), (80, 80), (20, 20), (48, 64), (64, 40), (100, 37), (33, 47)]


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
@pytest.mark.parametrize("resize_mode", ["shortest", "squash"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_twin_matches_open_clip(interpolation, resize_mode, size):
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD, interpolation=interpolation, resize_mode=resize_mode)
    frames = random_frames(2, *size, seed=size[0] * 1000 + size[1])
    got = FramePreprocessor(spec, "cpu")(frames)
    assert torch.equal(got, open_clip_reference(spec, frames))


def test_twin_matches_open_clip_480_to_224():
    spec = PreprocessSpec(size=224, mean=MEAN, std=STD)
    frames = random_frames(1, 480, 480, seed=7)
    assert torch.equal(FramePreprocessor(spec, "cpu")(frames), open_clip_reference(spec, frames))


# Around the size where Pillow 13 switches to resampling vertically first: the
# height must shrink by more than twice as many pixels as the width.
@pytest.mark.parametrize("size", [(64, 47), (64, 48), (96, 63), (96, 64), (20, 50), (50, 20)], ids=str)
def test_twin_follows_pillows_pass_order(size):
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD, resize_mode="squash")
    frames = random_frames(2, *size, seed=size[0] + size[1])
    assert torch.equal(FramePreprocessor(spec, "cpu")(frames), open_clip_reference(spec, frames))


def test_pass_order_rule():
    def vertical_first(h, w, order):
        return kernels.PreprocessPlan(
            h, w, 32, kernels.ResizeMode.squash, kernels.Filter.bicubic, MEAN, STD, order
        ).vertical_first

    pillow13 = kernels.PassOrder.pillow13
    assert vertical_first(64, 47, pillow13) and not vertical_first(64, 48, pillow13)
    assert not vertical_first(20, 50, pillow13)  # height grows
    assert vertical_first(50, 20, pillow13)  # height shrinks, width grows
    assert not vertical_first(64, 33, kernels.PassOrder.horizontal_first)
    assert pillow_pass_order() in (pillow13, kernels.PassOrder.horizontal_first)


@pytest.mark.parametrize(
    "size,resize_mode,tiles_per_row,channels",
    [
        ((48, 40), "shortest", 2, 3),
        ((64, 40), "squash", 3, 4),
        ((32, 32), "shortest", 4, 3),
        ((21, 27), "squash", 5, 4),
    ],
    ids=str,
)
def test_gl_tile_atlas_equals_stacked(size, resize_mode, tiles_per_row, channels):
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD, resize_mode=resize_mode)
    n = 7  # the last tile row is partly empty
    frames = random_frames(n, *size, seed=3)
    atlas = gl_atlas(frames, tiles_per_row, channels)
    pre = FramePreprocessor(spec, "cpu")
    layout = gl_tiles_layout(n, size[0], size[1], tiles_per_row, channels)
    assert torch.equal(pre.run(FrameView.of(torch.from_numpy(atlas), layout)), pre(frames))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("size", [(32, 32), (80, 60), (64, 40)], ids=str)
def test_half_outputs_equal_cast_fp32(dtype, size):
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD, resize_mode="squash")
    frames = random_frames(3, *size, seed=11)
    fp32 = FramePreprocessor(spec, "cpu")(frames)
    half = FramePreprocessor(spec, "cpu", dtype)(frames)
    assert half.dtype == dtype
    assert torch.equal(half, fp32.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["stacked", "gl"])
def test_every_output_element_written(dtype, layout):
    spec = PreprocessSpec(size=32, mean=MEAN, std=STD)
    frames = random_frames(5, 45, 37, seed=5)
    pre = FramePreprocessor(spec, "cpu", dtype)
    out = torch.full((5, 3, 32, 32), float("nan"), dtype=dtype)
    if layout == "stacked":
        pre(frames, out=out)
    else:
        pre.run(FrameView.of(torch.from_numpy(gl_atlas(frames, 2)), gl_tiles_layout(5, 45, 37, 2)), out=out)
    assert torch.isfinite(out).all()


def test_kernel_dtype_maps_every_dtype_and_refuses_the_others():
    assert {kernel_dtype(dtype) for dtype in DTYPES} == set(kernels.DType.__members__.values())
    with pytest.raises(TypeError, match="torch.float64 is not supported; use float32, float16 or bfloat16"):
        kernel_dtype(torch.float64)


def _plan(h=32, w=32):
    return kernels.PreprocessPlan(h, w, 32, kernels.ResizeMode.shortest, kernels.Filter.bicubic, MEAN, STD)


def test_preprocess_binding_rejects_bad_input():
    frames = np.zeros((1, 32, 32, 3), np.uint8)
    out = np.zeros((1, 3, 32, 32), np.float32)
    good = dict(
        plan=_plan(),
        frames=frames.ctypes.data,
        num_frames=1,
        height=32,
        width=32,
        pixel_stride=3,
        row_stride=96,
        frames_per_row=1,
        frame_col_stride=0,
        frame_row_stride=3072,
        out=out.ctypes.data,
        dtype=kernels.DType.float32,
    )
    kernels.preprocess_cpu(**good)
    for change, message in [
        (dict(frames=0), "frames is a null pointer"),
        (dict(out=0), "out is a null pointer"),
        (dict(dtype=kernels.DType(3)), "dtype must be DType.float32"),
        (dict(num_frames=0), "num_frames must be positive"),
        (dict(pixel_stride=2), "pixel_stride"),
        (dict(frames_per_row=0), "frames_per_row must be positive"),
        (dict(height=31), "plan was made for 32x32"),
    ]:
        with pytest.raises(ValueError, match=message):
            kernels.preprocess_cpu(**{**good, **change})
    with pytest.raises(TypeError, match="incompatible function arguments"):
        kernels.preprocess_cpu(**{**good, "dtype": 0})  # a DType, not its code
    with pytest.raises(ValueError, match="mean and std need 3 values"):
        kernels.PreprocessPlan(32, 32, 32, kernels.ResizeMode.shortest, kernels.Filter.bicubic, [0.5], [0.5])
    with pytest.raises(ValueError, match="std must be positive"):
        kernels.PreprocessPlan(32, 32, 32, kernels.ResizeMode.shortest, kernels.Filter.bicubic, MEAN, [1.0, 0.0, 1.0])


# --------------------------------------------------------------------- reward


def run_reward_cpu(embeddings: torch.Tensor, table: TaskTable) -> torch.Tensor:
    """embeddings (N, D) with unit stride along D; any row stride."""
    n, d = embeddings.shape
    text = table.text
    out = torch.full((n, len(table.tasks)), float("nan"))
    kernels.reward_cpu(
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
    return out


# Both read the same rounded embeddings, so every precision gets the float32
# summation-order tolerance.
REWARD_ATOL = 2e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,d", [(1, 16), (7, 512), (64, 1024)])
def test_goal_baseline_twin_matches_plain_formula(dtype, n, d):
    gen = torch.Generator().manual_seed(n * d)
    table = TaskTable()
    specs = []
    for k, alpha in enumerate([0.0, 0.25, 0.5, 1.0]):
        target = normalized(torch.randn(1 + k, d, generator=gen))
        baseline = normalized(torch.randn(2, d, generator=gen))
        table.goal_baseline(target, baseline, alpha)
        specs.append((target, baseline, alpha))
    x = strided_embeddings(n, d, dtype, seed=n + d)
    assert x.stride(0) != d
    got = run_reward_cpu(x, table)
    for k, (target, baseline, alpha) in enumerate(specs):
        expected = plain_goal_baseline(x, target, baseline, alpha).float()
        torch.testing.assert_close(got[:, k], expected, atol=REWARD_ATOL, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_binary_twin_matches_plain_softmax(dtype, scale):
    n, d = 256, 512
    gen = torch.Generator().manual_seed(int(scale))
    goal = normalized(torch.randn(d, generator=gen))
    negatives = normalized(torch.randn(3, d, generator=gen))
    x = strided_embeddings(n, d, dtype, seed=int(scale) + 1)
    # Pull half the frames towards the goal so both sides of the threshold occur.
    x[: n // 2] += (3.0 * goal).to(dtype)
    table = TaskTable()
    table.binary(goal, negatives, scale, probability=True)
    for threshold in (0.5, 0.2):
        table.binary(goal, negatives, scale, threshold=threshold)
    got = run_reward_cpu(x, table)
    p = plain_binary_probability(x, goal, negatives, scale)
    torch.testing.assert_close(got[:, 0], p.float(), atol=REWARD_ATOL * max(1.0, scale / 10), rtol=0)
    for column, threshold in ((1, 0.5), (2, 0.2)):
        clear = (p - threshold).abs() > 1e-3
        assert clear.sum() > n // 2
        assert torch.equal(got[clear, column], (p[clear] > threshold).float())
        assert set(got[:, column].tolist()) <= {0.0, 1.0}


def test_mixed_task_table():
    n, d = 9, 64
    gen = torch.Generator().manual_seed(4)
    target, baseline = normalized(torch.randn(2, d, generator=gen)), normalized(torch.randn(3, d, generator=gen))
    goal, negatives = normalized(torch.randn(d, generator=gen)), normalized(torch.randn(5, d, generator=gen))
    table = TaskTable()
    table.binary(goal, negatives, 50.0, probability=True)
    table.goal_baseline(target, baseline, 0.7)
    x = strided_embeddings(n, d, torch.float32, seed=6)
    got = run_reward_cpu(x, table)
    torch.testing.assert_close(got[:, 0], plain_binary_probability(x, goal, negatives, 50.0).float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(
        got[:, 1], plain_goal_baseline(x, target, baseline, 0.7).float(), atol=REWARD_ATOL, rtol=0
    )


def _reward_args(fn_name: str):
    emb = np.ones((2, 4), np.float32)
    text = np.ones((2, 4), np.float32)
    out = np.zeros((2, 1), np.float32)
    task = kernels.RewardTask()
    task.kind, task.first_row, task.num_rows = kernels.RewardKind.goal_baseline, 0, 2
    args = dict(
        embeddings=emb.ctypes.data,
        dtype=kernels.DType.float32,
        n=2,
        d=4,
        row_stride=4,
        text=text.ctypes.data,
        m=2,
        tasks=[task],
        out=out.ctypes.data,
    )
    if fn_name == "reward_cuda":
        args.update(device=0, stream=0)
    return args, (emb, text, out)


def _task(**fields):
    task = kernels.RewardTask()
    task.kind, task.first_row, task.num_rows = kernels.RewardKind.goal_baseline, 0, 2
    for name, value in fields.items():
        setattr(task, name, value)
    return task


@pytest.mark.parametrize("fn_name", ["reward_cpu", "reward_cuda"])
def test_reward_binding_rejects_bad_input(fn_name):
    fn = getattr(kernels, fn_name)
    good, _keep = _reward_args(fn_name)
    if fn_name == "reward_cpu":
        fn(**good)
    binary = _task(kind=kernels.RewardKind.binary, num_rows=65)
    for change, message in [
        (dict(embeddings=0), "embeddings is a null pointer"),
        (dict(text=0), "text is a null pointer"),
        (dict(out=0), "out is a null pointer"),
        (dict(dtype=kernels.DType(3)), "dtype must be DType.float32"),
        (dict(n=0), "n must be positive"),
        (dict(row_stride=3), "row_stride must be >= d"),
        (dict(tasks=[]), "at least one reward task"),
        (dict(tasks=[_task(first_row=1)]), "outside the text matrix"),
        (dict(tasks=[_task(num_rows=1)]), "goal-baseline needs 2 rows"),
        (dict(tasks=[_task(alpha=1.5)]), r"alpha must be in \[0, 1\]"),
        (dict(tasks=[binary], m=65), "at most 63 negative prompts"),
        (dict(tasks=[_task(scale=float("inf"), kind=kernels.RewardKind.binary)]), "scale must be finite"),
    ]:
        with pytest.raises(ValueError, match=message):
            fn(**{**good, **change})
    with pytest.raises(TypeError, match="incompatible function arguments"):
        fn(**{**good, "dtype": 0})  # a DType, not its code
    if fn_name == "reward_cuda":
        with pytest.raises(ValueError, match="at most 32 per call"):
            fn(**{**good, "tasks": [_task()] * 33})
        with pytest.raises(ValueError, match="device must be"):
            fn(**{**good, "device": -1})
