"""Policy advantages: group z-scores per step index (ALGORITHM.md 2.2)."""

from __future__ import annotations

import jax.numpy as jnp

from rlanything_jax.core.rl.normalize import masked_zscore

SINGLETON_MODES = ("raw", "zero")


def stepwise_group_advantages(rewards: jnp.ndarray, mask: jnp.ndarray, singleton: str = "raw") -> jnp.ndarray:
    """Advantages [..., G, T] from step rewards [..., G, T] of G rollouts of one task.

    For each step index t, the rewards of the rollouts that reach t (mask) are
    z-scored (population std; std <= 1e-8 gives 0). A step index reached by one
    rollout only keeps its raw reward (`singleton="raw"`, the reference) or gets 0
    (`"zero"`). Entries outside the mask are 0.
    """
    if singleton not in SINGLETON_MODES:
        raise ValueError(f"singleton must be one of {SINGLETON_MODES}, got {singleton!r}")
    mask = mask.astype(bool)
    rewards = jnp.asarray(rewards, jnp.float32)
    z = masked_zscore(rewards, mask, axis=-2)
    if singleton == "zero":
        return z
    alone = jnp.sum(mask, axis=-2, keepdims=True) == 1
    return jnp.where(mask & alone, rewards, z)
