"""Masked z-scores, the normalisation every RLAnything advantage uses."""

from __future__ import annotations

import jax.numpy as jnp

# A group whose population std is at most this gets zero advantages (the reference's rule).
MIN_STD = 1e-8


def masked_zscore(values: jnp.ndarray, mask: jnp.ndarray, axis: int) -> jnp.ndarray:
    """(x - mean) / std over the masked entries along `axis` (population std).

    Groups with std <= MIN_STD, or with fewer than two members, give 0; masked-out entries give 0.
    """
    mask = mask.astype(bool)
    values = jnp.asarray(values, jnp.float32)
    count = jnp.sum(mask, axis=axis, keepdims=True)
    safe_count = jnp.maximum(count, 1)
    mean = jnp.sum(jnp.where(mask, values, 0.0), axis=axis, keepdims=True) / safe_count
    variance = jnp.sum(jnp.where(mask, (values - mean) ** 2, 0.0), axis=axis, keepdims=True) / safe_count
    std = jnp.sqrt(variance)
    usable = (std > MIN_STD) & (count >= 2)
    z = (values - mean) / jnp.where(usable, std, 1.0)
    return jnp.where(mask & usable, z, 0.0)
