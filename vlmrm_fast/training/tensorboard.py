"""SB3's TensorBoard writer, told where a resumed run starts, and showing the policy videos.

SB3 writes a :class:`~stable_baselines3.common.logger.Video` through ``SummaryWriter.add_video``, which
needs moviepy to encode it. This writer encodes it itself, as an animated GIF (Pillow), into the image
summary that ``add_video`` would have written: TensorBoard's Images tab plays it. The GIF is scaled down
and thinned out so that a long episode at a large frame size does not swell the event file.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from stable_baselines3.common.logger import TensorBoardOutputFormat, Video

#: The GIF's longer side (pixels) and its most frames: a 1000-step episode at 480 px stays a few MB.
GIF_SIZE = 192
GIF_FRAMES = 200


class TensorBoardWriter(TensorBoardOutputFormat):
    """SB3's TensorBoard output format with ``purge_step``: TensorBoard hides what an interrupted process
    logged past the step a resumed run starts from, so no curve runs twice; videos as animated GIFs."""

    def __init__(self, folder: str, purge_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=folder, purge_step=purge_step)
        self._is_closed = False

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        videos = {key: value for key, value in key_values.items() if isinstance(value, Video)}
        for key, video in videos.items():
            if "tensorboard" not in (key_excluded.get(key) or ()):
                self.writer.file_writer.add_summary(gif_summary(key, video), step)
        rest = {key: value for key, value in key_values.items() if key not in videos}
        super().write(rest, {key: key_excluded.get(key, ()) for key in rest}, step)


def gif_summary(tag: str, video: Video) -> Any:
    """The image summary of an animated GIF of ``video`` (frames (T, H, W, 3) uint8), as ``add_video`` makes."""
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    frames = np.asarray(video.frames)
    stride = max(1, -(-len(frames) // GIF_FRAMES))
    frames = frames[::stride]
    height, width = frames.shape[1:3]
    scale = min(1.0, GIF_SIZE / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    images = [Image.fromarray(frame).resize(size, Image.Resampling.BILINEAR) for frame in frames]
    out = io.BytesIO()
    duration_ms = round(1000 * stride / video.fps)
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
    image = Summary.Image(height=size[1], width=size[0], colorspace=3, encoded_image_string=out.getvalue())
    return Summary(value=[Summary.Value(tag=tag, image=image)])
