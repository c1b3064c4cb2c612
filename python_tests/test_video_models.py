"""Video-language models: the interface every model keeps (info before weights, windows in, L2-normalised
embeddings out), subsampling a window, random weights from a seed, and the one-line refusals."""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings

import pytest
import torch

from vlmrm_fast.failures import expected_failure
from vlmrm_fast.frames.preprocess import PreprocessSpec
from vlmrm_fast.models.random_init import RandomWeightsWarning
from vlmrm_fast.models.video import (
    VideoModel,
    VideoModelInfo,
    flops_per_window,
    known_video_models,
    load_video_model,
    subsample_indices,
    video_model_info,
)

TINY = ("viclip-tiny", "xclip-tiny", "s3d-tiny")
PROMPTS = ["a humanoid robot kneeling", "a humanoid robot"]


@functools.cache
def tiny(name: str) -> VideoModel:
    return load_video_model(name)


def windows(name: str, n: int = 2, seed: int = 0) -> torch.Tensor:
    info = video_model_info(name)
    size = info.preprocess.size
    return torch.randn(n, info.num_frames, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_every_model_has_its_info_without_loading_weights():
    assert set(TINY) | {"viclip-b16", "viclip-l14", "xclip-base-patch32", "s3d-howto100m"} <= set(known_video_models())
    frames = {"viclip-b16": 8, "viclip-l14": 8, "xclip-base-patch32": 8, "s3d-howto100m": 32}
    for name, num_frames in frames.items():
        info = video_model_info(name)
        assert isinstance(info, VideoModelInfo) and info.name == name and info.num_frames == num_frames
        assert isinstance(info.preprocess, PreprocessSpec) and info.preprocess.size == 224
        assert not info.tiny
    assert video_model_info("viclip-l14").embed_dim == 768 and video_model_info("viclip-b16").embed_dim == 512
    assert video_model_info("xclip-base-patch32").conditions_text and video_model_info("xclip-tiny").extra == "video"
    assert not video_model_info("viclip-b16").conditions_text and video_model_info("s3d-tiny").extra is None
    s3d = video_model_info("s3d-howto100m").preprocess
    assert (s3d.mean, s3d.std) == ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # values in [0, 1]


@pytest.mark.parametrize("name", TINY)
def test_a_tiny_model_encodes_windows_and_prompts_into_unit_vectors(name):
    model = tiny(name)
    assert isinstance(model, VideoModel) and model.info == video_model_info(name)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    video = model.encode_video(windows(name, 3))
    text = model.encode_text(PROMPTS)
    dim = model.info.embed_dim
    assert video.shape == (3, dim) and text.shape == (2, dim)
    torch.testing.assert_close(video.norm(dim=-1), torch.ones(3))
    torch.testing.assert_close(text.norm(dim=-1), torch.ones(2))
    both_video, both_text = model.encode_video_and_text(windows(name, 3), PROMPTS)
    torch.testing.assert_close(both_video, video)
    assert both_text.shape == (3, 2, dim)
    if not model.info.conditions_text:  # the same prompts for every window
        torch.testing.assert_close(both_text, text.expand(3, -1, -1))
    assert model.logit_scale is None or model.logit_scale > 0
    assert 1e6 < flops_per_window(name) < 1e8  # counted on the meta device, whatever the family


@pytest.mark.parametrize("name", TINY)
def test_each_window_is_encoded_on_its_own(name):
    """A window's embedding does not depend on the others in its batch (to float precision)."""
    model = tiny(name)
    x = windows(name, 3)
    torch.testing.assert_close(model.encode_video(x[1:2]), model.encode_video(x)[1:2], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", TINY)
def test_random_weights_come_from_the_seed_alone(name):
    torch.manual_seed(123)
    first = load_video_model(name, seed=3).state_dict()
    torch.manual_seed(456)
    second = load_video_model(name, seed=3).state_dict()
    other = load_video_model(name, seed=4).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first if first[k].is_floating_point())


def test_a_model_in_bfloat16_reads_bfloat16_windows():
    model = load_video_model("viclip-tiny", dtype=torch.bfloat16)
    assert (
        model.dtype == torch.bfloat16 and model.encode_video(windows("viclip-tiny").bfloat16()).dtype == torch.bfloat16
    )
    with pytest.raises(ValueError, match=r"runs in torch.bfloat16 on cpu, got windows in torch.float32"):
        model.encode_video(windows("viclip-tiny"))


def test_a_real_size_model_without_a_checkpoint_warns_that_its_weights_are_random(monkeypatch):
    from vlmrm_fast.models.video import viclip

    tiny = viclip.MODELS["viclip-tiny"]  # the size of the tiny model, to test the warning quickly
    real = dataclasses.replace(tiny, info=dataclasses.replace(tiny.info, name="viclip-b16", tiny=False))
    monkeypatch.setitem(viclip.MODELS, "viclip-b16", real)
    with pytest.warns(RandomWeightsWarning, match="viclip-b16 has no checkpoint: random weights"):
        load_video_model("viclip-b16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_video_model("viclip-tiny")


def test_subsample_keeps_the_newest_frame_and_spaces_the_rest_evenly():
    assert subsample_indices(32, 8) == [3, 7, 11, 15, 19, 23, 27, 31]
    assert subsample_indices(8, 8) == list(range(8))
    assert subsample_indices(4, 8) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert subsample_indices(1, 8) == [0] * 8
    assert subsample_indices(128, 32) == list(range(3, 128, 4))  # RoboCLIP's episode: every 4th frame
    for window in range(1, 70):
        for frames in (1, 8, 32):
            picked = subsample_indices(window, frames)
            assert len(picked) == frames and picked[-1] == window - 1 and picked[0] >= 0
            assert picked == sorted(picked)
            # a frame's age in the subsample depends on the window's length alone
            assert [window - 1 - i for i in picked] == [(j * window) // frames for j in range(frames - 1, -1, -1)]
            if window >= frames:
                assert len(set(picked)) == frames  # no frame read twice when there are enough


@pytest.mark.parametrize(
    ("window", "frames", "message"),
    [
        (0, 8, "window must be a positive integer, got 0"),
        (8, 0, "num_frames must be a positive integer, got 0"),
        (8.0, 8, "window must be a positive integer, got 8.0"),
    ],
)
def test_subsample_refuses_sizes_below_one(window, frames, message):
    with pytest.raises(ValueError, match=message):
        subsample_indices(window, frames)


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and expected_failure(exc.value), text
    return text


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as exc:
        video_model_info("viclip-b32")
    text = one_line(exc)
    assert text.startswith("unknown video model 'viclip-b32': did you mean 'viclip-b16'? the known ones are ")
    assert all(name in text for name in known_video_models())
    with pytest.raises(ValueError, match="unknown video model 'ViT-B-32'"):
        load_video_model("ViT-B-32")


def test_bad_windows_are_refused_in_one_line_each():
    model = tiny("viclip-tiny")
    x = windows("viclip-tiny")
    cases = [
        (x[:, 0], r"viclip-tiny scores windows of 8 frames \(N, 8, 3, 64, 64\), got single frames \(2, 3, 64, 64\): "),
        (x[:, :5], r"viclip-tiny reads 8 frames per window, got 5: .* subsample_indices\(5, 8\)"),
        (x[..., :32, :32], r"reads windows of preprocessed frames \(N, 8, 3, 64, 64\), got shape \(2, 8, 3, 32, 32\)"),
        (x.permute(0, 2, 1, 3, 4), r"reads windows of preprocessed frames .* got shape \(2, 3, 8, 64, 64\)"),
        (x[:0], r"viclip-tiny got no windows"),
    ]
    for pixels, message in cases:
        with pytest.raises(ValueError, match=message) as exc:
            model.encode_video(pixels)
        one_line(exc)
    with pytest.raises(TypeError, match="reads a torch tensor of windows") as exc:
        model.encode_video(x.numpy())
    one_line(exc)


def test_bad_prompts_are_refused_in_one_line_each():
    model = tiny("s3d-tiny")
    with pytest.raises(TypeError, match=r"got the string 'a robot': use \['a robot'\]") as exc:
        model.encode_text("a robot")
    one_line(exc)
    with pytest.raises(ValueError, match="prompts must not be empty") as exc:
        model.encode_text([])
    one_line(exc)
    with pytest.raises(TypeError, match="prompts must be strings, got int 3") as exc:
        model.encode_text(["a robot", 3])
    one_line(exc)


def test_a_checkpoint_that_is_not_there_or_not_weights_is_refused_in_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist") as exc:
        load_video_model("viclip-tiny", checkpoint=str(tmp_path / "nothing.pth"))
    one_line(exc)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(
        ValueError, match=r"could not be read as viclip-tiny's weights .* download or copy it again"
    ) as exc:
        load_video_model("viclip-tiny", checkpoint=str(junk))
    one_line(exc)
    listed = tmp_path / "list.pth"
    torch.save([torch.zeros(1)], listed)
    with pytest.raises(ValueError, match=r"is not a state dict of tensors \(list\)") as exc:
        load_video_model("viclip-tiny", checkpoint=str(listed))
    one_line(exc)


def test_x_clip_without_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    assert video_model_info("xclip-tiny").num_frames == 8  # the info needs no transformers
    with pytest.raises(ImportError) as exc:
        load_video_model("xclip-tiny")
    assert one_line(exc) == (
        "xclip-tiny needs transformers (X-CLIP is transformers' XCLIPModel), which is not installed: "
        "pip install 'vlmrm-fast[video]' (from a checkout: pip install '.[video]')"
    )
