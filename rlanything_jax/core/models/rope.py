"""Rotary position embeddings (the "rotate half" layout Llama and Qwen use).

Inverse frequencies are computed once on the host in float32, the way transformers
computes them, so that the two implementations agree to the last bits.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from rlanything_jax.core.models.model_config import RopeConfig


def _base_inv_freq(theta: float, head_dim: int) -> np.ndarray:
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    return (1.0 / (np.float32(theta) ** exponents)).astype(np.float32)


def _llama3_inv_freq(rope: RopeConfig, inv_freq: np.ndarray) -> np.ndarray:
    old_context = rope.original_max_position_embeddings
    assert old_context is not None   # rope_from_hf sets it for llama3 and yarn
    low_freq_wavelen = old_context / rope.low_freq_factor
    high_freq_wavelen = old_context / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = (old_context / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(rope: RopeConfig, head_dim: int) -> tuple[np.ndarray, float]:
    if rope.attention_factor is not None:
        attention_factor = rope.attention_factor
    elif rope.mscale and rope.mscale_all_dim:
        attention_factor = _yarn_mscale(rope.factor, rope.mscale) / _yarn_mscale(rope.factor, rope.mscale_all_dim)
    else:
        attention_factor = _yarn_mscale(rope.factor)
    old_context = rope.original_max_position_embeddings
    assert old_context is not None   # rope_from_hf sets it for llama3 and yarn

    def correction_dim(num_rotations: float) -> float:
        return (head_dim * math.log(old_context / (num_rotations * 2 * math.pi))) / (
            2 * math.log(rope.theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoids a division by zero in the ramp
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation_weight = 1 - ramp
    pos_freqs = np.float32(rope.theta) ** (np.arange(0, head_dim, 2).astype(np.float32) / np.float32(head_dim))
    inv_extrapolation = 1.0 / pos_freqs
    inv_interpolation = 1.0 / (np.float32(rope.factor) * pos_freqs)
    inv_freq = inv_interpolation * (1 - extrapolation_weight) + inv_extrapolation * extrapolation_weight
    return inv_freq.astype(np.float32), float(attention_factor)


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> tuple[np.ndarray, float]:
    """Returns (inv_freq [head_dim // 2] float32, attention scaling applied to cos and sin)."""
    if rope.type == "default":
        return _base_inv_freq(rope.theta, head_dim), 1.0
    if rope.type == "linear":
        return (_base_inv_freq(rope.theta, head_dim) / np.float32(rope.factor)).astype(np.float32), 1.0
    if rope.type == "llama3":
        return _llama3_inv_freq(rope, _base_inv_freq(rope.theta, head_dim)), 1.0
    if rope.type == "yarn":
        return _yarn_inv_freq(rope, head_dim)
    raise ValueError(f"unsupported rope type {rope.type!r}")


def rope_cos_sin(positions: jnp.ndarray, inv_freq: np.ndarray, scaling: float) -> tuple[jnp.ndarray, jnp.ndarray]:
    """cos, sin of shape [batch, time, head_dim] in float32 for integer positions [batch, time]."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)[None, None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles) * scaling, jnp.sin(angles) * scaling


def apply_rope(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
    """Rotates x [batch, time, heads, head_dim] by the angles in cos/sin [batch, time, head_dim]."""
    half = x.shape[-1] // 2
    rotated_half = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos = cos[:, :, None, :].astype(x.dtype)
    sin = sin[:, :, None, :].astype(x.dtype)
    return x * cos + rotated_half * sin
