"""Grouped-query attention as a pure function, shared by the full forward and the sampler."""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Finite stand-in for -inf: a fully masked row (a left-pad query) stays finite instead of NaN.
_MASKED_LOGIT = -1e30


def causal_padding_mask(attention_mask: jnp.ndarray) -> jnp.ndarray:
    """[batch, time] validity (1 = token, 0 = pad) -> [batch, query, key] boolean mask.

    A query attends to keys at or before its index that are real tokens; with left
    padding this is exactly the causal mask over the real tokens.
    """
    time = attention_mask.shape[-1]
    causal = jnp.tril(jnp.ones((time, time), dtype=jnp.bool_))
    return causal[None, :, :] & attention_mask.astype(jnp.bool_)[:, None, :]


def grouped_query_attention(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Softmax attention with kv heads shared by groups of query heads.

    q: [batch, query, heads, head_dim]; k, v: [batch, key, kv_heads, head_dim];
    mask: [batch, query, key] boolean. Returns [batch, query, heads, head_dim].
    Query head h uses kv head h // (heads // kv_heads), as in transformers' repeat_kv.
    """
    batch, q_len, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    grouped_q = q.reshape(batch, q_len, num_kv_heads, num_heads // num_kv_heads, head_dim)
    logits = jnp.einsum("bqkgd,bskd->bkgqs", grouped_q, k, preferred_element_type=jnp.float32)
    logits = logits * (head_dim ** -0.5)
    logits = jnp.where(mask[:, None, None, :, :], logits, _MASKED_LOGIT)
    weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgqs,bskd->bqkgd", weights, v, preferred_element_type=jnp.float32)
    return out.astype(v.dtype).reshape(batch, q_len, num_heads, head_dim)
