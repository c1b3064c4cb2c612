"""The interface every CLIP image-tower backend implements (:class:`ImageEncoder`), and the row by
which each backend describes itself (:class:`Backend`)."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable

import torch


class ImageEncoder(abc.ABC):
    """Maps preprocessed pixels (N, 3, S, S) of ``input_dtype`` on ``device`` to raw
    (unnormalized) image embeddings (N, D)."""

    backend: str
    device: torch.device
    input_dtype: torch.dtype
    embed_dim: int
    image_size: int
    #: the one batch size the backend runs (compiled graphs, engines); None: any
    batch_size: int | None = None
    #: how FP8 scales the linear layers' inputs (encoders/fp8.py); None unless the precision is FP8
    fp8_scaling: str | None = None

    @abc.abstractmethod
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """(N, 3, S, S) -> (N, D); N must equal ``batch_size`` when that is set."""

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        self._check(pixels)
        return self.encode(pixels)

    def encode_rows(self, pixels: torch.Tensor) -> torch.Tensor:
        """Up to ``batch_size`` rows of pixels (any number when that is None) -> their (N, D)
        embeddings: a fixed-batch encoder gets the rows padded to its batch, and the padding's
        outputs are dropped (the rows of a batch are independent). The padding is the encoder's
        own input buffer where it has one: the rows are copied in once, and the rows past them
        keep whatever they held."""
        fixed, n = self.batch_size, pixels.shape[0]
        if fixed is None or n == fixed:
            return self(pixels)
        if n > fixed:
            raise ValueError(f"the {self.backend} encoder runs batches of {fixed}, got {n} rows; encode them in chunks")
        padded = self.input_buffer()
        if padded is None:
            padded = pixels.new_zeros((fixed,) + tuple(pixels.shape[1:]))
        padded[:n].copy_(pixels)
        return self(padded)[:n]

    def _check(self, pixels: torch.Tensor) -> None:
        expected = (3, self.image_size, self.image_size)
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != expected:
            raise ValueError(f"pixels must be (N, {', '.join(map(str, expected))}), got {tuple(pixels.shape)}")
        if pixels.dtype != self.input_dtype:
            raise TypeError(f"pixels must be {self.input_dtype} for the {self.backend} encoder, got {pixels.dtype}")
        if pixels.device != self.device:
            raise ValueError(f"pixels are on {pixels.device}, the encoder on {self.device}")
        if self.batch_size is not None and pixels.shape[0] != self.batch_size:
            raise ValueError(f"the {self.backend} encoder runs batches of {self.batch_size}, got {pixels.shape[0]}")

    def input_buffer(self) -> torch.Tensor | None:
        """The static (batch_size, 3, S, S) tensor the backend reads from, or None.

        Writing preprocessed pixels straight into it and passing it to the
        encoder saves one device copy; when fewer frames than ``batch_size`` are
        written, the rows past them hold stale pixels whose outputs are to be
        ignored (the rows of a batch are independent). None: the backend reads
        any tensor in place.
        """
        return None

    def close(self) -> None:  # noqa: B027 (a no-op unless the backend holds something)
        """Releases what the backend holds (graphs, engines, buffers)."""

    def describe(self) -> str:
        batch = "any batch" if self.batch_size is None else f"batch {self.batch_size}"
        return f"{self.backend} ({self.precision_label()}, {batch}, {self.device})"

    def precision_label(self) -> str:
        """The precision it runs in, FP8's scaling included: "bf16", "fp8 dynamic-rowwise"."""
        precision = getattr(self, "precision", None) or str(self.input_dtype).replace("torch.", "")
        return f"{precision} {self.fp8_scaling}" if self.fp8_scaling else precision


@dataclasses.dataclass(frozen=True)
class Backend:
    """An encoder backend as it describes itself: one row of ``encoders.BACKEND_TABLE``.

    ``make(clip, *, device, precision, batch_size, **options)`` builds the encoder (``precision`` a
    resolved :class:`~vlmrm_fast.encoders.precision.Precision`); ``options`` are the keyword options
    it takes beside those. ``unavailable(device)`` says why it cannot run on ``device`` here (a
    missing package, no GPU), or None. "auto" tries the backends that have an ``auto_rank``,
    lowest first, and takes the first that runs on the device's type (``auto_devices``), runs the
    precision, has the batch size it needs (``fixed_batch``) and is available.
    """

    name: str
    summary: str
    make: Callable[..., ImageEncoder]
    options: tuple[str, ...] = ()
    #: runs one batch size, given at construction (smaller batches are padded)
    fixed_batch: bool = False
    #: compiles the tower, so that FP8's input quantization fuses into the op before each linear
    #: layer: "auto" weighs FP8 only on such a backend (encoders/precision.py)
    compiles: bool = False
    precisions: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8")
    #: what it needs beyond torch, for messages and docs
    needs: str = ""
    unavailable: Callable[[torch.device], str | None] = lambda device: None
    auto_rank: int | None = None
    #: the device types "auto" picks it on (None: any)
    auto_devices: tuple[str, ...] | None = ("cuda",)

    def runs(self, precision: str) -> bool:
        """Whether it runs ``precision`` ("auto" is any it runs)."""
        return precision == "auto" or precision in self.precisions
