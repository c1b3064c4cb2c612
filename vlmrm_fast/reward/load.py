"""Loading a reward model from its spec: the one place that picks which model a spec asks for (a CLIP
frame model, a generative VLM judge, a model of windows), above every model's own module."""

from __future__ import annotations

from typing import Any

import torch

from vlmrm_fast.checks import FieldError
from vlmrm_fast.models import load_clip
from vlmrm_fast.models.judge.load import check_model_name
from vlmrm_fast.reward.judge import JudgeRewardModel, is_judge_spec, load_judge_reward_model
from vlmrm_fast.reward.model import VLMRewardModel
from vlmrm_fast.reward.spec import JUDGE_FIELDS, RewardModelSpec
from vlmrm_fast.reward.window_model import MeanOfFramesModel, VideoWindowModel, WindowRewardModel
from vlmrm_fast.runtime.device import resolve_device


def load_reward_model(
    model: str | RewardModelSpec, pretrained: str | None = None, **fields: Any
) -> VLMRewardModel | JudgeRewardModel | WindowRewardModel:
    """Loads a CLIP reward model from a :class:`RewardModelSpec`, or from its fields; a generative VLM
    judge (:class:`~vlmrm_fast.reward.judge.JudgeRewardModel`, docs/judge.md) for a judge's name or
    question tasks; a window model (docs/video-rewards.md) for a spec with a ``window``.

    ``model`` is an open_clip name (``"ViT-bigG-14"``), ``"name/tag"``
    (``"ViT-L-14/laion2b_s32b_b82k"``), ``"hf-hub:org/repo"`` or ``"vlmrm-tiny"``;
    ``checkpoint`` a local weights file. Give ``target_prompts`` (with optional
    ``baseline_prompts`` and ``alpha``) for one task, or ``tasks=[...]``
    (:class:`GoalBaselineTask`, :class:`BinaryTask` or dicts) for several; the
    model then returns (N, K) rewards. ``resize_mode="squash"`` resizes frames to the
    encoder's square input instead of open_clip's shortest-side resize and centre crop
    (keeps wide frames whole); ``resize_mode="paper"`` does what the paper's code did
    (a squash by PyTorch's float bicubic without antialiasing, OpenAI's mean and std; see
    ``vlmrm_fast.frames.preprocess``). Other keywords are encoder options (see :class:`RewardModelSpec`).
    A video model's name, or ``window=``, gives a model of windows of frames
    (:class:`~vlmrm_fast.reward.window_model.WindowRewardModel`; docs/video-rewards.md).
    """
    if isinstance(model, RewardModelSpec):
        if pretrained is not None or fields:
            raise ValueError("give a RewardModelSpec alone, or its fields as arguments, not both")
        spec = model
    else:
        spec = RewardModelSpec.from_kwargs(model=model, pretrained=pretrained, **fields)
    check_model_name(spec.model, spec.cache_dir)
    if is_judge_spec(spec):
        if spec.window is not None:
            raise FieldError(
                "window",
                f"scores windows of frames with a video model or the mean of a CLIP's frame embeddings; {spec.model} "
                "is a generative VLM judge, which answers about one frame (drop window; score_every scores less often)",
            )
        return load_judge_reward_model(spec)
    for field, sets in JUDGE_FIELDS.items():
        if getattr(spec, field) is not None:
            raise FieldError(field, f"sets {sets}; {spec.model} takes its own")
    if spec.window is not None:
        return load_window_model(spec)
    tasks, multi = spec.reward_tasks()
    resolved = resolve_device(spec.device)
    clip = load_clip(
        spec.model,
        spec.pretrained,
        checkpoint=spec.checkpoint,
        device=resolved,
        cache_dir=spec.cache_dir,
        seed=spec.seed,
        tokenizer=spec.tokenizer,
    )
    if spec.resize_mode is not None:
        clip.preprocess = clip.preprocess.with_resize_mode(spec.resize_mode)
    return VLMRewardModel(
        clip,
        tasks,
        device=resolved,
        multi_task=multi,
        backend=spec.backend,
        precision=spec.precision,
        batch_size=spec.batch_size,
        schedule=spec.schedule,
        **spec.encoder_options,
    )


def load_window_model(spec: RewardModelSpec) -> WindowRewardModel:
    """The window reward model of a :class:`~vlmrm_fast.reward.spec.RewardModelSpec` with a ``window``."""
    window = spec.window
    assert window is not None  # load_reward_model sends only a spec with a window here
    if window.embedding == "mean_of_frames":
        frames = load_reward_model(spec.replace(window=None))
        assert isinstance(frames, VLMRewardModel)  # no window: a frame model
        return MeanOfFramesModel(frames, window)
    from vlmrm_fast.models.video import load_video_model

    device = resolve_device(spec.device)
    dtype = _video_dtype(spec.precision, device)
    video = load_video_model(spec.model, checkpoint=spec.checkpoint, device=device, dtype=dtype, seed=spec.seed)
    tasks, multi = spec.reward_tasks()
    compiled = spec.backend == "compile" or (spec.backend == "auto" and device.type == "cuda" and spec.batch_size)
    return VideoWindowModel(
        video,
        tasks,
        window,
        multi_task=multi,
        schedule=spec.schedule,
        batch_size=spec.batch_size,
        compiled=bool(compiled),
        compile_mode=spec.encoder_options.get("compile_mode"),
        resize_mode=spec.resize_mode,
    )


def _video_dtype(precision: str, device: torch.device) -> torch.dtype:
    """fp32 on the CPU, bf16 on a GPU (fp16 without bf16) for "auto"; a named precision as named."""
    from vlmrm_fast.encoders.precision import resolve

    return resolve(precision, device).dtype
