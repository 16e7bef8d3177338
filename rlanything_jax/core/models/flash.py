"""Flash-style attention in plain JAX: queries in chunks, each scanning key chunks with an online softmax.

Why: on a CPU, XLA's dense attention materialises [heads, query, key] float32 scores and passes
over them several times (mask, max, exp, sum, weights x values); at 3072 queries over a 10240-column
cache that is 126M scores per layer, far outside the caches, and it ran about 10x slower per score
than chunks of a few MB that stay in cache. Chunking also lets the causal cache attention stop at
the last key chunk its queries can see, and skip query chunks that are all left padding.

Both users share `online_softmax_update`: the vision tower's bidirectional per-image attention
(`qwen3_vl.vision.segment_attention`) and the decoder's causal attention (`causal_window_attention`
here: the training forward, and the sampler's prefill/extend over the KV cache), which has its own
flash-style backward, so training never holds [query, key] scores either.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

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


class _Tiles(NamedTuple):
    """The chunked, heads-major operands of `causal_window_attention` (transposed once: each tile's matmuls
    are then plain batched dots, where the token-major layout made XLA transpose inside the loop, about 2x
    slower per score on a CPU)."""
    queries: jax.Array       # [Nq, B, KV, G, Cq, D], scaled by head_dim ** -0.5
    columns: jax.Array       # [Nq, Cq] int32: each query's cache column, -1 for chunk padding
    keys: jax.Array          # [Nk, B, KV, Ck, D]
    values: jax.Array        # [Nk, B, KV, Ck, D]
    key_valid: jax.Array     # [Nk, B, Ck] bool, False for chunk padding
    first_valid: jax.Array   # [B]: each row's first valid column (the window length if none)


def _grouped_chunks(x: jax.Array, kv_heads: int, query_chunk: int) -> jax.Array:
    """[B, T, H, D] -> [Nq, B, KV, G, Cq, D] (query head h is group h % G of kv head h // G)."""
    batch, length, heads, head_dim = x.shape
    grouped = jnp.moveaxis(x.reshape(batch, length, kv_heads, heads // kv_heads, head_dim), 1, 3)
    return chunks(grouped, 3, query_chunk)


def _ungroup(x: jax.Array, length: int) -> jax.Array:
    """[Nq, B, KV, G, Cq, D] -> [B, T, H, D], the inverse of `_grouped_chunks`."""
    batch, head_dim = x.shape[1], x.shape[-1]
    return jnp.transpose(x, (1, 0, 4, 2, 3, 5)).reshape(batch, -1, x.shape[2] * x.shape[3], head_dim)[:, :length]


def _tiles(q, k, v, key_valid, query_columns, query_chunk: int, key_chunk: int) -> _Tiles:
    head_dim, window = q.shape[-1], k.shape[1]
    # Scaling the queries rather than every chunk's scores saves a pass over them.
    scaled = (q.astype(jnp.float32) * (head_dim ** -0.5)).astype(q.dtype)
    key_valid = key_valid.astype(jnp.bool_)
    return _Tiles(
        queries=_grouped_chunks(scaled, k.shape[2], query_chunk),
        # Padding queries get column -1: they see nothing, so a chunk of them is skipped.
        columns=chunks(query_columns.astype(jnp.int32) + 1, 0, query_chunk) - 1,
        keys=chunks(jnp.moveaxis(k, 1, 2), 2, key_chunk), values=chunks(jnp.moveaxis(v, 1, 2), 2, key_chunk),
        key_valid=chunks(key_valid, 1, key_chunk),
        first_valid=jnp.min(jnp.where(key_valid, jnp.arange(window)[None, :], window), axis=1))


def _key_chunks_seen(tiles: _Tiles, columns: jax.Array) -> jax.Array:
    """How many key chunks a query chunk reads: up to its last column's, or none when no query of any row
    has a valid key at or before it (a chunk of left padding, or of chunk padding)."""
    key_chunk = tiles.keys.shape[3]
    sees_any = jnp.any(columns[None, :] >= tiles.first_valid[:, None])
    return jnp.where(sees_any, jnp.minimum(jnp.max(columns) // key_chunk + 1, tiles.keys.shape[0]), 0)


def _tile_logits(tiles: _Tiles, q_chunk: jax.Array, columns: jax.Array, index: jax.Array):
    """Masked logits [B, KV, G, Cq, Ck] float32 of one query chunk against key chunk `index`, and the mask."""
    key_chunk = tiles.keys.shape[3]
    logits = jnp.einsum("bkgqd,bksd->bkgqs", q_chunk, tiles.keys[index], preferred_element_type=jnp.float32)
    visible = tiles.key_valid[index][:, None, :] & (
        index * key_chunk + jnp.arange(key_chunk)[None, None, :] <= columns[None, :, None])
    visible = visible[:, None, None]
    return jnp.where(visible, logits, MASKED_LOGIT), visible


def _over_valid_key_chunks(tiles: _Tiles, count: jax.Array, fold, carry):
    """fold(index, carry) over the first `count` key chunks, skipping those with no valid key in any row
    (earlier turns' left padding): they add nothing."""
    def step(index, carry):
        return jax.lax.cond(jnp.any(tiles.key_valid[index]), fold, lambda _, c: c, index, carry)

    return jax.lax.fori_loop(0, count, step, carry)


def causal_window_attention(q: jax.Array, k: jax.Array, v: jax.Array, key_valid: jax.Array,
                            query_columns: jax.Array, query_chunk: int = 128, key_chunk: int = 512) -> jax.Array:
    """What `attention.grouped_query_attention` computes with the mask key_valid[b, s] & (s <= query_columns[t]),
    for the queries that see at least one key (the others, left-pad queries, get finite values that
    nothing reads, and no gradient).

    q [B, T, H, D] (the new tokens, whose key columns `query_columns` [T] increase); k, v [B, W, KV, D]
    (the keys: a window of the cache with the new tokens written, or the sequence itself in a full
    forward); key_valid [B, W] bool. Tiles are at most query_chunk x key_chunk, clipped to T x W: padding
    a 16-token prefill to a 128 x 512 tile made it 40x slower than dense on a CPU. Each query chunk stops
    at its last visible key chunk. Differentiable: the backward recomputes each tile's scores from the
    saved log-sum-exp (FlashAttention-2's), so training holds no [T, W] scores either.
    """
    query_chunk, key_chunk = max(1, min(query_chunk, q.shape[1])), max(1, min(key_chunk, k.shape[1]))
    return _causal_window_attention(q, k, v, key_valid, query_columns, query_chunk, key_chunk)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _causal_window_attention(q, k, v, key_valid, query_columns, query_chunk, key_chunk):
    return _forward(q, k, v, key_valid, query_columns, query_chunk, key_chunk)[0]


def _forward(q, k, v, key_valid, query_columns, query_chunk, key_chunk):
    tiles = _tiles(q, k, v, key_valid, query_columns, query_chunk, key_chunk)
    batch, kv_heads, groups = tiles.queries.shape[1:4]

    def one_query_chunk(chunk):
        q_chunk, columns = chunk

        def fold(index, carry):
            logits, _ = _tile_logits(tiles, q_chunk, columns, index)
            return online_softmax_update(carry, logits, tiles.values[index], "bkgqs,bksd->bkgqd")

        start = online_softmax_start((batch, kv_heads, groups, query_chunk), q.shape[-1])
        carry = _over_valid_key_chunks(tiles, _key_chunks_seen(tiles, columns), fold, start)
        running_max, denominator, _ = carry
        log_sum_exp = running_max + jnp.log(jnp.maximum(denominator, 1e-30))
        return online_softmax_finish(carry).astype(v.dtype), log_sum_exp

    out, log_sum_exp = jax.lax.map(one_query_chunk, (tiles.queries, tiles.columns))
    return _ungroup(out, q.shape[1]), (out, log_sum_exp)


def _forward_rule(q, k, v, key_valid, query_columns, query_chunk, key_chunk):
    out, (grouped_out, log_sum_exp) = _forward(q, k, v, key_valid, query_columns, query_chunk, key_chunk)
    return out, (q, k, v, key_valid, query_columns, grouped_out, log_sum_exp)


def _backward_rule(query_chunk, key_chunk, residuals, d_out):
    """Per query chunk, over the key chunks its forward read: p = exp(logits - lse) on visible keys,
    dV += p^T dO, dlogits = p * (dO V^T - rowsum(dO * O)), dQ += dlogits K, dK += dlogits^T Q."""
    q, k, v, key_valid, query_columns, grouped_out, log_sum_exp = residuals
    tiles = _tiles(q, k, v, key_valid, query_columns, query_chunk, key_chunk)
    d_out = _grouped_chunks(d_out.astype(v.dtype), k.shape[2], query_chunk)
    row_sums = jnp.einsum("...d,...d->...", d_out.astype(jnp.float32), grouped_out.astype(jnp.float32))
    f32 = dict(preferred_element_type=jnp.float32)

    def one_query_chunk(key_grads, chunk):
        q_chunk, columns, d_chunk, lse, row_sum = chunk

        def fold(index, carry):
            dq, dk, dv = carry
            logits, visible = _tile_logits(tiles, q_chunk, columns, index)
            weights = jnp.where(visible, jnp.exp(logits - lse[..., None]), 0.0)
            dv = dv.at[index].add(jnp.einsum("bkgqs,bkgqd->bksd", weights.astype(v.dtype), d_chunk, **f32))
            d_weights = jnp.einsum("bkgqd,bksd->bkgqs", d_chunk, tiles.values[index], **f32)
            d_logits = weights * (d_weights - row_sum[..., None])
            dq = dq + jnp.einsum("bkgqs,bksd->bkgqd", d_logits.astype(k.dtype), tiles.keys[index], **f32)
            dk = dk.at[index].add(jnp.einsum("bkgqs,bkgqd->bksd", d_logits.astype(q.dtype), q_chunk, **f32))
            return dq, dk, dv

        start = (jnp.zeros(q_chunk.shape, jnp.float32),) + key_grads
        dq, dk, dv = _over_valid_key_chunks(tiles, _key_chunks_seen(tiles, columns), fold, start)
        return (dk, dv), dq

    zeros = jnp.zeros(tiles.keys.shape, jnp.float32)
    (dk, dv), dq = jax.lax.scan(one_query_chunk, (zeros, zeros),
                                (tiles.queries, tiles.columns, d_out, log_sum_exp, row_sums))
    # The logits took the scaled queries: their gradient carries the scale once more.
    dq = _ungroup(dq * (q.shape[-1] ** -0.5), q.shape[1])

    def unchunk_keys(x):   # [Nk, B, KV, Ck, D] -> [B, W, KV, D]
        joined = jnp.moveaxis(x, 0, 2).reshape(x.shape[1], x.shape[2], -1, x.shape[-1])
        return jnp.moveaxis(joined, 1, 2)[:, :k.shape[1]]

    return dq.astype(q.dtype), unchunk_keys(dk).astype(k.dtype), unchunk_keys(dv).astype(v.dtype), None, None


_causal_window_attention.defvjp(_forward_rule, _backward_rule)
