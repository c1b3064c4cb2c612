"""The stated tolerances of tolerances.py hold what they claim: the same picture rounded apart on two
machines passes, a wrong picture fails."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from tolerances import OTHER_CPU_ULPS, assert_same_picture, rows_rounded_by_batch_size

from vlmrm_fast.envs import humanoid


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    """Humanoid frames of the tasks' scene at the GPU test's size: poses 0..3 bend further each."""
    model = humanoid.humanoid_model(humanoid.DEFAULT_SCENE, 64)
    data = mujoco.MjData(model)
    out = []
    with mujoco.Renderer(model, 48, 64) as renderer:
        for bend in (0.0, 0.15, 0.3, 0.45):
            data.qpos[:] = model.qpos0
            data.qpos[7:] += bend
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera=humanoid.SCENES[humanoid.DEFAULT_SCENE].camera)
            out.append(renderer.render())
    return np.stack(out)


def rounded_apart(frames: np.ndarray, seed: int = 0) -> np.ndarray:
    """What another machine's rounding did on the H100: 75% of the values off by 1, and edge pixels
    (1% of the values) off by up to 125."""
    rng = np.random.default_rng(seed)
    moved = frames.astype(np.int16) + rng.choice([-1, 1], frames.shape) * (rng.random(frames.shape) < 0.75)
    edges = rng.random(frames.shape) < 0.01
    moved[edges] += rng.integers(-125, 126, int(edges.sum()))
    return np.clip(moved, 0, 255).astype(np.uint8)


def test_the_same_picture_rounded_apart_passes(frames):
    assert_same_picture(rounded_apart(frames), frames)
    assert_same_picture(frames, frames)


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda f: np.roll(f, 1, axis=0), id="another pose"),
        pytest.param(lambda f: f[:, ::-1], id="upside down"),
        pytest.param(lambda f: f[..., ::-1], id="BGR"),
        pytest.param(lambda f: np.roll(f, 3, axis=2), id="shifted 3 px"),
        pytest.param(lambda f: np.zeros_like(f), id="black"),
    ],
)
def test_a_wrong_picture_fails(frames, wrong):
    with pytest.raises(AssertionError, match="mean absolute difference|share of channel values"):
        assert_same_picture(np.ascontiguousarray(wrong(frames)), frames)


def test_another_cpus_rounding_keeps_a_layout_and_moves_another():
    """rows_rounded_by_batch_size: the same product rounds the same; the same rows in a batch of another size move by
    the few ulps it claims, each value up or down."""
    import torch
    import torch.nn.functional as F

    x, w = torch.randn(8, 32, generator=torch.Generator().manual_seed(0)), torch.randn(16, 32)
    plain = F.linear(x, w)
    with rows_rounded_by_batch_size():
        eight, again, three = F.linear(x, w), F.linear(x, w), F.linear(x[:3], w)
    assert torch.equal(eight, again)
    moved = (eight[:3] - three).abs()
    scale = x[:3].abs() @ w.abs().T  # the size of the products' terms, whose ulps a BLAS's rounding moves
    assert moved.max() > 0 and (moved <= (2 * OTHER_CPU_ULPS + 2) * 2.0**-23 * scale).all()
    assert F.linear is not None and torch.equal(F.linear(x, w), plain)  # put back on leaving
