"""The interface every CLIP image-tower backend implements."""

from __future__ import annotations

import abc

import torch

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_precision(precision: str, device: torch.device) -> torch.dtype:
    """The dtype of a plain precision; "auto": bf16 on GPUs that have it (fp16 otherwise), fp32 on the CPU.

    (FP8 and "auto"'s FP8 choice: :mod:`vlmrm_fast.encoders.precision`.)"""
    if precision == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision not in PRECISIONS:
        hint = "; FP8 runs through the torch and compile backends" if precision == "fp8" else ""
        raise ValueError(
            f"precision {precision!r} is unknown here; use 'auto', {', '.join(map(repr, PRECISIONS))}{hint}"
        )
    if device.type == "cpu" and precision != "fp32":
        raise ValueError(
            f"precision={precision!r} on the CPU is not supported; use 'fp32' (or 'auto'), in a training "
            "config reward.precision (configs/paper pins the paper's fp16, for GPUs)"
        )
    return PRECISIONS[precision]


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
        precision = getattr(self, "precision", None) or str(self.input_dtype).replace("torch.", "")
        return f"{self.backend} ({precision}, {batch}, {self.device})"
