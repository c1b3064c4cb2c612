"""resize_mode="paper": the paper's code's preprocessing (torchvision Resize((S, S)) on float
tensors: PyTorch's bicubic without antialiasing, OpenAI's mean and std) against torchvision itself.

The C++ twin computes PyTorch's portable CPU arithmetic, so it matches torchvision bit for bit
where PyTorch runs that kernel (``ATEN_CPU_CAPABILITY=default``, checked in a child process).
PyTorch's AVX2 and AVX-512 kernels (and its CUDA kernel) contract products into fused
multiply-adds, the source position ``scale * (o + 0.5) - 0.5`` among them, which moves it by up
to an ulp (3e-5 at 480 px), so in this process (whatever the CPU dispatches) the twin agrees with
torchvision to within PAPER_ATOL.
The CUDA kernel against the twin is in test_kernels_emulated.py (emulated) and test_kernels_gpu.py.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import open_clip
import pytest
import torch
from child_process import run_python
from kernel_references import DTYPES, MEAN, STD, gl_atlas, gl_tiles_layout, random_frames

from vlmrm_fast.envs import get_task
from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec
from vlmrm_fast.frames.views import FrameView
from vlmrm_fast.runtime import kernels

# FMA contraction in PyTorch's vectorized kernels moves a source position by up to an ulp, and with it
# the weights: measured up to 2.2e-5 before normalization, 8.5e-5 after (std about 0.26), on random
# 480 px frames into 224 on AVX-512 (2026-11-24); rendered frames up to 2.7e-5.
PAPER_ATOL = 2e-4
SIZES = [(32, 32), (80, 80), (20, 20), (48, 64), (64, 40), (100, 37), (33, 47), (400, 600)]


def paper_spec(size: int = 32) -> PreprocessSpec:
    return PreprocessSpec(size=size, mean=MEAN, std=STD, resize_mode="paper")


@functools.cache
def rendered_frames() -> dict[str, np.ndarray]:
    """The paper's frame kinds: CartPole's and MountainCar's 400 x 600, the humanoid's 480 x 480 (EGL)."""
    frames = {}
    for task, action in (("cartpole", 1), ("mountain-car-textured", np.ones(1, np.float32))):
        env = get_task(task).make()
        env.reset(seed=0)
        shots = []
        for _ in range(2):
            env.step(action)
            shots.append(env.render())
        frames[task] = np.stack(shots)
        env.close()
    from vlmrm_fast.rendering.egl import egl_unavailable

    if egl_unavailable() is None:
        env = get_task("humanoid-kneeling").make(render_size=(480, 480))
        env.reset(seed=0)
        env.step(env.action_space.sample())
        frames["humanoid-kneeling"] = env.render()[None].copy()
        env.close()
    return frames


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_twin_agrees_with_torchvision_as_this_cpu_runs_it(size):
    spec = paper_spec()
    frames = random_frames(2, *size, seed=size[0] * 1000 + size[1])
    got = FramePreprocessor(spec, "cpu")(frames)
    expected = spec.paper_transform()(frames)
    torch.testing.assert_close(got, expected, atol=PAPER_ATOL, rtol=0)


@pytest.mark.parametrize("size", [32, 224])
def test_twin_agrees_with_torchvision_on_rendered_frames(size):
    spec = paper_spec(size)
    for task, frames in rendered_frames().items():
        got = FramePreprocessor(spec, "cpu")(frames)
        torch.testing.assert_close(got, spec.paper_transform()(frames), atol=PAPER_ATOL, rtol=0, msg=task)


def test_twin_is_torchvision_to_the_bit_on_pytorchs_portable_kernel(tmp_path):
    """In a child process with ATEN_CPU_CAPABILITY=default: random frames of every size, and rendered
    frames of the paper's tasks, into 32 and 224 px, are the same bits as torchvision's."""
    cases = {f"random-{h}x{w}": random_frames(2, h, w, seed=h + w) for h, w in SIZES}
    cases.update({f"rendered-{task}": frames for task, frames in rendered_frames().items()})
    np.savez(tmp_path / "frames.npz", **cases)
    script = f"""
import json, numpy as np, torch
from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec
assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
result = {{}}
for name, frames in np.load({str(tmp_path / "frames.npz")!r}).items():
    for size in (32, 224):
        spec = PreprocessSpec(size=size, mean={MEAN!r}, std={STD!r}, resize_mode="paper")
        got, expected = FramePreprocessor(spec, "cpu")(frames), spec.paper_transform()(frames)
        result[f"{{name}}->{{size}}"] = int((got.view(torch.int32) != expected.view(torch.int32)).sum())
print(json.dumps(result))
"""
    child = run_python(["-c", script], env={"ATEN_CPU_CAPABILITY": "default"})
    assert child.returncode == 0, child.stderr
    differing = json.loads(child.stdout.strip().splitlines()[-1])
    assert len(differing) == 2 * len(cases)
    assert differing == dict.fromkeys(differing, 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_outputs_equal_cast_fp32(dtype):
    """fp16 out of the kernel is what the paper's autocast gave its encoder: the float32 input rounded."""
    spec = paper_spec()
    frames = random_frames(3, 80, 60, seed=11)
    assert torch.equal(FramePreprocessor(spec, "cpu", dtype)(frames), FramePreprocessor(spec, "cpu")(frames).to(dtype))


@pytest.mark.parametrize("tiles_per_row,channels", [(2, 3), (3, 4)])
def test_gl_tile_atlas_equals_stacked(tiles_per_row, channels):
    spec = paper_spec()
    frames = random_frames(5, 40, 54, seed=3)
    pre = FramePreprocessor(spec, "cpu")
    layout = gl_tiles_layout(5, 40, 54, tiles_per_row, channels)
    atlas = torch.from_numpy(gl_atlas(frames, tiles_per_row, channels))
    assert torch.equal(pre.run(FrameView.of(atlas, layout)), pre(frames))


def test_no_rounding_or_clamping_between_the_passes():
    """Bicubic overshoot survives: a sharp edge gives values past the [0, 1] range before normalizing,
    which Pillow's uint8 passes would have clipped."""
    frame = np.zeros((1, 64, 64, 3), np.uint8)
    frame[:, :, 32:] = 255
    spec = PreprocessSpec(size=48, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resize_mode="paper")
    got = FramePreprocessor(spec, "cpu")(frame)
    assert got.min() < 0.0 and got.max() > 1.0
    torch.testing.assert_close(got, spec.paper_transform()(frame), atol=PAPER_ATOL, rtol=0)


def test_plan_and_spec_refuse_other_filters():
    plan = kernels.PreprocessPlan(400, 600, 224, kernels.ResizeMode.paper, kernels.Filter.bicubic, MEAN, STD)
    assert plan.float_cubic and (plan.resized_height, plan.resized_width) == (224, 224)
    with pytest.raises(ValueError, match="the paper resize mode is bicubic"):
        kernels.PreprocessPlan(400, 600, 224, kernels.ResizeMode.paper, kernels.Filter.bilinear, MEAN, STD)
    with pytest.raises(ValueError, match="resize_mode 'paper' is bicubic"):
        PreprocessSpec(size=32, mean=MEAN, std=STD, interpolation="bilinear", resize_mode="paper")
    with pytest.raises(ValueError, match="its reference is paper_transform"):
        paper_spec().open_clip_transform()


def test_reward_model_takes_the_papers_preprocessing():
    """resize_mode="paper" on a reward model: bicubic, OpenAI's mean and std whatever the model's own
    (the paper's code used them for every model), and rewards from exactly the reference's pixels."""
    from vlmrm_fast import load_reward_model

    model = load_reward_model("vlmrm-tiny", target_prompts=["a pole"], device="cpu", resize_mode="paper")
    spec = model.preprocess_spec
    assert (spec.resize_mode, spec.interpolation) == ("paper", "bicubic")
    assert spec.mean == tuple(open_clip.OPENAI_DATASET_MEAN) and spec.std == tuple(open_clip.OPENAI_DATASET_STD)
    frames = rendered_frames()["cartpole"]
    pixels = model.preprocess(FrameView.of(torch.from_numpy(frames)))
    assert torch.equal(pixels, FramePreprocessor(spec, "cpu")(frames))
    torch.testing.assert_close(pixels, spec.paper_transform()(frames), atol=PAPER_ATOL, rtol=0)
    assert pixels.dtype in DTYPES
