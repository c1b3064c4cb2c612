"""One check of a batch of actions, made before any simulation state is touched."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np


def check_actions(actions: Any, action_space: gymnasium.Space, num_envs: int) -> np.ndarray:
    """Validates a batch of actions before any simulation state is touched."""
    actions = np.asarray(actions)
    if actions.dtype.kind not in "biuf":
        kind = "integers" if isinstance(action_space, gymnasium.spaces.Discrete) else "numbers"
        found = type(actions.flat[0]).__name__ if actions.size else "no"
        raise TypeError(
            f"actions must be {kind}, an array of shape {(num_envs,) + tuple(action_space.shape)} for {num_envs} envs of "
            f"{action_space}; got dtype {actions.dtype} ({found} values)"
        )
    if isinstance(action_space, gymnasium.spaces.Discrete):
        if actions.shape not in ((num_envs,), (num_envs, 1)):
            raise ValueError(f"actions must have shape ({num_envs},) for {num_envs} envs, got {actions.shape}")
        if not np.issubdtype(actions.dtype, np.integer):
            if not np.all(np.isfinite(actions)) or np.any(actions != np.round(actions)):
                raise ValueError("discrete actions must be integers")
        flat = actions.reshape(num_envs).astype(np.int64)
        if np.any(flat < action_space.start) or np.any(flat >= action_space.start + action_space.n):
            raise ValueError(
                f"discrete actions must be in [{action_space.start}, {action_space.start + action_space.n})"
            )
        return flat
    expected = (num_envs,) + tuple(action_space.shape)
    if actions.shape != expected:
        raise ValueError(f"actions must have shape {expected} (num_envs x action dims), got {actions.shape}")
    if np.issubdtype(actions.dtype, np.floating) and not np.all(np.isfinite(actions)):
        bad = np.unique(np.nonzero(~np.isfinite(actions))[0])
        raise ValueError(f"actions contain NaN or inf (envs {bad.tolist()}); the environments were not stepped")
    return actions
