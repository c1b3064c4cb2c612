r"""EPIC distance between reward functions (Gleave et al., 2020), and its state-only form.

EPIC compares rewards up to the transformations that never change the optimal
policy: positive scaling, constant shifts and potential shaping. Each reward is
first canonicalized over a coverage distribution, then the canonical rewards are
compared by Pearson distance.

Canonicalization, with ``S, S' ~ D_S`` and ``A ~ D_A`` drawn independently::

    C(R)(s, a, s') = R(s, a, s') + E[ gamma R(s', A, S') - R(s, A, S') - gamma R(S, A, S') ]

Pearson distance of two random variables::

    D_rho(X, Y) = sqrt((1 - rho(X, Y)) / 2)        in [0, 1]

    D_EPIC(R_a, R_b) = D_rho( C(R_a)(S, A, S'), C(R_b)(S, A, S') ),  (S, A, S') ~ D

Here ``D`` is the empirical distribution of the given transitions, ``D_S`` that of
their states and next states pooled, ``D_A`` that of their actions. The
expectations are Monte-Carlo estimates from ``M = n_samples`` seeded draws, made
once and shared by every transition and by both rewards::

    C^(R)(s, a, s') = R(s, a, s') + 1/M sum_j [ gamma R(s', a_j, s'_j) - R(s, a_j, s'_j) ]
                                  - gamma/M sum_j R(s_j, a'_j, s''_j)

Sharing the draws makes ``C^`` remove potential shaping ``gamma phi(s') - phi(s)``
exactly up to an additive constant, to which the Pearson distance is blind; so
shaped and affinely mapped rewards are at distance 0 up to rounding, not up to
Monte-Carlo error. The last term is the same for every transition: it moves the
canonical reward's mean and never the distance.

The state-only form (the paper's comparison with human labels): for rewards
``R(s')`` of the next state alone, ``C(R)(s, a, s') = R(s') + const``, so
``D_EPIC`` reduces to the Pearson distance of the reward and the labels over
the labelled states (:func:`state_epic_distance`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vlmrm_fast.checks import positive_int

RewardFn = Callable[[np.ndarray, np.ndarray, np.ndarray], Any]
DEFAULT_BATCH = 1 << 16


def pearson_distance(x: Any, y: Any) -> float:
    """``sqrt((1 - rho) / 2)`` of two equally long 1-D samples; 0 for rho = 1, 1 for rho = -1."""
    x = _vector(x, "x")
    y = _vector(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
    if x.shape[0] < 2:
        raise ValueError("the Pearson distance needs at least 2 samples")
    xc, yc = x - x.mean(), y - y.mean()
    nx, ny = np.sqrt(xc @ xc), np.sqrt(yc @ yc)
    for values, norm, name in ((x, nx, "x"), (y, ny, "y")):
        # Relative to the values' size: a constant plus rounding noise counts as constant.
        if not norm > 1e-10 * np.sqrt(values.shape[0]) * np.abs(values).max():
            raise ValueError(f"{name} is constant over the samples: its Pearson correlation is undefined")
    rho = float(np.clip((xc @ yc) / (nx * ny), -1.0, 1.0))
    return float(np.sqrt((1.0 - rho) / 2.0))


def state_epic_distance(rewards: Any, labels: Any) -> float | np.ndarray:
    """State-only EPIC: Pearson distance between rewards and labels over the labelled states.

    ``rewards`` (N,) or (N, K) for K rewards at once (e.g. one per alpha);
    ``labels`` (N,), NaN where a state is unlabelled (those states are left out).
    Returns a float, or (K,) distances.
    """
    labels = _vector(labels, "labels", allow_nan=True)
    values = np.asarray(_to_numpy(rewards), dtype=np.float64)
    single = values.ndim == 1
    if single:
        values = values[:, None]
    if values.ndim != 2 or values.shape[0] != labels.shape[0]:
        raise ValueError(f"rewards must be (N,) or (N, K) with N = {labels.shape[0]} labels, got shape {values.shape}")
    keep = ~np.isnan(labels)
    if keep.sum() < 2:
        raise ValueError(f"need at least 2 labelled states, got {int(keep.sum())}")
    if not np.isfinite(values[keep]).all():
        raise ValueError("rewards contain NaN or infinity at labelled states")
    out = np.array([pearson_distance(values[keep, k], labels[keep]) for k in range(values.shape[1])])
    return float(out[0]) if single else out


class Coverage:
    """The seeded Monte-Carlo draws of :func:`canonicalize`: pass one to several calls to share them."""

    def __init__(self, states: Any, actions: Any, next_states: Any, *, n_samples: int = 1024, seed: int = 0):
        self.states, self.actions, self.next_states = _transitions(states, actions, next_states)
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
            raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
        self.pool = np.concatenate([self.states, self.next_states])  # D_S: states and next states pooled
        rng = np.random.default_rng(seed)
        n_pool, n_actions = self.pool.shape[0], self.actions.shape[0]
        self.mean_actions = self.actions[rng.integers(0, n_actions, n_samples)]  # a_j
        self.mean_next = self.pool[rng.integers(0, n_pool, n_samples)]  # s'_j
        self.const_states = self.pool[rng.integers(0, n_pool, n_samples)]  # s_j
        self.const_actions = self.actions[rng.integers(0, n_actions, n_samples)]  # a'_j
        self.const_next = self.pool[rng.integers(0, n_pool, n_samples)]  # s''_j

    @property
    def n_samples(self) -> int:
        return self.mean_actions.shape[0]

    def __len__(self) -> int:
        return self.states.shape[0]


def canonicalize(
    reward: RewardFn, coverage: Coverage, *, gamma: float = 0.99, batch_size: int = DEFAULT_BATCH
) -> np.ndarray:
    """``C^(R)`` at every transition of ``coverage`` (see the module docstring), float64 (N,)."""
    gamma = _gamma(gamma)
    batch_size = positive_int(batch_size, "batch_size")
    c = coverage
    m = c.n_samples
    direct = _call_batched(reward, c.states, c.actions, c.next_states, batch_size)
    const = _call_batched(reward, c.const_states, c.const_actions, c.const_next, batch_size).mean()
    # E over (A, S') of gamma R(s', A, S') - R(s, A, S'), for `rows` transitions per call of rows * M.
    rows = max(1, batch_size // m)
    expected = np.empty(len(c))
    for start in range(0, len(c), rows):
        stop = min(start + rows, len(c))
        k = stop - start
        a = np.tile(c.mean_actions, (k,) + (1,) * (c.mean_actions.ndim - 1))
        s2 = np.tile(c.mean_next, (k,) + (1,) * (c.mean_next.ndim - 1))
        from_next = _call(reward, np.repeat(c.next_states[start:stop], m, axis=0), a, s2).reshape(k, m)
        from_here = _call(reward, np.repeat(c.states[start:stop], m, axis=0), a, s2).reshape(k, m)
        expected[start:stop] = (gamma * from_next - from_here).mean(axis=1)
    return direct + expected - gamma * const


def epic_distance(
    reward_a: RewardFn,
    reward_b: RewardFn,
    states: Any,
    actions: Any,
    next_states: Any,
    *,
    gamma: float = 0.99,
    n_samples: int = 1024,
    seed: int = 0,
    batch_size: int = DEFAULT_BATCH,
) -> float:
    """EPIC distance of two rewards over the given transitions (see the module docstring).

    Rewards are vectorized callables ``(s, a, s') -> r`` taking (B, ...) arrays and
    returning (B,) numbers (numpy or torch). ``states``, ``actions``,
    ``next_states`` are (N, ...) arrays of transitions: they are the distribution
    the distance is measured on and the pool the expectations draw from. Each
    reward is called on ``N + 2 N M + M`` transitions (``M = n_samples``), at most
    ``batch_size`` per call.
    """
    coverage = Coverage(states, actions, next_states, n_samples=n_samples, seed=seed)
    ca = canonicalize(reward_a, coverage, gamma=gamma, batch_size=batch_size)
    cb = canonicalize(reward_b, coverage, gamma=gamma, batch_size=batch_size)
    return pearson_distance(ca, cb)


# ---------------------------------------------------------------------------- helpers
def _to_numpy(value: Any) -> Any:
    if hasattr(value, "detach"):  # a torch tensor, possibly on a GPU
        return value.detach().cpu().numpy()
    return value


def _vector(value: Any, what: str, *, allow_nan: bool = False) -> np.ndarray:
    out = np.asarray(_to_numpy(value), dtype=np.float64)
    if out.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {out.shape}")
    bad = np.isinf(out) if allow_nan else ~np.isfinite(out)
    if bad.any():
        raise ValueError(f"{what} contains {'infinity' if allow_nan else 'NaN or infinity'}")
    return out


def _gamma(gamma: Any) -> float:
    gamma = float(gamma)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    return gamma


def _transitions(states: Any, actions: Any, next_states: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s, a, s2 = (np.asarray(_to_numpy(x)) for x in (states, actions, next_states))
    for x, name in ((s, "states"), (a, "actions"), (s2, "next_states")):
        if x.ndim == 0:
            raise ValueError(f"{name} must be an array of N transitions, got a scalar")
    if not s.shape[0] == a.shape[0] == s2.shape[0]:
        raise ValueError(
            f"states, actions and next_states must have the same length, got {s.shape[0]}, {a.shape[0]}, {s2.shape[0]}"
        )
    if s.shape != s2.shape:
        raise ValueError(f"states and next_states must have the same shape, got {s.shape} and {s2.shape}")
    if s.shape[0] < 2:
        raise ValueError("EPIC needs at least 2 transitions")
    return s, a, s2


def _call(reward: RewardFn, s: np.ndarray, a: np.ndarray, s2: np.ndarray) -> np.ndarray:
    out = np.asarray(_to_numpy(reward(s, a, s2)), dtype=np.float64)
    if out.size != s.shape[0]:
        raise ValueError(
            f"the reward returned shape {out.shape} for a batch of {s.shape[0]} transitions; it must return ({s.shape[0]},)"
        )
    out = out.reshape(-1)
    if not np.isfinite(out).all():
        raise ValueError("the reward returned NaN or infinity")
    return out


def _call_batched(reward: RewardFn, s: np.ndarray, a: np.ndarray, s2: np.ndarray, batch_size: int) -> np.ndarray:
    return np.concatenate(
        [
            _call(reward, s[i : i + batch_size], a[i : i + batch_size], s2[i : i + batch_size])
            for i in range(0, s.shape[0], batch_size)
        ]
    )
