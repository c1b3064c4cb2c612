"""How closely two results must agree, stated once for the suite.

Exact (bit for bit): physics, observations, dones, infos, frames, the preprocessed pixels, and
anything computed twice the same way: the same batch layout run twice gives the same bits.

To float precision: rewards computed in different batch layouts (ranks, pipeline ranges, episode
batches, chunks, renderer ranges, the gym path against the batch engine). The encoder's matrix
products may round a row differently depending on how many rows the batch has: MKL does on AMD EPYC
(the rows of ``F.linear`` at batch 2 differ in the last bit from the same rows at batch 8), as cuBLAS
does on GPUs. A reward then moves by an ulp or a few, never by more than about 1e-6 relative.
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
