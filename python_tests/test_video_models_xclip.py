"""X-CLIP against transformers' own ``XCLIPModel.forward`` on the same windows and prompts (tokenized by
transformers' ``CLIPTokenizer``, built in memory from CLIP's BPE vocabulary), its preprocessing against
transformers' ``VideoMAEImageProcessor`` (the released processor), and its checkpoints."""

from __future__ import annotations

import functools
import gzip

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from kernel_references import random_frames

from vlmrm_fast.failures import expected_failure
from vlmrm_fast.frames.preprocess import FramePreprocessor
from vlmrm_fast.models.video import load_video_model, video_model_info
from vlmrm_fast.models.video.xclip import xclip_config

transformers = pytest.importorskip("transformers")  # the optional extra: pip install '.[video]'

TINY = "xclip-tiny"
ATOL = 1e-4
PROMPTS = ["a humanoid robot kneeling", "A Humanoid  robot, doing the splits!", "it's a robot's 2nd cartwheel"]


@functools.cache
def clip_tokenizer():
    """transformers' CLIPTokenizer with CLIP's vocabulary and merges (read from the copy open_clip ships)."""
    import open_clip

    bpe = open_clip.tokenizer.SimpleTokenizer()
    vocab = dict(bpe.encoder)
    vocab["<|startoftext|>"] = vocab.pop("<start_of_text>")
    vocab["<|endoftext|>"] = vocab.pop("<end_of_text>")
    lines = gzip.open(open_clip.tokenizer.default_bpe()).read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1]]
    return transformers.CLIPTokenizer(vocab=vocab, merges=merges)


@functools.cache
def tiny():
    return load_video_model(TINY, seed=5)


def windows(n: int = 3, seed: int = 1) -> torch.Tensor:
    info = video_model_info(TINY)
    s = info.preprocess.size
    return torch.randn(n, info.num_frames, 3, s, s, generator=torch.Generator().manual_seed(seed))


def test_tokens_are_clip_tokenizers():
    ours = tiny().tokenizer(PROMPTS)
    theirs = clip_tokenizer()(PROMPTS, padding="max_length", max_length=77, return_tensors="pt")
    mask = theirs["attention_mask"].bool()
    assert (
        torch.equal(ours[mask], theirs["input_ids"][mask]) and not ours[~mask].any()
    )  # 0 pads, theirs pad with the end token


def test_windows_and_prompts_encode_as_xclipmodel_forward():
    model = tiny()
    x = windows()
    inputs = clip_tokenizer()(PROMPTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], pixel_values=x)
    video, text = model.encode_video_and_text(x, PROMPTS)
    torch.testing.assert_close(video, out.video_embeds, atol=ATOL, rtol=0)
    torch.testing.assert_close(text, out.text_embeds, atol=ATOL, rtol=0)  # each window's own prompts
    torch.testing.assert_close(model.encode_video(x), out.video_embeds, atol=ATOL, rtol=0)
    logits = model.logit_scale * torch.einsum("nd,npd->np", video, text)
    torch.testing.assert_close(logits, out.logits_per_video, atol=1e-3, rtol=1e-5)
    with torch.no_grad():
        unconditioned = model.model.get_text_features(**inputs).pooler_output
    torch.testing.assert_close(model.encode_text(PROMPTS), F.normalize(unconditioned, dim=-1), atol=ATOL, rtol=0)
    assert not torch.allclose(text[0], model.encode_text(PROMPTS), atol=1e-3)  # the prompt generator adds something
    assert not torch.allclose(text[0], text[1], atol=1e-4)  # and it depends on the window


def test_preprocessing_is_the_released_processors():
    """The released processor is VideoMAEImageProcessor with ImageNet's mean and std (shortest side to the
    input size, bilinear, a centre crop). Its Pillow backend gives the fused kernel's values bit for bit;
    its torchvision backend resamples on tensors and differs by a few grey levels."""
    spec = video_model_info(TINY).preprocess
    settings = dict(
        size={"shortest_edge": spec.size},
        crop_size={"height": spec.size, "width": spec.size},
        resample=2,  # PIL.Image.BILINEAR, as the released config says
        image_mean=list(spec.mean),
        image_std=list(spec.std),
    )
    ours = FramePreprocessor(spec, torch.device("cpu"))
    for height, width in ((100, 80), (spec.size, spec.size), (64, 120)):
        frames = random_frames(8, height, width, seed=height)
        pil = transformers.VideoMAEImageProcessorPil(**settings)([list(frames)], return_tensors="pt").pixel_values
        assert torch.equal(ours(frames), pil[0])
        tv = transformers.VideoMAEImageProcessor(**settings)([list(frames)], return_tensors="pt").pixel_values
        grey = (ours(frames) - tv[0]).abs() * torch.tensor(spec.std).view(3, 1, 1) * 255
        assert float(grey.max()) <= 3 and float(grey.mean()) < 0.5
    # The processor crops from (w - S) // 2, torchvision and the kernel from round((w - S) / 2) (halves to
    # even): one column apart where w - S is 3 modulo 4.
    frames = random_frames(2, spec.size, spec.size + 19, seed=0)
    pil = transformers.VideoMAEImageProcessorPil(**settings)([list(frames)], return_tensors="pt").pixel_values[0]
    assert torch.equal(ours(frames)[..., :-1], pil[..., 1:]) and not torch.equal(ours(frames), pil)


def test_a_saved_xclipmodel_loads_as_its_checkpoint(tmp_path):
    saved = transformers.XCLIPModel(xclip_config(TINY)).eval()
    saved.save_pretrained(tmp_path / "xclip")
    model = load_video_model(TINY, checkpoint=str(tmp_path / "xclip"))
    state = saved.state_dict()
    assert all(torch.equal(state[k], v) for k, v in model.model.state_dict().items())
    x = windows()
    with torch.no_grad():
        expected = F.normalize(saved.get_video_features(pixel_values=x).pooler_output, dim=-1)
    torch.testing.assert_close(model.encode_video(x), expected, atol=ATOL, rtol=0)


def test_a_checkpoint_of_another_x_clip_is_refused_naming_the_difference(tmp_path):
    config = xclip_config(TINY)
    config.vision_config.num_frames = 4
    transformers.XCLIPModel(config).save_pretrained(tmp_path / "four")
    with pytest.raises(ValueError) as exc:
        load_video_model(TINY, checkpoint=str(tmp_path / "four"))
    text = str(exc.value)
    assert "\n" not in text and expected_failure(exc.value)
    assert text == (
        f"checkpoint {str(tmp_path / 'four')!r} is another X-CLIP than xclip-tiny "
        "(vision_config.num_frames 4, xclip-tiny has 8): give a checkpoint of xclip-tiny"
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match=r"is neither a folder of a saved XCLIPModel nor a hub repository") as exc:
        load_video_model(TINY, checkpoint=str(tmp_path / "empty"))
    assert "\n" not in str(exc.value) and expected_failure(exc.value)


def test_the_real_configs_are_the_released_ones():
    base = xclip_config("xclip-base-patch32")
    assert (base.vision_config.patch_size, base.vision_config.num_frames, base.projection_dim) == (32, 8, 512)
    assert base.text_config.max_position_embeddings == 77 and base.vision_config.mit_hidden_size == 512
    large = xclip_config("xclip-large-patch14")
    assert (large.vision_config.hidden_size, large.vision_config.num_hidden_layers, large.projection_dim) == (
        1024,
        24,
        768,
    )
    assert np.isclose(video_model_info("xclip-base-patch16").preprocess.mean[0], 0.485)
