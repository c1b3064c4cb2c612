"""The CUDA kernels' device code, executed on the CPU, against the C++ twins.

``vlmrm_fast._cuda_emulation`` compiles cuda/*_kernel.cuh as host C++ and runs
every CUDA thread as a fiber (csrc/emulation/cuda_on_host.h); the launch is
planned by the same code as on a GPU, for a device described by its
multiprocessor count and shared memory per block. This is not a GPU run (no
warp scheduling, memory model or real hardware limits), but it executes the
kernels' indexing, shared-memory use and barriers on every CI machine, with
reads checked against the input buffers. test_kernels_gpu.py repeats the
comparison on real hardware.

Preprocess must match the twin bit for bit; rewards within the float32
summation-order tolerances of the GPU tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_references import (
    DTYPES,
    GOAL_BASELINE_ATOL,
    MEAN,
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

from vlmrm_fast import _cuda_emulation
from vlmrm_fast.frames.preprocess import FramePreprocessor
from vlmrm_fast.frames.views import FrameLayout
from vlmrm_fast.runtime import kernels
from vlmrm_fast.runtime.kernels import kernel_dtype

# (multiprocessors, shared memory per block with opt-in)
H100 = (132, 227 * 1024)
TURING = (40, 64 * 1024)
ONE_SM = (1, 48 * 1024)


def make_plan(h, w, size, mode="shortest", interpolation="bicubic", order="horizontal_first"):
    return kernels.PreprocessPlan(
        h,
        w,
        size,
        getattr(kernels.ResizeMode, mode),
        getattr(kernels.Filter, interpolation),
        list(MEAN),
        list(STD),
        getattr(kernels.PassOrder, order),
    )


def frame_buffer(frames: np.ndarray, layout: str) -> tuple[torch.Tensor, FrameLayout]:
    n, h, w, _ = frames.shape
    if layout == "stacked":
        buffer = torch.from_numpy(frames.copy())
        return buffer, FrameLayout.stacked(buffer)
    channels = 3 if layout == "gl_rgb" else 4
    tiles_per_row = max(1, min(n, 3))
    buffer = torch.from_numpy(gl_atlas(frames, tiles_per_row, channels))
    return buffer, gl_tiles_layout(n, h, w, tiles_per_row, channels)


def twin(plan, buffer, layout, dtype):
    out = torch.empty((layout.num_frames, 3, plan.out_size, plan.out_size), dtype=dtype)
    kernels.preprocess_cpu(
        plan, *FramePreprocessor._layout_args(buffer.data_ptr(), layout), out.data_ptr(), kernel_dtype(dtype)
    )
    return out


def emulated(plan, buffer, layout, dtype, device=H100, order="forward", seed=0, buffer_bytes=None):
    out = torch.full((layout.num_frames, 3, plan.out_size, plan.out_size), float("nan"), dtype=dtype)
    launch = _cuda_emulation.preprocess(
        plan,
        *FramePreprocessor._layout_args(buffer.data_ptr(), layout),
        buffer.data_ptr(),
        buffer.numel() if buffer_bytes is None else buffer_bytes,
        out.data_ptr(),
        kernel_dtype(dtype),
        *device,
        order=order,
        seed=seed,
    )
    return out, launch


# (frames, height, width, size, resize mode, interpolation, Pillow pass order, device)
PREPROCESS_CASES = [
    (1, 224, 224, 224, "shortest", "bicubic", "horizontal_first", H100),
    (2, 480, 480, 224, "shortest", "bicubic", "horizontal_first", H100),
    (2, 480, 480, 224, "shortest", "bicubic", "pillow13", TURING),
    (9, 64, 64, 32, "shortest", "bicubic", "pillow13", ONE_SM),
    (3, 33, 47, 32, "shortest", "bilinear", "horizontal_first", H100),
    (2, 20, 20, 32, "shortest", "bicubic", "horizontal_first", TURING),
    (3, 64, 40, 32, "squash", "bicubic", "pillow13", H100),
    (2, 300, 90, 64, "squash", "bilinear", "pillow13", ONE_SM),  # vertical pass first
    (2, 300, 90, 64, "squash", "bilinear", "horizontal_first", ONE_SM),
    (1, 1200, 1600, 224, "shortest", "bicubic", "horizontal_first", H100),  # > 48 KiB of shared memory
    (1, 33, 33, 32, "squash", "bicubic", "horizontal_first", H100),  # taps read to the buffer's unaligned last byte
    # The paper's float bicubic (cubic_preprocess_kernel): down, up, wide, odd, one multiprocessor.
    (2, 120, 180, 64, "paper", "bicubic", "horizontal_first", H100),
    (2, 20, 20, 32, "paper", "bicubic", "horizontal_first", TURING),
    (3, 33, 47, 32, "paper", "bicubic", "horizontal_first", ONE_SM),
]


@pytest.mark.parametrize("case", PREPROCESS_CASES, ids=lambda c: "{}x{}x{}->{}-{}-{}-{}".format(*c[:7]))
@pytest.mark.parametrize("layout", ["stacked", "gl_rgb", "gl_rgba"])
def test_emulated_preprocess_matches_twin(case, layout):
    n, h, w, size, mode, interpolation, order, device = case
    plan = make_plan(h, w, size, mode, interpolation, order)
    buffer, frame_layout = frame_buffer(random_frames(n, h, w, seed=n + h + w), layout)
    for dtype in DTYPES:
        got, launch = emulated(plan, buffer, frame_layout, dtype, device)
        assert_same_bits(got, twin(plan, buffer, frame_layout, dtype))
    assert launch["vertical_first"] == plan.vertical_first
    assert launch["float_cubic"] == (mode == "paper")


def test_paper_mode_480_to_224_matches_twin():
    """The humanoid's frame size in the paper, on the GPU layout the EGL renderer lends (RGBA, bottom-up)."""
    plan = make_plan(480, 480, 224, "paper")
    buffer, layout = frame_buffer(random_frames(1, 480, 480, seed=9), "gl_rgba")
    got, launch = emulated(plan, buffer, layout, torch.float16, H100)
    assert launch["float_cubic"] and launch["shared_bytes"] == 1024
    assert_same_bits(got, twin(plan, buffer, layout, torch.float16))


def test_both_pass_orders_are_exercised():
    assert make_plan(300, 90, 64, "squash", "bilinear", "pillow13").vertical_first
    assert not make_plan(300, 90, 64, "squash", "bilinear", "horizontal_first").vertical_first


@pytest.mark.parametrize("order", ["horizontal_first", "pillow13"])
def test_every_tile_height_matches_twin(order):
    """Fewer multiprocessors -> taller tiles: 1 to kMaxPreprocessTileRows output rows per block."""
    plan = make_plan(300, 90, 48, "squash", "bicubic", order)
    buffer, layout = frame_buffer(random_frames(2, 300, 90, seed=5), "gl_rgba")
    expected = twin(plan, buffer, layout, torch.bfloat16)
    seen = set()
    for multiprocessors in (1, 3, 6, 12, 24, 48):
        got, launch = emulated(plan, buffer, layout, torch.bfloat16, (multiprocessors, 227 * 1024))
        assert_same_bits(got, expected)
        seen.add(launch["tile_rows"])
    assert seen == {1, 2, 4, 8, 16}


@pytest.mark.parametrize("thread_order", ["reverse", "shuffled"])
def test_result_does_not_depend_on_thread_order(thread_order):
    """A missing barrier between a shared-memory write and its read shows up here."""
    for mode, order in (("squash", "horizontal_first"), ("squash", "pillow13"), ("paper", "horizontal_first")):
        plan = make_plan(300, 90, 64, mode, "bicubic", order)
        buffer, layout = frame_buffer(random_frames(2, 300, 90, seed=6), "stacked")
        expected = twin(plan, buffer, layout, torch.float32)
        for seed in (0, 1):
            got, _ = emulated(plan, buffer, layout, torch.float32, ONE_SM, order=thread_order, seed=seed)
            assert_same_bits(got, expected)


def test_small_shared_memory_stages_fewer_rows_then_shortens_tiles():
    plan = make_plan(480, 480, 224)
    buffer, layout = frame_buffer(random_frames(1, 480, 480, seed=7), "gl_rgba")
    expected = twin(plan, buffer, layout, torch.float16)
    _, roomy = emulated(plan, buffer, layout, torch.float16, (1, 227 * 1024))
    assert (roomy["tile_rows"], roomy["stage_rows"]) == (16, 8)
    limit = roomy["shared_bytes"] - 1
    got, tight = emulated(plan, buffer, layout, torch.float16, (1, limit))
    assert tight["stage_rows"] < 8 and tight["shared_bytes"] <= limit
    assert_same_bits(got, expected)
    got, tiny = emulated(plan, buffer, layout, torch.float16, (1, 16 * 1024))
    assert tiny["tile_rows"] < 16 and tiny["shared_bytes"] <= 16 * 1024
    assert_same_bits(got, expected)
    with pytest.raises(ValueError, match="too large for one block's shared memory"):
        emulated(plan, buffer, layout, torch.float16, (1, 4 * 1024))


def test_reads_outside_the_frames_are_reported():
    plan = make_plan(64, 64, 32)
    buffer, layout = frame_buffer(random_frames(2, 64, 64, seed=8), "stacked")
    with pytest.raises(RuntimeError, match="outside every buffer"):
        emulated(plan, buffer, layout, torch.float32, buffer_bytes=buffer.numel() - 64 * 3)


def test_launch_planning_rejects_frames_of_another_size():
    plan = make_plan(64, 64, 32)
    buffer, layout = frame_buffer(random_frames(1, 64, 48, seed=9), "stacked")
    with pytest.raises(ValueError, match="plan was made for 64x64"):
        emulated(plan, buffer, layout, torch.float32)


# ---------------------------------------------------------------- frame copy


@pytest.mark.parametrize("channels", [3, 4])
def test_emulated_frame_copy_turns_the_atlas_upright(channels):
    frames = random_frames(5, 17, 23, seed=10)
    buffer, layout = frame_buffer(frames, "gl_rgb" if channels == 3 else "gl_rgba")
    out = np.zeros_like(frames)
    _cuda_emulation.copy_frames_rgb(
        *FramePreprocessor._layout_args(buffer.data_ptr(), layout),
        buffer.data_ptr(),
        buffer.numel(),
        out.ctypes.data,
        "reverse",
    )
    np.testing.assert_array_equal(out, frames)


# -------------------------------------------------------------------- reward


def run_reward(x: torch.Tensor, table: TaskTable, emulate: bool, order: str = "forward") -> torch.Tensor:
    n, d = x.shape
    text = table.text
    out = torch.full((n, len(table.tasks)), float("nan"))
    args = (x.data_ptr(), kernel_dtype(x.dtype), n, d, x.stride(0))
    if emulate:
        storage_bytes = x.untyped_storage().nbytes() - x.storage_offset() * x.element_size()
        _cuda_emulation.reward(*args, storage_bytes, text.data_ptr(), text.shape[0], table.tasks, out.data_ptr(), order)
    else:
        kernels.reward_cpu(*args, text.data_ptr(), text.shape[0], table.tasks, out.data_ptr())
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d", [(1, 512), (7, 768), (2, 1280), (5, 16)])
def test_emulated_reward_matches_twin(dtype, n, d):
    table, goal = reward_table(d, seed=n + d)
    x = strided_embeddings(n, d, dtype, seed=n * d)
    x[: (n + 1) // 2] += (3.0 * goal).to(dtype)
    expected = run_reward(x, table, emulate=False)
    assert_rewards_match_twin(run_reward(x, table, emulate=True, order="shuffled"), expected)


def test_emulated_reward_takes_a_full_task_table():
    d, k = 40, kernels.MAX_CUDA_REWARD_TASKS
    gen = torch.Generator().manual_seed(2)
    table = TaskTable()
    for i in range(k):
        table.goal_baseline(
            normalized(torch.randn(1, d, generator=gen)), normalized(torch.randn(1, d, generator=gen)), (i % 5) / 4
        )
    x = torch.randn(3, d, generator=gen)
    torch.testing.assert_close(
        run_reward(x, table, True, "reverse"), run_reward(x, table, False), atol=GOAL_BASELINE_ATOL, rtol=0
    )
    table.goal_baseline(normalized(torch.randn(1, d, generator=gen)), normalized(torch.randn(1, d, generator=gen)), 0.5)
    with pytest.raises(ValueError, match="one launch takes 1 to 32"):
        run_reward(x, table, True)


# ------------------------------------------------------ the emulation itself


@pytest.mark.parametrize(
    "kernel,message",
    [
        ("divergent_barrier", "every thread must reach each barrier"),
        ("shared_write_in_front", "wrote in front of its dynamic shared memory"),
        ("partial_shuffle", "partial mask"),
    ],
)
def test_emulation_reports_what_cuda_leaves_undefined(kernel, message):
    with pytest.raises(RuntimeError, match=message):
        _cuda_emulation.self_test(kernel, "forward")


def test_emulation_reports_a_fault_as_an_error():
    with pytest.raises(RuntimeError, match="past the end of shared memory"):
        _cuda_emulation.self_test("shared_overrun", "forward")


def test_emulation_exposes_a_missing_barrier():
    """Each thread reads its neighbour's shared-memory write with no barrier between:
    right in one thread order, wrong in the other."""
    forward = _cuda_emulation.self_test("missing_barrier", "forward")
    reverse = _cuda_emulation.self_test("missing_barrier", "reverse")
    assert forward != reverse
    assert _cuda_emulation.self_test("with_barrier", "forward") == _cuda_emulation.self_test("with_barrier", "reverse")
