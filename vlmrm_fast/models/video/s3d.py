"""S3D-G trained on HowTo100M with MIL-NCE (Miech et al. 2020; RoboCLIP's reward model), written here
from its architecture.

The video tower is S3D-G: separable 3D convolutions (a spatial 1x3x3 then a temporal 3x1x1, each
with batch norm and ReLU) in Inception blocks, each branch gated by a sigmoid of its own
spatio-temporal mean, after a space-to-depth rearrangement of the input (2x2x2 blocks of pixels
into channels, the TPU trick of the released weights), then a mean over time and space and a
linear layer into the 512-dimensional joint space. It reads 32 frames with values in [0, 1]
(its authors' convention; RoboCLIP's Meta-World runs fed it raw 0-255 values instead).

The text tower is a bag of words: a prompt is lowercased and split into words (``[\\w']+``), each
word known to the dictionary (``s3d_dict.npy``, a numpy array of words; word ``i`` has token
``i + 1``, 0 pads) is looked up in a 300-dimensional embedding table, the first 16 tokens (zero
padded) go through a linear layer and a ReLU, are max-pooled, and a last linear layer gives the
embedding. Words the dictionary lacks are dropped.

The modules carry the parameter names of the released ``s3d_howto100m.pth`` (a plain state dict),
so it maps onto them name for name. MIL-NCE compared raw dot products: the model has no softmax
temperature (``logit_scale`` is None), and its embeddings are L2-normalised here like every video
model's (the reward's cosine).
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vlmrm_fast.frames.preprocess import PreprocessSpec
from vlmrm_fast.models.clip.prompts import PromptTruncatedWarning
from vlmrm_fast.models.random_init import _LocalGenerator
from vlmrm_fast.models.video.base import VideoModel, VideoModelInfo

DICTIONARY_FILE = "s3d_dict.npy"
WEIGHTS_URL = "https://www.rocq.inria.fr/cluster-willow/amiech/howto100m/"

# Each Inception block's branch widths, in the released network: 1x1; 1x1 -> 3x3x3; 1x1 -> 3x3x3; pool -> 1x1.
_BLOCKS = (
    ("mixed_3b", (64, 96, 128, 16, 32, 32)),
    ("mixed_3c", (128, 128, 192, 32, 96, 64)),
    ("mixed_4b", (192, 96, 208, 16, 48, 64)),
    ("mixed_4c", (160, 112, 224, 24, 64, 64)),
    ("mixed_4d", (128, 128, 256, 24, 64, 64)),
    ("mixed_4e", (112, 144, 288, 32, 64, 64)),
    ("mixed_4f", (256, 160, 320, 32, 128, 128)),
    ("mixed_5b", (256, 160, 320, 32, 128, 128)),
    ("mixed_5c", (384, 192, 384, 48, 128, 128)),
)

#: The words of a model without its published dictionary (random weights: tests, benchmarks).
BUILTIN_WORDS = tuple(
    "a an the is are on of in to at up down and robot humanoid person agent car pole cart hill door tomato "
    "kneeling standing walking running jumping sitting lying falling doing splits cartwheel forward backward "
    "arms legs raised ground top balanced upright over open cut".split()
)


@dataclasses.dataclass(frozen=True)
class S3DConfig:
    image_size: int = 224
    num_frames: int = 32
    width_divisor: int = 1  # every convolution's channels divided by it (the tiny model)
    embed_dim: int = 512
    word_dim: int = 300
    text_hidden: int = 2048
    vocab_size: int = 66250  # rows of the word table, token 0 (padding) included
    max_words: int = 16


@dataclasses.dataclass(frozen=True)
class Entry:
    info: VideoModelInfo
    config: S3DConfig


def _entry(name: str, config: S3DConfig, *, tiny: bool = False) -> Entry:
    # Values in [0, 1]: mean 0, std 1. The shortest side to the input size (bicubic) and a centre crop.
    preprocess = PreprocessSpec(
        size=config.image_size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), interpolation="bicubic"
    )
    info = VideoModelInfo(name, config.num_frames, preprocess, embed_dim=config.embed_dim, tiny=tiny)
    return Entry(info, config)


MODELS: dict[str, Entry] = {
    entry.info.name: entry
    for entry in (
        _entry("s3d-howto100m", S3DConfig()),
        _entry(
            "s3d-tiny",
            S3DConfig(
                image_size=32,
                num_frames=8,
                width_divisor=8,
                embed_dim=16,
                word_dim=16,
                text_hidden=32,
                vocab_size=len(BUILTIN_WORDS) + 1,
            ),
            tiny=True,
        ),
    )
}


class STConv3D(nn.Module):
    """Convolution, batch norm and ReLU; separable: a spatial (1, k, k) then a temporal (k, 1, 1) one."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int | tuple[int, int, int],
        *,
        padding: int | tuple[int, int, int] = 0,
        separable: bool = False,
    ):
        super().__init__()
        self.separable = separable
        if separable:
            assert isinstance(kernel, int) and isinstance(padding, int)
            self.conv1 = nn.Conv3d(cin, cout, (1, kernel, kernel), padding=(0, padding, padding), bias=False)
            self.bn1 = nn.BatchNorm3d(cout)
            self.conv2 = nn.Conv3d(cout, cout, (kernel, 1, 1), padding=(padding, 0, 0), bias=False)
            self.bn2 = nn.BatchNorm3d(cout)
        else:
            self.conv1 = nn.Conv3d(cin, cout, kernel, padding=padding, bias=False)
            self.bn1 = nn.BatchNorm3d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        if self.separable:
            x = F.relu(self.bn2(self.conv2(x)))
        return x


class SelfGating(nn.Module):
    """Each channel scaled by a sigmoid of a linear map of the channels' spatio-temporal means."""

    def __init__(self, channels: int):
        super().__init__()
        self.fc = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.sigmoid(self.fc(x.mean(dim=(2, 3, 4))))
        return x * weights[:, :, None, None, None]


def max_pool_same(x: torch.Tensor, kernel: tuple[int, int, int], stride: tuple[int, int, int]) -> torch.Tensor:
    """TensorFlow's 'SAME' max pooling as the released weights were trained with: zeros padded
    (the inputs follow a ReLU), more after than before, then a pool that keeps partial windows."""
    pads = []
    for k, s in zip(reversed(kernel), reversed(stride)):  # F.pad lists the last dimension first
        total = max(k - s, 0)
        pads += [total // 2, total - total // 2]
    return F.max_pool3d(F.pad(x, pads), kernel, stride, ceil_mode=True)


class InceptionBlock(nn.Module):
    def __init__(self, cin: int, widths: tuple[int, ...]):
        super().__init__()
        b0, b1a, b1b, b2a, b2b, b3b = widths
        self.conv_b0 = STConv3D(cin, b0, 1)
        self.conv_b1_a = STConv3D(cin, b1a, 1)
        self.conv_b1_b = STConv3D(b1a, b1b, 3, padding=1, separable=True)
        self.conv_b2_a = STConv3D(cin, b2a, 1)
        self.conv_b2_b = STConv3D(b2a, b2b, 3, padding=1, separable=True)
        self.conv_b3_b = STConv3D(cin, b3b, 1)
        self.gating_b0 = SelfGating(b0)
        self.gating_b1 = SelfGating(b1b)
        self.gating_b2 = SelfGating(b2b)
        self.gating_b3 = SelfGating(b3b)
        self.output_dim = b0 + b1b + b2b + b3b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b0 = self.gating_b0(self.conv_b0(x))
        b1 = self.gating_b1(self.conv_b1_b(self.conv_b1_a(x)))
        b2 = self.gating_b2(self.conv_b2_b(self.conv_b2_a(x)))
        b3 = self.gating_b3(self.conv_b3_b(F.max_pool3d(x, 3, stride=1, padding=1)))
        return torch.cat((b0, b1, b2, b3), dim=1)


class SentenceEmbedding(nn.Module):
    """Token ids (P, max_words) -> (P, embed_dim): word vectors, a ReLU layer, a max over words, a linear layer."""

    def __init__(self, config: S3DConfig):
        super().__init__()
        self.word_embd = nn.Embedding(config.vocab_size, config.word_dim)
        self.fc1 = nn.Linear(config.word_dim, config.text_hidden)
        self.fc2 = nn.Linear(config.text_hidden, config.embed_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(self.word_embd(tokens))).amax(dim=1))


class UnknownWordsWarning(UserWarning):
    """A prompt has words S3D's dictionary lacks: they are dropped from its text embedding."""


class WordTokenizer:
    """Prompts -> (P, max_words) token ids by the dictionary's words (token = index + 1, 0 pads)."""

    def __init__(self, words: list[str], max_words: int):
        self.token_of = {word: i + 1 for i, word in enumerate(words)}
        self.max_words = max_words

    def __call__(self, prompts: list[str]) -> torch.Tensor:
        tokens = torch.zeros(len(prompts), self.max_words, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            words = re.findall(r"[\w']+", prompt.lower())
            unknown = [w for w in words if w not in self.token_of]
            if unknown:
                warnings.warn(
                    f"prompt {prompt!r}: the dictionary lacks {', '.join(map(repr, unknown))}, which S3D drops; "
                    f"say it with words the dictionary has",
                    UnknownWordsWarning,
                    stacklevel=4,
                )
            known = [self.token_of[w] for w in words if w in self.token_of]
            if len(known) > self.max_words:
                warnings.warn(
                    f"prompt {prompt!r} has {len(known)} words S3D knows; it reads the first {self.max_words}, so "
                    f"the last {len(known) - self.max_words} are dropped. Shorten the prompt.",
                    PromptTruncatedWarning,
                    stacklevel=4,
                )
            known = known[: self.max_words]
            tokens[row, : len(known)] = torch.tensor(known, dtype=torch.long)
        return tokens


class S3D(VideoModel):
    logit_scale = None

    def __init__(self, info: VideoModelInfo, config: S3DConfig, words: list[str]):
        super().__init__()
        self.info = info
        self.config = config
        d = config.width_divisor

        def w(channels: int) -> int:
            return max(1, channels // d)

        # The released network's modules, by their names (a parameterless pool has no name in the file).
        self.conv1 = STConv3D(24, w(64), (2, 4, 4), padding=(1, 2, 2))  # on the space-to-depth input
        self.conv_2b = STConv3D(w(64), w(64), 1)
        self.conv_2c = STConv3D(w(64), w(192), 3, padding=1, separable=True)
        self.gating = SelfGating(w(192))
        channels = w(192)
        for name, widths in _BLOCKS:
            block = InceptionBlock(channels, tuple(w(c) for c in widths))
            setattr(self, name, block)
            channels = block.output_dim
        self.fc = nn.Linear(channels, config.embed_dim)
        self.text_module = SentenceEmbedding(config)
        if len(words) >= config.vocab_size:
            raise ValueError(
                f"the dictionary has {len(words)} words, more than {info.name}'s word table holds "
                f"({config.vocab_size - 1}); give the {DICTIONARY_FILE} released with its weights"
            )
        self.tokenizer = WordTokenizer(words, config.max_words)

    def window_features(self, features: torch.Tensor) -> torch.Tensor:
        x = space_to_depth(features.transpose(1, 2))  # (N, 3, T, S, S) -> (N, 24, T/2, S/2, S/2)
        x = self.conv1(x)[:, :, 1:, 1:, 1:]  # padded by one on both sides: keep TensorFlow's 'SAME' alignment
        x = max_pool_same(x, (1, 3, 3), (1, 2, 2))
        x = self.gating(self.conv_2c(self.conv_2b(x)))
        x = max_pool_same(x, (1, 3, 3), (1, 2, 2))
        x = self._blocks(x, "mixed_3b", "mixed_3c")
        x = max_pool_same(x, (3, 3, 3), (2, 2, 2))
        x = self._blocks(x, "mixed_4b", "mixed_4c", "mixed_4d", "mixed_4e", "mixed_4f")
        x = max_pool_same(x, (2, 2, 2), (2, 2, 2))
        x = self._blocks(x, "mixed_5b", "mixed_5c")
        return self.fc(x.mean(dim=(2, 3, 4)))

    def _blocks(self, x: torch.Tensor, *names: str) -> torch.Tensor:
        for name in names:
            x = self.get_submodule(name)(x)
        return x

    def _text_features(self, prompts: list[str]) -> torch.Tensor:
        return self.text_module(self.tokenizer(prompts).to(self.device))


def space_to_depth(x: torch.Tensor) -> torch.Tensor:
    """(N, C, T, H, W) -> (N, 8C, T/2, H/2, W/2): each 2x2x2 block of pixels into channels, in the
    released network's order (the offsets in time, height and width outermost, then the colour)."""
    n, c, t, h, w = x.shape
    x = x.reshape(n, c, t // 2, 2, h // 2, 2, w // 2, 2).permute(0, 3, 5, 7, 1, 2, 4, 6)
    return x.reshape(n, 8 * c, t // 2, h // 2, w // 2)


def load(name: str, *, checkpoint: str | os.PathLike | None, seed: int) -> S3D:
    entry = MODELS[name]
    words = list(BUILTIN_WORDS) if checkpoint is None else read_dictionary(Path(checkpoint), name)
    with _LocalGenerator(torch.Generator().manual_seed(seed)):
        model = S3D(entry.info, entry.config, words)
    if checkpoint is not None:
        from vlmrm_fast.models.video.checkpoints import mismatch_message, read_state_dict

        state = read_state_dict(checkpoint, name)
        problem = mismatch_message(state, model.state_dict())
        if problem:
            raise ValueError(
                f"checkpoint {str(checkpoint)!r} does not fit {name}: {problem}; give the released "
                f"s3d_howto100m.pth ({WEIGHTS_URL})"
            )
        model.load_state_dict(state)
    return model


def read_dictionary(checkpoint: Path, name: str) -> list[str]:
    """The words of ``s3d_dict.npy`` beside the weights file (a numpy array of strings)."""
    path = checkpoint.with_name(DICTIONARY_FILE)
    if not path.is_file():
        raise FileNotFoundError(
            f"{name} reads its words from {DICTIONARY_FILE} beside its weights, and {str(path)!r} does not "
            f"exist: download it from {WEIGHTS_URL}{DICTIONARY_FILE} into {str(checkpoint.parent)!r}"
        )
    try:
        words = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise ValueError(
            f"{str(path)!r} is not a numpy array of words ({type(exc).__name__}); download it again from {WEIGHTS_URL}"
        ) from exc
    if words.ndim != 1 or words.dtype.kind not in "US":
        raise ValueError(f"{str(path)!r} holds a {words.dtype} array of shape {words.shape}, not a list of words")
    return [str(word) for word in words]
