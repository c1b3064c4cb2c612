"""How closely two results must agree, stated once for the suite.

Exact (bit for bit): physics, observations, dones, infos, frames, the preprocessed pixels, and
anything computed twice the same way: the same batch layout run twice gives the same bits.

To float precision: rewards computed in different batch layouts (ranks, pipeline ranges, episode
batches, chunks, renderer ranges, the gym path against the batch env). The encoder's matrix
products may round a row differently depending on how many rows the batch has: MKL does on AMD EPYC
(the rows of ``F.linear`` at batch 2 differ in the last bit from the same rows at batch 8), as cuBLAS
does on GPUs. A reward then moves by an ulp or a few, never by more than about 1e-6 relative.

The same picture drawn on two machines: frames of one renderer on a GPU and on the CPU (MuJoCo
Warp's kernels compiled by CUDA and by LLVM, or NVIDIA's OpenGL and Mesa's llvmpipe). The two
round differently: on an H100 against this CPU, 74.6% of the channel values of Warp's humanoid
frames differed by 1 and a few edge pixels by up to 125. The picture is the same, so the bound is
on the mean and on the share of large differences; a wrong picture (another pose, camera, env,
orientation or channel order) breaks both.
"""

from __future__ import annotations

import numpy as np

# float32 rewards of magnitude ~1 from cosine similarities: a few ulps (1.2e-7 each at 1.0).
REWARD_RTOL = 1e-6
REWARD_ATOL = 1e-6


def assert_rewards_close(actual, expected, err_msg: str = "") -> None:
    """Rewards (or anything computed from them) of two batch layouts: equal to float32 precision."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{err_msg}: shapes {actual.shape} and {expected.shape}"
    np.testing.assert_allclose(
        actual.astype(np.float64), expected.astype(np.float64), rtol=REWARD_RTOL, atol=REWARD_ATOL, err_msg=err_msg
    )


# The same picture from two machines (see the module docstring), in grey levels of uint8 frames.
PICTURE_MEAN_ABS_DIFF = 2.0  # per frame: rounding moves most values by 0 or 1
PICTURE_LARGE_DIFF = 32  # a channel value this far off is an edge pixel that fell the other way
PICTURE_LARGE_SHARE = 0.02  # per frame: edges are a few percent of a 48x64 humanoid frame at most


def assert_same_picture(actual, expected, err_msg: str = "") -> None:
    """uint8 frames (N, H, W, 3) of the same scene drawn by one renderer on two machines."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{err_msg}: shapes {actual.shape} and {expected.shape}"
    assert actual.dtype == expected.dtype == np.uint8, f"{err_msg}: dtypes {actual.dtype} and {expected.dtype}"
    diff = np.abs(actual.astype(np.int16) - expected.astype(np.int16)).reshape(len(actual), -1)
    mean = diff.mean(axis=1)
    large = (diff > PICTURE_LARGE_DIFF).mean(axis=1)
    assert (mean <= PICTURE_MEAN_ABS_DIFF).all(), (
        f"{err_msg}: mean absolute difference per frame {np.round(mean, 2).tolist()} > {PICTURE_MEAN_ABS_DIFF}"
    )
    assert (large <= PICTURE_LARGE_SHARE).all(), (
        f"{err_msg}: share of channel values off by > {PICTURE_LARGE_DIFF}: {np.round(large, 4).tolist()} "
        f"> {PICTURE_LARGE_SHARE}"
    )
