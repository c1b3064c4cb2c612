"""Video-language models: a window of frames and prompts -> embeddings a reward compares.

    base.py          the interface (VideoModelInfo, VideoModel), subsample_indices
    load.py          the models by name: video_model_info, load_video_model, flops_per_window
    viclip.py        ViCLIP (InternVideo), written here; loads the released checkpoints by their key names
    xclip.py         X-CLIP through transformers' XCLIPModel (the optional ``video`` extra)
    s3d.py           S3D-G HowTo100M (RoboCLIP's model), written here; loads s3d_howto100m.pth and s3d_dict.npy
    checkpoints.py   reading a published checkpoint, and the one line when it does not fit

docs/video-models.md says which model to pick, what each costs and where its weights are.
"""

from vlmrm_fast.models.video.base import VideoModel, VideoModelInfo, subsample_indices
from vlmrm_fast.models.video.video_models import (
    flops_per_window,
    known_video_models,
    load_video_model,
    video_model_info,
)

__all__ = [
    "VideoModel",
    "VideoModelInfo",
    "flops_per_window",
    "known_video_models",
    "load_video_model",
    "subsample_indices",
    "video_model_info",
]
