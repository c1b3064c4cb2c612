"""What a judge keeps of each env's episode on the device, between steps: rows of per-env slots, reset with
the episode, never holding two episodes' frames.

- :class:`EpisodeRing`: per env, the items of the last ``slots`` frames of its episode (a window judge's
  frames' vision tokens, or the frames a Qwen video groups with the newest). Frame ``i`` of an episode lies
  in slot ``i % slots``; a read ``age`` frames back from the newest, past the episode's first frame, reads
  the first frame (it stands in for the frames before it, as a streamed window's does), so no read reaches
  a frame the episode did not draw.
- :class:`PrefixCache`: per env, the keys and values of a prompt's prefix (its head and the episode's kept
  frames) in every layer of a language model, ``capacity`` token slots each, and how many of them the
  episode fills. A step's forward writes its tokens after the env's prefix and attends to the prefix and to
  themselves; the slots after the prefix are scratch (the next step overwrites them), so the question's
  tokens are never kept. :meth:`PrefixCache.step` gives that forward's transformers ``Cache`` and, around
  the forward, the language model's attention (:func:`prefix_attention`): the envs grouped by prefix
  length, each group one SDPA call whose causal bias is aligned to the lower right (the step's tokens are
  the last of the group's keys), with the model's grouped key heads as they are. transformers' own SDPA
  path would take a mask of every env's slots (B x tokens x slots, built each step, which keeps the fused
  kernels out) and copy each layer's cached keys once per query head of a group (``repeat_kv``).

Which envs a step touches and where is host bookkeeping (small index arrays); the items and keys stay on
the device.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


def _index(values: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(values), dtype=torch.long, device=device)


def _rows(values: np.ndarray, device: torch.device) -> slice | torch.Tensor:
    """Rows ``values`` (ascending) as a slice where they are one run (a view of a tensor's rows, nothing copied),
    else as an index."""
    if len(values) and int(values[-1]) - int(values[0]) == len(values) - 1 and bool((np.diff(values) == 1).all()):
        return slice(int(values[0]), int(values[-1]) + 1)
    return _index(values, device)


def _take(tensor: torch.Tensor, rows: slice | torch.Tensor) -> torch.Tensor:
    return tensor[rows] if isinstance(rows, slice) else tensor.index_select(0, rows)


class EpisodeRing:
    """Per env, items of shape ``shape`` of the last ``slots`` frames of its episode (see the module docstring)."""

    def __init__(self, num_envs: int, slots: int, shape: Sequence[int], dtype: torch.dtype, device: torch.device):
        self.slots = int(slots)
        self.device = torch.device(device)
        self.items = torch.empty((int(num_envs), self.slots, *shape), dtype=dtype, device=self.device)
        self.count = np.zeros(int(num_envs), dtype=np.int64)  # frames of its current episode each env has written

    @property
    def nbytes(self) -> int:
        return self.items.numel() * self.items.element_size()

    def append(self, envs: np.ndarray, items: torch.Tensor, starts: np.ndarray) -> None:
        """Each of ``envs``' newest frame's item (``items`` (B, *shape)); ``starts``: that frame is the first of a
        new episode (the env's count starts again)."""
        self.count[envs[starts]] = 0
        slots = self.count[envs] % self.slots
        self.items[_index(envs, self.device), _index(slots, self.device)] = items.to(self.items.dtype)
        self.count[envs] += 1

    def read_back(self, envs: np.ndarray, ages: Sequence[int]) -> torch.Tensor:
        """The items (B, len(ages), *shape) of ``envs``' frames ``ages`` back from their newest (0: the newest), the
        episode's first frame for those before it. An age must be below ``slots``."""
        back = np.asarray(ages, dtype=np.int64)
        assert back.size == 0 or int(back.max()) < self.slots, "a ring holds `slots` frames back"
        frames = np.maximum(self.count[envs][:, None] - 1 - back[None, :], 0)
        slots = frames % self.slots
        return self.items[_index(envs, self.device)[:, None], _index(slots, self.device)]


def kv_bytes_per_token(text_config: Any, itemsize: int) -> int:
    """The keys and values one token keeps in every layer of a language model of ``text_config``."""
    heads = int(text_config.num_attention_heads)
    kv_heads = int(getattr(text_config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text_config, "head_dim", None) or text_config.hidden_size // heads)
    return int(text_config.num_hidden_layers) * 2 * kv_heads * head_dim * itemsize


class PrefixCache:
    """Per env, a language model's keys and values of ``capacity`` token slots in every layer, and ``length``: how
    many slots hold the env's prefix (see the module docstring). ``layers`` (keys, values) of shape (num_envs,
    kv_heads, capacity, head_dim)."""

    def __init__(self, num_envs: int, capacity: int, text_config: Any, dtype: torch.dtype, device: torch.device):
        heads = int(text_config.num_attention_heads)
        kv_heads = int(getattr(text_config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(text_config, "head_dim", None) or text_config.hidden_size // heads)
        self.device = torch.device(device)
        self.capacity = int(capacity)
        shape = (int(num_envs), kv_heads, self.capacity, head_dim)
        self.layers = [
            (torch.zeros(shape, dtype=dtype, device=self.device), torch.zeros(shape, dtype=dtype, device=self.device))
            for _ in range(int(text_config.num_hidden_layers))
        ]
        self.length = np.zeros(int(num_envs), dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.layers)

    def set_prefix(self, envs: np.ndarray, keys_values: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Starts ``envs``' prefixes again with the same keys and values (per layer (1, kv_heads, a, head_dim)): a
        new episode's prompt head."""
        rows = _index(envs, self.device)
        for (keys, values), (k, v) in zip(self.layers, keys_values):
            a = k.shape[2]
            keys[rows, :, :a] = k.expand(len(envs), -1, -1, -1)
            values[rows, :, :a] = v.expand(len(envs), -1, -1, -1)
        self.length[envs] = keys_values[0][0].shape[2] if keys_values else 0

    @contextlib.contextmanager
    def step(self, model: Any, envs: np.ndarray, offsets: np.ndarray, new: int) -> Iterator[dict[str, Any]]:
        """Around one forward of ``model`` over ``new`` tokens for each of ``envs``, written from slot ``offsets`` (B,)
        on (each env's own): the forward's keyword arguments (``cache``, and an ``attention_mask`` that only stops
        transformers from building one), while the language model attends with :func:`prefix_attention`."""
        end = int(offsets.max()) + new
        if end > self.capacity:
            raise RuntimeError(f"a prefix of {end} tokens passes the cache's {self.capacity} slots")
        rows = _index(envs, self.device)
        slots = _index(offsets, self.device)[:, None] + torch.arange(new, device=self.device)[None, :]  # (B, new)
        groups = []
        for offset in np.unique(offsets):
            members = np.flatnonzero(offsets == offset)
            batch = None if len(members) == len(envs) else _rows(members, self.device)
            groups.append((batch, _rows(envs[members], self.device), int(offset) + new))
        _register_prefix_attention()
        config = model.get_decoder().config
        before = config._attn_implementation_internal
        config._attn_implementation_internal = PREFIX_ATTENTION
        token = _GROUPS.set(groups)
        try:
            yield {
                "cache": _StepCache(self, rows, slots, end),
                "attention_mask": torch.ones((len(envs), 1, 1, 1), dtype=torch.bool, device=self.device),
            }
        finally:
            config._attn_implementation_internal = before
            _GROUPS.reset(token)


#: The language model's attention while a :class:`PrefixCache` steps (transformers' attention interface name).
PREFIX_ATTENTION = "vlmrm_prefix"
#: The envs of a step grouped by prefix length: (their rows of the step's batch, None for all; their rows of the
#: cache, every env's; their keys' end). Rows that are one run are slices: views, nothing copied.
_GROUPS: contextvars.ContextVar[list[tuple[slice | torch.Tensor | None, slice | torch.Tensor, int]] | None] = (
    contextvars.ContextVar("prefix_groups", default=None)
)
_REGISTERED = False


def _register_prefix_attention() -> None:
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface

        AttentionInterface.register(PREFIX_ATTENTION, prefix_attention)
        _REGISTERED = True


def prefix_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """A step's tokens (query (B, heads, q, dim)) attending to their env's prefix and to themselves up to each one, in
    the cache's keys (num_envs, kv_heads, end, dim) that hold each env's prefix and then the step's tokens: per group
    of envs of one prefix length, the group's rows of the keys up to the group's end (a view where its envs are one
    run of rows: a step whose envs all step together copies no key) with a causal bias aligned to their lower
    right."""
    from torch.nn.attention.bias import causal_lower_right

    groups = _GROUPS.get()
    assert groups is not None, "prefix attention runs inside PrefixCache.step"
    q = query.shape[2]
    grouped = query.shape[1] != key.shape[1]
    out = query if len(groups) == 1 else torch.empty_like(query)
    for batch, rows, end in groups:
        part = query if batch is None else _take(query, batch)
        k, v = _take(key[:, :, :end], rows), _take(value[:, :, :end], rows)
        result = F.scaled_dot_product_attention(
            part, k, v, attn_mask=causal_lower_right(q, end), scale=scaling, enable_gqa=grouped
        )
        if batch is None:
            out = result
        elif isinstance(batch, slice):
            out[batch] = result
        else:
            out.index_copy_(0, batch, result)
    return out.transpose(1, 2).contiguous(), None


def _step_cache_class() -> type:
    from transformers.cache_utils import Cache, CacheLayerMixin

    class StepLayer(CacheLayerMixin):
        """One layer of a :class:`PrefixCache` for one forward: writes the step's keys and values at each env's own
        slots and gives the attention every env's slots up to the last one written, as a view (the attention takes
        each group's rows of it)."""

        is_compileable = False

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, step: Any):
            super().__init__()
            self.store, self.store_values, self.step = keys, values, step
            self.is_initialized = True

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            pass

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            step = self.step
            env = step.rows[:, None]
            self.store[env, :, step.slots] = key_states.transpose(1, 2).to(self.store.dtype)
            self.store_values[env, :, step.slots] = value_states.transpose(1, 2).to(self.store.dtype)
            return self.store[:, :, : step.end], self.store_values[:, :, : step.end]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.step.end, 0

        def get_seq_length(self) -> int:
            return self.step.end - self.step.slots.shape[1]

        def get_max_length(self) -> int:
            return self.store.shape[2]

    class StepCache(Cache):
        def __init__(self, cache: PrefixCache, rows: torch.Tensor, slots: torch.Tensor, end: int):
            self.rows, self.slots, self.end = rows, slots, end
            super().__init__(layers=[StepLayer(k, v, self) for k, v in cache.layers])

    return StepCache


_STEP_CACHE: type | None = None


def _StepCache(*args: Any) -> Any:
    global _STEP_CACHE
    if _STEP_CACHE is None:  # transformers is imported on first use, as by every judge module
        _STEP_CACHE = _step_cache_class()
    return _STEP_CACHE(*args)
