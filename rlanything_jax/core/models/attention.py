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


def _attention(q, k, v, mask):
    batch, q_len, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    grouped_q = q.reshape(batch, q_len, num_kv_heads, num_heads // num_kv_heads, head_dim)
    logits = jnp.einsum("bqkgd,bskd->bkgqs", grouped_q, k, preferred_element_type=jnp.float32)
    logits = logits * (head_dim ** -0.5)
    logits = jnp.where(mask[:, None, None, :, :], logits, _MASKED_LOGIT)
    weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    grouped_out = jnp.einsum("bkgqs,bskd->bqkgd", weights, v, preferred_element_type=jnp.float32).astype(v.dtype)
    return grouped_out.reshape(batch, q_len, num_heads, head_dim), (weights, grouped_out)


@jax.custom_vjp
def grouped_query_attention(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Softmax attention with kv heads shared by groups of query heads.

    q: [batch, query, heads, head_dim]; k, v: [batch, key, kv_heads, head_dim];
    mask: [batch, query, key] boolean. Returns [batch, query, heads, head_dim].
    Query head h uses kv head h // (heads // kv_heads), as in transformers' repeat_kv.
    """
    return _attention(q, k, v, mask)[0]


def _attention_fwd(q, k, v, mask):
    out, (weights, grouped_out) = _attention(q, k, v, mask)
    return out, (q, k, v, mask, weights, grouped_out)


def _attention_bwd(residuals, d_out):
    """The softmax backward in its row-sum form, d_logits = P * (dP - rowsum(dO * O)): two passes over
    the [query, key] scores fewer than autodiff's, and no gradient through the mask's select."""
    q, k, v, mask, weights, grouped_out = residuals
    batch, q_len, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    grouped = (batch, q_len, num_kv_heads, num_heads // num_kv_heads, head_dim)
    d_out = d_out.reshape(grouped)
    f32 = dict(preferred_element_type=jnp.float32)
    dv = jnp.einsum("bkgqs,bqkgd->bskd", weights, d_out, **f32)
    d_weights = jnp.einsum("bqkgd,bskd->bkgqs", d_out, v, **f32)
    row_sum = jnp.einsum("bqkgd,bqkgd->bkgq", d_out.astype(jnp.float32), grouped_out.astype(jnp.float32))
    # Fully masked rows (left-pad queries) get no gradient, as through the forward's select.
    d_logits = jnp.where(mask[:, None, None, :, :], weights * (d_weights - row_sum[..., None]), 0.0)
    d_logits = (d_logits * (head_dim ** -0.5)).astype(q.dtype)
    dq = jnp.einsum("bkgqs,bskd->bqkgd", d_logits, k, **f32).reshape(q.shape)
    dk = jnp.einsum("bkgqs,bqkgd->bskd", d_logits, q.reshape(grouped), **f32)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


grouped_query_attention.defvjp(_attention_fwd, _attention_bwd)
