"""References, inputs and comparisons shared by the kernel tests (test_kernels_cpu.py,
test_kernels_emulated.py, test_kernels_gpu.py, test_pipeline_gpu.py)."""

from __future__ import annotations

import numpy as np
import open_clip
import torch
from PIL import Image

from vlmrm_fast.frames.preprocess import PreprocessSpec
from vlmrm_fast.frames.views import FrameLayout
from vlmrm_fast.runtime import kernels

MEAN = tuple(open_clip.OPENAI_DATASET_MEAN)
STD = tuple(open_clip.OPENAI_DATASET_STD)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # every kernels.DType (a test checks)
BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}

# A kernel and the twin read the same rounded embeddings and differ only in
# float32 summation order: 2e-5 on goal-baseline rewards (in [-1, 1]) for every
# embedding precision, 2e-4 on probabilities at logit scale 100.
GOAL_BASELINE_ATOL = 2e-5
PROBABILITY_ATOL = 2e-4


def assert_same_bits(got: torch.Tensor, expected: torch.Tensor) -> None:
    got, expected = got.cpu(), expected.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    same = got.view(BITS[got.dtype]) == expected.view(BITS[expected.dtype])
    assert same.all(), f"{(~same).sum().item()} of {same.numel()} elements differ"


def random_frames(n: int, height: int, width: int, seed: int) -> np.ndarray:
    """Noise: the sharpest edges, so bicubic over- and undershoot hit the uint8 clipping."""
    return np.random.default_rng(seed).integers(0, 256, (n, height, width, 3), dtype=np.uint8)


def open_clip_reference(spec: PreprocessSpec, frames: np.ndarray) -> torch.Tensor:
    transform = spec.open_clip_transform()
    return torch.stack([transform(Image.fromarray(f)) for f in frames])


def gl_atlas(frames: np.ndarray, tiles_per_row: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """An OpenGL framebuffer: tiles left to right, bottom to top, each stored bottom row first."""
    n, h, w, _ = frames.shape
    rows = -(-n // tiles_per_row)
    rng = np.random.default_rng(seed)
    atlas = rng.integers(
        0, 256, (rows * h, tiles_per_row * w, channels), dtype=np.uint8
    )  # junk in unused tiles and alpha
    for i, frame in enumerate(frames):
        tile_row, tile_col = divmod(i, tiles_per_row)
        atlas[tile_row * h : (tile_row + 1) * h, tile_col * w : (tile_col + 1) * w, :3] = frame[::-1]
    return atlas


def gl_tiles_layout(num_frames: int, height: int, width: int, tiles_per_row: int, channels: int = 3) -> FrameLayout:
    """Where gl_atlas puts its frames: tiles left to right, bottom to top, rows bottom-up (the kernels'
    most general layout: several frames per framebuffer row and a negative row stride)."""
    fb_row = tiles_per_row * width * channels
    return FrameLayout(
        num_frames,
        height,
        width,
        pixel_stride=channels,
        row_stride=-fb_row,
        frames_per_row=tiles_per_row,
        frame_col_stride=width * channels,
        frame_row_stride=height * fb_row,
        offset=(height - 1) * fb_row,
    )


def normalized(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def plain_goal_baseline(x, target, baseline, alpha):
    """1 - 0.5 |P (x - g)|^2 with P = alpha u u^T + (1 - alpha) I, in float64, O(D^2)."""
    x = normalized(x.double())
    g = target.double().mean(dim=0)
    b = baseline.double().mean(dim=0)
    u = (g - b) / (g - b).norm()
    projection = alpha * torch.outer(u, u) + (1 - alpha) * torch.eye(x.shape[1], dtype=torch.float64)
    v = (x - g) @ projection.T
    return 1 - 0.5 * (v * v).sum(dim=-1)


def plain_binary_probability(x, goal, negatives, scale):
    logits = scale * normalized(x.double()) @ torch.cat([goal[None], negatives]).double().T
    return torch.softmax(logits, dim=-1)[:, 0]


class TaskTable:
    """Text rows and task entries, built the way RewardHead builds them."""

    def __init__(self):
        self.rows: list[torch.Tensor] = []
        self.tasks: list = []

    def goal_baseline(self, target, baseline, alpha):
        g = target.double().mean(dim=0)
        d = g - baseline.double().mean(dim=0)
        u = d / d.norm()
        task = kernels.RewardTask()
        task.kind = kernels.RewardKind.goal_baseline
        task.first_row, task.num_rows = len(self.rows), 2
        task.alpha = alpha
        g32, u32 = g.float(), u.float()
        task.g_norm2, task.g_dot_u = float(g32 @ g32), float(g32 @ u32)
        self.rows += [g32, u32]
        self.tasks.append(task)

    def binary(self, goal, negatives, scale, threshold=0.5, probability=False):
        task = kernels.RewardTask()
        task.kind = kernels.RewardKind.binary
        task.first_row, task.num_rows = len(self.rows), 1 + len(negatives)
        task.scale, task.threshold, task.probability = scale, threshold, probability
        self.rows += [goal.float()] + [n.float() for n in negatives]
        self.tasks.append(task)

    @property
    def text(self) -> torch.Tensor:
        return torch.stack(self.rows).contiguous()


def strided_embeddings(n: int, d: int, dtype: torch.dtype, seed: int, pad: int = 5) -> torch.Tensor:
    """(n, d) raw embeddings, rows d + pad apart (a column slice of a wider buffer)."""
    gen = torch.Generator().manual_seed(seed)
    wide = torch.randn(n, d + pad, generator=gen).to(dtype)
    return wide[:, :d]


def reward_table(d: int, seed: int) -> tuple[TaskTable, torch.Tensor]:
    """Three goal-baseline tasks (alpha 0, 0.5, 1), then binary ones: probability and
    thresholded at logit scale 100, probability at 10. Returns the table and the goal."""
    gen = torch.Generator().manual_seed(seed)
    table = TaskTable()
    for alpha in (0.0, 0.5, 1.0):
        table.goal_baseline(
            normalized(torch.randn(3, d, generator=gen)), normalized(torch.randn(2, d, generator=gen)), alpha
        )
    goal, negatives = normalized(torch.randn(d, generator=gen)), normalized(torch.randn(4, d, generator=gen))
    table.binary(goal, negatives, 100.0, probability=True)
    table.binary(goal, negatives, 100.0, threshold=0.5)
    table.binary(goal, negatives, 10.0, probability=True)
    return table, goal


def assert_rewards_match_twin(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Rewards of reward_table's tasks from a kernel against the twin's."""
    torch.testing.assert_close(got[:, :3], expected[:, :3], atol=GOAL_BASELINE_ATOL, rtol=0)
    torch.testing.assert_close(got[:, 3], expected[:, 3], atol=PROBABILITY_ATOL, rtol=0)
    torch.testing.assert_close(got[:, 5], expected[:, 5], atol=PROBABILITY_ATOL, rtol=0)
    clear = (expected[:, 3] - 0.5).abs() > 1e-3  # thresholds of probabilities near 0.5 may flip
    assert torch.equal(got[clear, 4], expected[clear, 4])
