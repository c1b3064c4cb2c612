"""How closely two results must agree, stated once for the suite.

Exact (bit for bit): physics, observations, dones, infos, frames, the preprocessed pixels, and
anything computed twice the same way: the same batch layout run twice gives the same bits.

To float precision: rewards computed in different batch layouts (ranks, pipeline ranges, episode
batches, chunks, renderer ranges, the gym path against the simulator env). The encoder's matrix
products may round a row differently depending on how many rows the batch has: MKL does on AMD EPYC
(the rows of ``F.linear`` at batch 2 differ in the last bit from the same rows at batch 8), as cuBLAS
does on GPUs. A reward then moves by an ulp or a few, never by more than about 1e-6 relative.

A reward amplifies those differences by its formula's slope. A binary task's probability,
``softmax(scale * cosines)[0]``, moves by at most ``p (1 - p) <= 1/4`` times the change of the logits'
difference, ``2 * scale * REWARD_ATOL``: with CLIP's learned scale of 100 that is 50x the cosines'
tolerance (:func:`binary_probability_atol`).

:func:`rows_rounded_by_batch_size` is such a CPU on any machine: ``F.linear`` rounds each product by
a few ulps one way or the other depending on how many rows it has, as MKL does on an AMD EPYC. A test
comparing results across batch layouts runs under it (the fixture of the same name), so that its
tolerance is shown to hold on CPUs that round by batch size, not only on the one it was written on;
``VLMRM_TEST_OTHER_CPU=1`` runs every test of the suite under it.

The same picture drawn on two machines: frames of one renderer on a GPU and on the CPU (MuJoCo
Warp's kernels compiled by CUDA and by LLVM, or NVIDIA's OpenGL and Mesa's llvmpipe). The two
round differently: on an H100 against this CPU, 74.6% of the channel values of Warp's humanoid
frames differed by 1 and a few edge pixels by up to 125. The picture is the same, so the bound is
on the mean and on the share of large differences; a wrong picture (another pose, camera, env,
orientation or channel order) breaks both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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


def binary_probability_atol(logit_scale: float) -> float:
    """How far a binary task's probability ``softmax(logit_scale * cosines)[0]`` may move between batch layouts: its
    slope ``p (1 - p) <= 1/4`` times the most the logits' difference moves, ``2 * logit_scale * REWARD_ATOL``."""
    return 0.25 * 2 * logit_scale * REWARD_ATOL


def assert_criterion_rewards_close(actual, expected, criteria, logit_scale: float, err_msg: str = "") -> None:
    """(N, K) rewards of ``criteria`` (one column each) from two batch layouts, each column to its formula's
    tolerance: a binary criterion's probability to :func:`binary_probability_atol` of its scale (``1 / temperature``,
    else the model's ``logit_scale``), every other reward to the rewards' own (:func:`assert_rewards_close`)."""
    from vlmrm_fast.reward.kinds import BinaryCriterion

    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape == (actual.shape[0], len(criteria)), f"{err_msg}: shapes {actual.shape}"
    for k, criterion in enumerate(criteria):
        message = f"{err_msg} criterion {k} ({criterion.name})"
        if isinstance(criterion, BinaryCriterion) and criterion.probability:
            scale = logit_scale if criterion.temperature is None else 1 / criterion.temperature
            atol = binary_probability_atol(scale)
            np.testing.assert_allclose(actual[:, k], expected[:, k], rtol=0, atol=atol, err_msg=message)
        else:
            assert_rewards_close(actual[:, k], expected[:, k], err_msg=message)


#: How far :func:`rows_rounded_by_batch_size` moves a product: "an ulp or a few".
OTHER_CPU_ULPS = 3


@contextlib.contextmanager
def rows_rounded_by_batch_size(ulps: int = OTHER_CPU_ULPS) -> Iterator[None]:
    """Within it, every float32 ``F.linear`` (the encoders' matrix products) moves each value of its result by
    ``ulps`` ulps, up and down in turn over the output features, the direction flipped by the parity of the
    product's row count, as a BLAS that picks its kernels by batch size rounds: the same layout still rounds
    the same (bit for bit), and two layouts differ by the most a few ulps per value and layer can do."""
    import torch
    import torch.nn.functional as F

    linear = F.linear

    def rounded(input, weight, bias=None):
        out = linear(input, weight, bias)
        if out.dtype != torch.float32 or out.numel() == 0:
            return out
        rows = out.numel() // out.shape[-1]
        features = torch.arange(out.shape[-1], device=out.device)
        ways = ulps * (1 - 2 * ((features + rows) % 2)).to(torch.float32)  # +ulps, -ulps, ...; flipped by rows
        return out * (1.0 + ways * 2.0**-23)

    F.linear = rounded
    try:
        yield
    finally:
        F.linear = linear


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
