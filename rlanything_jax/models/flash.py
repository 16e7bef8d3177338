"""Flash-style attention in plain JAX: queries in chunks, each scanning key chunks with an online softmax.

Why: on a CPU, XLA's dense attention materialises [heads, query, key] float32 scores and passes
over them several times (mask, max, exp, sum, weights x values); at 3072 queries over a 10240-column
cache that is 126M scores per layer, far outside the caches, and it ran about 10x slower per score
than chunks of a few MB that stay in cache. Chunking also lets the causal cache attention stop at
the last key chunk its queries can see, and skip query chunks that are all left padding.

Both users share `online_softmax_update`: the vision tower's bidirectional per-image attention
(`qwen3_vl.vision.segment_attention`) and the sampler's prefill/extend over the KV cache
(`causal_window_attention` here).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Finite stand-in for -inf (as `attention._MASKED_LOGIT`): a chunk whose keys are all masked then gives
# exp(0) = 1 weights, which the first chunk with a real key rescales away by exp(-1e30 - max) = 0,
# instead of exp(-inf - -inf) = NaN.
MASKED_LOGIT = -1e30

Carry = tuple[jax.Array, jax.Array, jax.Array]   # running max [..., q], denominator [..., q], numerator [..., q, d]


def online_softmax_start(scores_shape: tuple[int, ...], head_dim: int) -> Carry:
    """The empty carry for scores of `scores_shape` [..., q] (the key axis left out)."""
    return (jnp.full(scores_shape, MASKED_LOGIT, jnp.float32), jnp.zeros(scores_shape, jnp.float32),
            jnp.zeros(scores_shape + (head_dim,), jnp.float32))


def online_softmax_update(carry: Carry, logits: jax.Array, values: jax.Array, weighted_sum: str) -> Carry:
    """Folds one key chunk into the carry. logits [..., q, k] float32 (already scaled and masked);
    `weighted_sum` is the einsum of weights [..., q, k] with this chunk's values into [..., q, d]."""
    running_max, denominator, numerator = carry
    new_max = jnp.maximum(running_max, logits.max(axis=-1))
    weights = jnp.exp(logits - new_max[..., None])
    rescale = jnp.exp(running_max - new_max)
    denominator = denominator * rescale + weights.sum(axis=-1)
    numerator = numerator * rescale[..., None] + jnp.einsum(
        weighted_sum, weights.astype(values.dtype), values, preferred_element_type=jnp.float32)
    return new_max, denominator, numerator


def online_softmax_finish(carry: Carry) -> jax.Array:
    """numerator / denominator [..., q, d] float32; 0 where nothing was folded in (a skipped query chunk)."""
    _, denominator, numerator = carry
    return numerator / jnp.where(denominator > 0, denominator, 1.0)[..., None]


def chunks(x: jax.Array, axis: int, size: int) -> jax.Array:
    """x padded with zeros along `axis` to a multiple of `size` and split there: [chunks, ...] first."""
    length = x.shape[axis]
    count = -(-length // size)
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, count * size - length)
    x = jnp.pad(x, widths)
    x = x.reshape(x.shape[:axis] + (count, size) + x.shape[axis + 1:])
    return jnp.moveaxis(x, axis, 0)


def causal_window_attention(q: jax.Array, k: jax.Array, v: jax.Array, key_valid: jax.Array,
                            query_columns: jax.Array, query_chunk: int = 128, key_chunk: int = 512) -> jax.Array:
    """What `attention.grouped_query_attention` computes with the mask key_valid[b, s] & (s <= query_columns[t]),
    for the queries that see at least one key (the others, left-pad queries, get finite values that
    nothing reads).

    q [B, T, H, D] (the new tokens, whose cache columns `query_columns` [T] increase); k, v [B, W, KV, D]
    (a window of the cache, new tokens written); key_valid [B, W] bool. Inference only: the key loop
    has a dynamic length (each query chunk stops at its last visible key chunk), so it has no reverse mode.
    """
    batch, length, heads, head_dim = q.shape
    window, kv_heads = k.shape[1], k.shape[2]
    groups = heads // kv_heads
    # Scaling the queries rather than every chunk's scores saves a pass over them.
    scaled = (q.astype(jnp.float32) * (head_dim ** -0.5)).astype(q.dtype)
    # Heads-major tiles ([B, KV, G, chunk, D] queries, [B, KV, chunk, D] keys and values), transposed once
    # here: each tile's matmuls are then plain batched dots, where the token-major layout made XLA
    # transpose inside the loop (about 2x slower per score on a CPU).
    grouped = jnp.moveaxis(scaled.reshape(batch, length, kv_heads, groups, head_dim), 1, 3)
    q_chunks = chunks(grouped, 3, query_chunk)
    # Padding queries get column -1: they see nothing, so a chunk of them is skipped.
    column_chunks = chunks(query_columns.astype(jnp.int32) + 1, 0, query_chunk) - 1
    k_chunks, v_chunks = chunks(jnp.moveaxis(k, 1, 2), 2, key_chunk), chunks(jnp.moveaxis(v, 1, 2), 2, key_chunk)
    valid_chunks = chunks(key_valid.astype(jnp.bool_), 1, key_chunk)   # padding keys are invalid
    key_offsets = jnp.arange(key_chunk)
    # A query sees a key chunk only if some of its rows has a valid key there at or before the query:
    # queries whose row has no valid column at or before them (left padding) see nothing.
    first_valid = jnp.min(jnp.where(key_valid, jnp.arange(window)[None, :], window), axis=1)   # [B]

    def one_query_chunk(chunk):
        q_chunk, columns = chunk
        sees_any = jnp.any(columns[None, :] >= first_valid[:, None])
        last_chunk = jnp.max(columns) // key_chunk
        num_key_chunks = jnp.where(sees_any, jnp.minimum(last_chunk + 1, k_chunks.shape[0]), 0)

        def fold(index, carry):
            k_block, v_block, valid = k_chunks[index], v_chunks[index], valid_chunks[index]
            logits = jnp.einsum("bkgqd,bksd->bkgqs", q_chunk, k_block, preferred_element_type=jnp.float32)
            visible = valid[:, None, :] & (index * key_chunk + key_offsets[None, None, :] <= columns[None, :, None])
            logits = jnp.where(visible[:, None, None], logits, MASKED_LOGIT)
            return online_softmax_update(carry, logits, v_block, "bkgqs,bksd->bkgqd")

        def over_keys(index, carry):
            # A chunk of earlier turns' left padding (no valid column in any row) adds nothing: skipped.
            return jax.lax.cond(jnp.any(valid_chunks[index]), fold, lambda _, c: c, index, carry)

        start = online_softmax_start((batch, kv_heads, groups, query_chunk), head_dim)
        out = online_softmax_finish(jax.lax.fori_loop(0, num_key_chunks, over_keys, start))
        return out.astype(v.dtype)   # [B, KV, G, Cq, D]

    out = jax.lax.map(one_query_chunk, (q_chunks, column_chunks))   # [chunks, B, KV, G, Cq, D]
    out = jnp.transpose(out, (1, 0, 4, 2, 3, 5)).reshape(batch, -1, heads, head_dim)
    return out[:, :length]
