"""Reading a published checkpoint file and saying, in one line, how it fails to fit a model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def read_state_dict(
    path: str | os.PathLike, model_name: str, *, wrapper_key: str | None = None
) -> dict[str, torch.Tensor]:
    """The tensors of a ``torch.save`` file (weights only: nothing in it runs as code); a file that
    wraps them in a dict under ``wrapper_key`` (the training code's ``{"model": ...}``) is unwrapped."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"checkpoint {str(path)!r} is a folder: give the weights file inside it")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        loaded: Any = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickled objects, a damaged or cut-short file
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"checkpoint {str(path)!r} could not be read as {model_name}'s weights ({reason}); it must be a "
            f"torch.save file of tensors: download or copy it again"
        ) from exc
    if wrapper_key is not None and isinstance(loaded, dict) and isinstance(loaded.get(wrapper_key), dict):
        loaded = loaded[wrapper_key]
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise ValueError(
            f"checkpoint {str(path)!r} is not a state dict of tensors ({type(loaded).__name__}); give "
            f"{model_name}'s published weights file"
        )
    return loaded


def mismatch_message(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], shown: int = 3) -> str:
    """'' when ``state`` has exactly the names and shapes of ``expected``; else what differs, briefly."""
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key{'s' * (len(missing) > 1)} ({_first(missing, shown)})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key{'s' * (len(unexpected) > 1)} ({_first(unexpected, shown)})")
    if not parts:
        wrong = [k for k in expected if tuple(state[k].shape) != tuple(expected[k].shape)]
        if wrong:
            k = wrong[0]
            more = f" and {len(wrong) - 1} more" if len(wrong) > 1 else ""
            parts.append(f"{k} has shape {tuple(state[k].shape)}, expected {tuple(expected[k].shape)}{more}")
    return ", ".join(parts)


def _first(keys: list[str], shown: int) -> str:
    return ", ".join(keys[:shown]) + (", ..." if len(keys) > shown else "")
