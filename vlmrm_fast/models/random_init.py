"""Random weights for an architecture, from a generator local to the loading thread: no global RNG
is seeded and no logger level changes, so loads in several threads equal a lone load bit for bit."""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class RandomWeightsWarning(UserWarning):
    """A real architecture was created with random weights (fine for benchmarks, not for rewards)."""


class _LocalGenerator(TorchFunctionMode):
    """Gives every random draw made inside it that names no generator this one instead.

    torch's function-mode stack is per thread, so a model built inside draws its random
    weights from its own generator: the same weights for the same seed whatever other
    threads do meanwhile, and the global generator is neither read nor advanced. Module
    initializers (``nn.init.*``) are caught as they are called: once inside a handler,
    nested calls no longer pass through the mode.
    """

    _TENSOR_DRAWS = frozenset(
        {
            "uniform_",
            "normal_",
            "random_",
            "bernoulli_",
            "exponential_",
            "geometric_",
            "log_normal_",
            "cauchy_",
            "rand",
            "randn",
            "randint",
            "randperm",
            "normal",
            "bernoulli",
            "multinomial",
            "poisson",
            "rand_like",
            "randn_like",
            "randint_like",
        }
    )

    def __init__(self, generator: torch.Generator):
        super().__init__()
        self.generator = generator

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kwargs.get("generator") is None and self._draws(func):
            kwargs = {**kwargs, "generator": self.generator}
        return func(*args, **kwargs)

    @classmethod
    def _draws(cls, func: Any) -> bool:
        if getattr(func, "__module__", None) == "torch.nn.init":
            return "generator" in inspect.signature(func).parameters
        return getattr(func, "__name__", None) in cls._TENSOR_DRAWS


class _QuietRandomInit(logging.Filter):
    """Drops open_clip's "No pretrained weights loaded" record, in the thread building a model only.

    open_clip logs it through the root logger while we load weights next (or warn
    ourselves). Levels stay untouched; the filter is attached once and lets every other
    record (and every record of other threads) through.
    """

    _installed = False
    _lock = threading.Lock()
    _local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            getattr(self._local, "active", False) and record.getMessage().startswith("No pretrained weights loaded")
        )

    @classmethod
    @contextlib.contextmanager
    def active(cls):
        with cls._lock:
            if not cls._installed:
                logging.getLogger().addFilter(cls())
                cls._installed = True
        cls._local.active = True
        try:
            yield
        finally:
            cls._local.active = False


def create_model(name: str, *, device: torch.device, seed: int, quick_gelu: bool = False):
    import open_clip

    # Random weights (vlmrm-tiny, benchmarks) from a generator of our own: the same for a seed in any
    # process or thread, and the global torch generator untouched.
    with _QuietRandomInit.active(), _LocalGenerator(torch.Generator().manual_seed(seed)):
        return open_clip.create_model(name, pretrained=None, force_quick_gelu=quick_gelu, device="cpu")


def quiet_random_init():
    """A context in which open_clip's "No pretrained weights loaded" record of this thread is dropped."""
    return _QuietRandomInit.active()
