"""S3D-G HowTo100M against a plain reference of the released network, loaded from a checkpoint in the
released layout (``s3d_howto100m.pth`` beside ``s3d_dict.npy``), and its preprocessing.

The reference below is written as the released ``s3dg.py`` lays the network out (module for module, so
its state dict has the released key names), as plainly as possible: TensorFlow's 'SAME' pooling as a
``ConstantPad3d`` and a ``MaxPool3d`` that keeps partial windows, space-to-depth by ``view`` and
``permute``, the words looked up one by one in a Python dict.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch
from kernel_references import open_clip_reference, random_frames
from torch import nn

from vlmrm_fast.failures import expected_failure
from vlmrm_fast.frames.preprocess import FramePreprocessor
from vlmrm_fast.models.video import load_video_model, video_model_info
from vlmrm_fast.models.video.s3d import BUILTIN_WORDS, MODELS, S3DConfig

TINY = "s3d-tiny"
ATOL = 1e-4
BRANCHES = (  # the released widths of each Inception block's branches
    (64, 96, 128, 16, 32, 32),
    (128, 128, 192, 32, 96, 64),
    (192, 96, 208, 16, 48, 64),
    (160, 112, 224, 24, 64, 64),
    (128, 128, 256, 24, 64, 64),
    (112, 144, 288, 32, 64, 64),
    (256, 160, 320, 32, 128, 128),
    (256, 160, 320, 32, 128, 128),
    (384, 192, 384, 48, 128, 128),
)


class STConv3D(nn.Module):
    def __init__(self, cin, cout, kernel, stride=1, padding=0, separable=False):
        super().__init__()
        self.separable = separable
        if separable:
            self.conv1 = nn.Conv3d(
                cin, cout, [1, kernel[1], kernel[2]], [1, stride, stride], [0, padding, padding], bias=False
            )
            self.bn1 = nn.BatchNorm3d(cout)
            self.conv2 = nn.Conv3d(cout, cout, [kernel[0], 1, 1], [stride, 1, 1], [padding, 0, 0], bias=False)
            self.bn2 = nn.BatchNorm3d(cout)
        else:
            self.conv1 = nn.Conv3d(cin, cout, kernel, stride, padding, bias=False)
            self.bn1 = nn.BatchNorm3d(cout)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(x))) if self.separable else x


class SelfGating(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.fc = nn.Linear(channels, channels)

    def forward(self, x):
        return torch.sigmoid(self.fc(x.mean(dim=[2, 3, 4])))[:, :, None, None, None] * x


class MaxPoolSame(nn.Module):
    def __init__(self, kernel, stride):
        super().__init__()
        pads = []
        for k, s in zip(kernel, stride):
            along = max(k - s, 0)
            pads.append((along // 2, along - along // 2))
        (t0, t1), (h0, h1), (w0, w1) = pads
        self.pad = nn.ConstantPad3d((w0, w1, h0, h1, t0, t1), 0)
        self.pool = nn.MaxPool3d(kernel, stride, ceil_mode=True)

    def forward(self, x):
        return self.pool(self.pad(x))


class Inception(nn.Module):
    def __init__(self, cin, b0, b1a, b1b, b2a, b2b, b3b):
        super().__init__()
        self.conv_b0 = STConv3D(cin, b0, [1, 1, 1])
        self.conv_b1_a = STConv3D(cin, b1a, [1, 1, 1])
        self.conv_b1_b = STConv3D(b1a, b1b, [3, 3, 3], padding=1, separable=True)
        self.conv_b2_a = STConv3D(cin, b2a, [1, 1, 1])
        self.conv_b2_b = STConv3D(b2a, b2b, [3, 3, 3], padding=1, separable=True)
        self.maxpool_b3 = nn.MaxPool3d((3, 3, 3), stride=1, padding=1)
        self.conv_b3_b = STConv3D(cin, b3b, [1, 1, 1])
        self.gating_b0, self.gating_b1 = SelfGating(b0), SelfGating(b1b)
        self.gating_b2, self.gating_b3 = SelfGating(b2b), SelfGating(b3b)
        self.output_dim = b0 + b1b + b2b + b3b

    def forward(self, x):
        b0 = self.gating_b0(self.conv_b0(x))
        b1 = self.gating_b1(self.conv_b1_b(self.conv_b1_a(x)))
        b2 = self.gating_b2(self.conv_b2_b(self.conv_b2_a(x)))
        b3 = self.gating_b3(self.conv_b3_b(self.maxpool_b3(x)))
        return torch.cat((b0, b1, b2, b3), dim=1)


class Sentence(nn.Module):
    def __init__(self, c: S3DConfig, words):
        super().__init__()
        self.word_embd = nn.Embedding(c.vocab_size, c.word_dim)
        self.fc1 = nn.Linear(c.word_dim, c.text_hidden)
        self.fc2 = nn.Linear(c.text_hidden, c.embed_dim)
        self.word_to_token = {word: i + 1 for i, word in enumerate(words)}
        self.max_words = c.max_words

    def ids(self, sentences):
        rows = []
        for sentence in sentences:
            found = [self.word_to_token[w] for w in re.findall(r"[\w']+", sentence.lower()) if w in self.word_to_token]
            row = torch.zeros(self.max_words, dtype=torch.long)
            found = found[: self.max_words]
            row[: len(found)] = torch.tensor(found, dtype=torch.long)
            rows.append(row)
        return torch.stack(rows)

    def forward(self, sentences):
        x = torch.relu(self.fc1(self.word_embd(self.ids(sentences))))
        return self.fc2(torch.max(x, dim=1)[0])


class ReferenceS3D(nn.Module):
    def __init__(self, c: S3DConfig, words):
        super().__init__()

        def w(n):
            return max(1, n // c.width_divisor)

        self.conv1 = STConv3D(24, w(64), [2, 4, 4], stride=1, padding=(1, 2, 2))
        self.conv_2b = STConv3D(w(64), w(64), [1, 1, 1])
        self.conv_2c = STConv3D(w(64), w(192), [3, 3, 3], padding=1, separable=True)
        self.gating = SelfGating(w(192))
        self.maxpool_2a = MaxPoolSame((1, 3, 3), (1, 2, 2))
        self.maxpool_3a = MaxPoolSame((1, 3, 3), (1, 2, 2))
        self.maxpool_4a = MaxPoolSame((3, 3, 3), (2, 2, 2))
        self.maxpool_5a = MaxPoolSame((2, 2, 2), (2, 2, 2))
        names = [
            "mixed_3b",
            "mixed_3c",
            "mixed_4b",
            "mixed_4c",
            "mixed_4d",
            "mixed_4e",
            "mixed_4f",
            "mixed_5b",
            "mixed_5c",
        ]
        channels = w(192)
        for name, widths in zip(names, BRANCHES):
            block = Inception(channels, *(w(n) for n in widths))
            setattr(self, name, block)
            channels = block.output_dim
        self.fc = nn.Linear(channels, c.embed_dim)
        self.text_module = Sentence(c, words)

    def forward(self, video):  # (B, 3, T, H, W)
        b, c, t, h, w = video.shape
        x = video.view(b, c, t // 2, 2, h // 2, 2, w // 2, 2).permute(0, 3, 5, 7, 1, 2, 4, 6)
        x = x.contiguous().view(b, 8 * c, t // 2, h // 2, w // 2)
        x = self.conv1(x)[:, :, 1:, 1:, 1:]
        x = self.gating(self.conv_2c(self.conv_2b(self.maxpool_2a(x))))
        x = self.mixed_3c(self.mixed_3b(self.maxpool_3a(x)))
        x = self.maxpool_4a(x)
        x = self.mixed_4f(self.mixed_4e(self.mixed_4d(self.mixed_4c(self.mixed_4b(x)))))
        x = self.mixed_5c(self.mixed_5b(self.maxpool_5a(x)))
        return self.fc(torch.mean(x, dim=[2, 3, 4]))


WORDS = list(reversed(BUILTIN_WORDS))  # a dictionary unlike the built-in one


@functools.cache
def reference() -> ReferenceS3D:
    model = ReferenceS3D(MODELS[TINY].config, WORDS)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            noise = torch.randn(tensor.shape, generator=generator)
            if name.endswith("running_var"):
                tensor.copy_(0.5 + noise.abs())
            elif name.endswith("bn1.weight") or name.endswith("bn2.weight"):
                tensor.copy_(1 + 0.1 * noise)
            else:
                tensor.copy_(0.3 * noise)
    return model.eval()


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("s3d")
    torch.save(reference().state_dict(), folder / "s3d_howto100m.pth")
    np.save(folder / "s3d_dict.npy", np.array(WORDS))
    return str(folder / "s3d_howto100m.pth")


def test_the_reference_has_the_released_key_names():
    keys = set(reference().state_dict())
    assert {
        "conv1.conv1.weight",
        "conv1.bn1.running_var",
        "conv_2c.conv2.weight",
        "gating.fc.bias",
        "mixed_3b.conv_b1_b.bn2.num_batches_tracked",
        "mixed_5c.gating_b3.fc.weight",
        "fc.weight",
        "text_module.word_embd.weight",
        "text_module.fc2.bias",
    } <= keys


def test_a_released_checkpoint_encodes_windows_and_prompts_as_the_reference(released):
    model = load_video_model(TINY, checkpoint=released)
    info = model.info
    x = torch.rand(
        2, info.num_frames, 3, info.preprocess.size, info.preprocess.size, generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        expected = torch.nn.functional.normalize(reference()(x.transpose(1, 2)), dim=-1)  # the released (B, 3, T, H, W)
    torch.testing.assert_close(model.encode_video(x), expected, atol=ATOL, rtol=0)
    prompts = ["A humanoid robot, kneeling on the ground", "cut tomato", "nothing it knows", " ".join(WORDS[:30])]
    with torch.no_grad():
        expected = torch.nn.functional.normalize(reference().text_module(prompts), dim=-1)
    with pytest.warns(UserWarning) as caught:
        got = model.encode_text(prompts)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    said = sorted((str(w.message) for w in caught), reverse=True)
    assert said == [
        "prompt 'nothing it knows': the dictionary lacks 'nothing', 'it', 'knows', which S3D drops; say it with "
        "words the dictionary has",
        f"prompt {' '.join(WORDS[:30])!r} has 30 words S3D knows; it reads the first 16, so the last 14 are dropped. "
        "Shorten the prompt.",
    ]
    assert model.logit_scale is None


def test_a_checkpoint_without_its_dictionary_or_with_other_keys_is_refused(released, tmp_path):
    lone = tmp_path / "s3d_howto100m.pth"
    lone.write_bytes(open(released, "rb").read())
    with pytest.raises(FileNotFoundError) as exc:
        load_video_model(TINY, checkpoint=str(lone))
    text = str(exc.value)
    assert "\n" not in text and expected_failure(exc.value)
    assert (
        f"s3d-tiny reads its words from s3d_dict.npy beside its weights, and {str(tmp_path / 's3d_dict.npy')!r}" in text
    )
    assert "download it from https://www.rocq.inria.fr/cluster-willow/amiech/howto100m/s3d_dict.npy" in text
    np.save(tmp_path / "s3d_dict.npy", np.array(WORDS))
    state = dict(reference().state_dict())
    state["fc.weight"] = torch.zeros(3, 3)
    torch.save(state, lone)
    with pytest.raises(ValueError, match=r"does not fit s3d-tiny: fc.weight has shape \(3, 3\), expected \(16, 128\);"):
        load_video_model(TINY, checkpoint=str(lone))
    np.save(tmp_path / "s3d_dict.npy", np.zeros(3))
    with pytest.raises(ValueError, match="holds a float64 array of shape"):
        load_video_model(TINY, checkpoint=str(lone))


def test_preprocessing_gives_values_in_zero_one():
    """The authors' input: values in [0, 1] (frames / 255); the shortest side resized by bicubic and a
    centre crop (open_clip's transform with mean 0 and std 1, bit for bit)."""
    spec = video_model_info(TINY).preprocess
    ours = FramePreprocessor(spec, torch.device("cpu"))
    same = random_frames(3, spec.size, spec.size, seed=0)
    torch.testing.assert_close(ours(same), torch.from_numpy(same).permute(0, 3, 1, 2).float() / 255, atol=1e-7, rtol=0)
    other = random_frames(3, 48, 64, seed=1)
    assert torch.equal(ours(other), open_clip_reference(spec, other))
    assert video_model_info("s3d-howto100m").num_frames == 32


def test_roboclip_pixel_values_feed_the_frames_raw_0_255_values():
    """window.pixel_values: '0-255' (RoboCLIP's input to S3D-G) scales what the authors' [0, 1] convention
    reads by 255 (to float32 precision: (x / 255) / (1 / 255)), the geometry unchanged; the default stays
    the authors' convention, and a model with its own normalisation refuses the switch in one line."""
    from vlmrm_fast.checks import FieldError
    from vlmrm_fast.reward import load_reward_model
    from vlmrm_fast.reward.spec import RewardModelSpec

    def model(**window):
        spec = RewardModelSpec(model=TINY, target_prompts=("a robot",), device="cpu", window={"frames": 8, **window})
        return load_reward_model(spec)

    frames = random_frames(3, 48, 64, seed=2)
    authors = model().preprocessor(frames)
    raw = model(pixel_values="0-255").preprocessor(frames)
    torch.testing.assert_close(raw, authors * 255, atol=0, rtol=2e-7)
    assert raw.max() > 1.5 and authors.max() <= 1.0
    with pytest.raises(
        FieldError,
        match=r"^window.pixel_values: '0-255' is RoboCLIP's input to S3D-G.*leave window.pixel_values out \(model\)$",
    ):
        RewardModelSpec(model="xclip-tiny", target_prompts=("a robot",), window={"frames": 8, "pixel_values": "0-255"})
