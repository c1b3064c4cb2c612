"""Scoring frames of many steps in large batches (episode-batch rewards for off-policy training).

:class:`FrameBatchScorer` takes each step's frames as they come, copies them into one staging
buffer on the reward model's device (the frames wait there, not in host memory), and scores the
buffer each time it holds ``batch_size`` frames: the batch size is the user's choice,
independent of the number of environments, and the encoder works while the simulations go on.
:meth:`FrameBatchScorer.finish` scores what is left and returns every reward, in order, with one
transfer to the host.

:func:`fill_batch_size` is the default batch size, "what fills the GPU": the smallest power of
two whose image-tower work is at least :data:`FILL_TARGET_TFLOP` (about 40 ms of an H100 at
800 TFLOP/s, so per-batch overheads and the batch's tail vanish), within half the free GPU memory
and at most :data:`MAX_FILL_BATCH`. For the paper's models at 224 px that is 4096 frames for
ViT-B-32, 256 for ViT-L-14, 64 for ViT-bigG-14. (The paper's code scores in chunks of 3,200 frames;
:func:`even_batch` splits a rollout into equal batches no larger than the limit, which for 6,400
frames and ViT-B-32 gives exactly that.) On a CPU the default is :data:`CPU_BATCH`.

A window model's rewards read several frames of one episode: it is scored as the envs step, never in
episode batches (its ``needs``, checked by the plan); offline, its ``score_frames`` scores the windows
inside whole episodes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from vlmrm_fast.checks import positive_int
from vlmrm_fast.reward.protocol import RewardModel

FILL_TARGET_TFLOP = 32.0
MAX_FILL_BATCH = 4096
MIN_FILL_BATCH = 16
CPU_BATCH = 256
_ACTIVATION_COPIES = 6  # activations of one image alive at once, in units of tokens x (width + MLP width)


def tower_shape(model: str) -> dict[str, int] | None:
    """width, layers, mlp width, tokens and image size of an open_clip ViT image tower, from its config
    (no weights loaded, no network); None for towers this cannot read (ResNets, uncached hub models)."""
    try:
        config = _model_config(model)
    except Exception:  # noqa: BLE001 - an unreadable name falls back to the default batch
        return None
    vision = (config or {}).get("vision_cfg") or {}
    if not isinstance(vision.get("layers"), int) or "width" not in vision or "patch_size" not in vision:
        return None
    size = vision.get("image_size", 224)
    size = size[0] if isinstance(size, (list, tuple)) else size
    width = int(vision["width"])
    return {
        "width": width,
        "layers": int(vision["layers"]),
        "mlp": int(width * vision.get("mlp_ratio", 4.0)),
        "tokens": (size // vision["patch_size"]) ** 2 + 1,
        "image_size": int(size),
    }


def _model_config(model: str) -> dict | None:
    import json
    import pathlib

    import open_clip

    from vlmrm_fast.models import cached_hf_file
    from vlmrm_fast.models.clip import parse_model_name, register_builtin_configs

    if model.startswith(("hf-hub:", "local-dir:")):  # open_clip would ask the hub; read what is on disk
        if model.startswith("local-dir:"):
            path = pathlib.Path(model[len("local-dir:") :]) / "open_clip_config.json"
        else:
            cached = cached_hf_file(model[len("hf-hub:") :], ("open_clip_config.json",), None)
            path = pathlib.Path(cached) if cached else None
        return json.loads(path.read_text()).get("model_cfg") if path is not None and path.is_file() else None
    register_builtin_configs()
    name, _ = parse_model_name(model, None)
    return open_clip.get_model_config(name)


def tower_gflops(shape: dict[str, int]) -> float:
    """FLOPs (a multiply-add counts 2) of one image through the transformer blocks, in GFLOP."""
    w, m, t, layers = shape["width"], shape["mlp"], shape["tokens"], shape["layers"]
    linear = 2 * t * (4 * w * w + 2 * w * m)  # QKV, out projection, the MLP's two layers
    attention = 2 * 2 * t * t * w  # q k^T and the weighted sum of v
    return layers * (linear + attention) / 1e9


def fill_batch_size(
    model: str, device: torch.device | str, *, frame_shape: tuple[int, int] | None = None, memory_fraction: float = 0.5
) -> int:
    """The default scoring batch for ``model`` on ``device`` (see the module docstring).

    ``frame_shape`` (height, width) of the rendered frames counts their staging memory too.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return CPU_BATCH
    shape = tower_shape(model)
    if shape is None:
        return CPU_BATCH
    batch = 2 ** math.ceil(math.log2(max(1.0, FILL_TARGET_TFLOP * 1e3 / tower_gflops(shape))))
    batch = min(max(batch, MIN_FILL_BATCH), MAX_FILL_BATCH)
    per_image = 2 * (
        _ACTIVATION_COPIES * shape["tokens"] * (shape["width"] + shape["mlp"]) + 3 * shape["image_size"] ** 2
    )
    if frame_shape is not None:
        per_image += 3 * frame_shape[0] * frame_shape[1]
    free, _ = torch.cuda.mem_get_info(device)
    fits = int(memory_fraction * free // per_image)
    while batch > MIN_FILL_BATCH and batch > fits:
        batch //= 2
    return batch


def even_batch(total: int, limit: int) -> int:
    """The largest batch <= ``limit`` that splits ``total`` frames into equal batches (the last one
    short by less than one frame per batch): 6,400 frames with limit 4,096 give 3,200."""
    if total < 1 or limit < 1:
        raise ValueError(f"total and limit must be positive, got {total} and {limit}")
    return math.ceil(total / math.ceil(total / limit))


class FrameBatchScorer:
    """Accumulates frames (uint8 (n, H, W, 3), any device) and scores them ``batch_size`` at a time
    with ``reward_model`` (a single-criterion :class:`~vlmrm_fast.reward.protocol.RewardModel` whose rewards are
    its frames' own: ``score_frames``)."""

    def __init__(self, reward_model: RewardModel, batch_size: int):
        batch_size = positive_int(batch_size, "batch_size")
        if reward_model.multi_criteria:
            raise ValueError("FrameBatchScorer needs a single-criterion reward model (rewards (N,))")
        self.reward_model = reward_model
        self.batch_size = int(batch_size)
        self.device = torch.device(reward_model.device)
        self._staging: torch.Tensor | None = None
        self._filled = 0
        self._rewards: list[torch.Tensor] = []
        self.batches_scored = 0

    @property
    def pending(self) -> int:
        """Frames added and not yet scored."""
        return self._filled

    def add(self, frames: torch.Tensor) -> None:
        """Copies ``frames`` into the staging buffer, scoring it whenever it fills up."""
        if not isinstance(frames, torch.Tensor):
            frames = torch.as_tensor(np.asarray(frames))
        if frames.dtype != torch.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"frames must be uint8 (n, H, W, 3), got {frames.dtype} {tuple(frames.shape)}")
        if self._staging is None:
            self._staging = torch.empty(
                (self.batch_size,) + tuple(frames.shape[1:]), dtype=torch.uint8, device=self.device
            )
        elif tuple(frames.shape[1:]) != tuple(self._staging.shape[1:]):
            raise ValueError(
                f"frames of shape {tuple(frames.shape[1:])} after frames of shape {tuple(self._staging.shape[1:])}"
            )
        # Same device: ordered on the stream, no wait. From the host: a blocking copy, since the
        # caller may refill its (pinned, reused) buffer as soon as this returns.
        asynchronous = frames.device == self._staging.device
        start = 0
        while start < frames.shape[0]:
            take = min(self.batch_size - self._filled, frames.shape[0] - start)
            self._staging[self._filled : self._filled + take].copy_(
                frames[start : start + take], non_blocking=asynchronous
            )
            self._filled += take
            start += take
            if self._filled == self.batch_size:
                self._score()

    def _score(self) -> None:
        if self._filled:
            # Stays on the device (no synchronization); the next add() reuses the buffer in stream order.
            self._rewards.append(self.reward_model.score_frames(self._staging[: self._filled])[:, 0])
            self.batches_scored += 1
            self._filled = 0

    def finish(self) -> np.ndarray:
        """Scores the frames still waiting; returns the rewards (N,) float32 of every frame added
        since the last finish, in order."""
        self._score()
        if not self._rewards:
            return np.zeros(0, np.float32)
        rewards = torch.cat(self._rewards).cpu().numpy()
        self._rewards.clear()
        return rewards


def episode_batch_size(
    model: str,
    device: torch.device | str,
    *,
    frames_per_rollout: int | None = None,
    frame_shape: tuple[int, int] | None = None,
) -> int:
    """The default scoring batch for episode-batch training: :func:`fill_batch_size`, evened out over
    a rollout's frames when their number is known (a batch larger than a rollout would only pad)."""
    limit = fill_batch_size(model, device, frame_shape=frame_shape)
    return even_batch(frames_per_rollout, limit) if frames_per_rollout else limit
