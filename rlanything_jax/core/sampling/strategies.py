"""Token selection strategies: small frozen objects, hashable so they can be jit statics.

A strategy maps float32 logits [batch, vocab] and a PRNG key to token ids [batch].
Anything with that `next_tokens` method and value semantics (a frozen dataclass)
plugs into the sampler.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp

_NEG_INF = -jnp.inf


def argmax_last_axis(x: jax.Array) -> jax.Array:
    """First index of the maximum over the last axis.

    Two plain reductions instead of jnp.argmax's (value, index) reduction, which XLA
    CPU runs as a scalar loop (about 10x slower over a 150k-token vocabulary).
    """
    size = x.shape[-1]
    best = jnp.max(x, axis=-1, keepdims=True)
    index = jnp.min(jnp.where(x == best, jnp.arange(size, dtype=jnp.int32), size), axis=-1)
    return jnp.minimum(index, size - 1)  # an all-NaN row has no maximum: take the last id


_BLOCK = 1024  # vocabularies above 4 blocks are sampled block first, then token within the block


def categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One sample per row of softmax(logits) [batch, vocab].

    Large vocabularies are sampled in two exact stages: a block of `_BLOCK` ids with
    probability equal to its total mass, then an id within the block. That draws
    Gumbel noise for ~vocab/1024 + 1024 values per row instead of vocab: random bits,
    not the model, dominate a small model's decode step on CPU otherwise.
    """
    batch, vocab = logits.shape
    if vocab <= 4 * _BLOCK:
        return argmax_last_axis(logits + jax.random.gumbel(key, logits.shape, logits.dtype))
    num_blocks = -(-vocab // _BLOCK)
    padded = jnp.pad(logits, ((0, 0), (0, num_blocks * _BLOCK - vocab)), constant_values=-jnp.inf)
    blocks = padded.reshape(batch, num_blocks, _BLOCK)
    peak = jnp.max(logits, axis=-1)[:, None, None]
    log_mass = jnp.log(jnp.sum(jnp.exp(blocks - peak), axis=-1))  # [batch, num_blocks], -inf when empty
    block_key, token_key = jax.random.split(key)
    block = argmax_last_axis(log_mass + jax.random.gumbel(block_key, log_mass.shape, logits.dtype))
    within = jnp.take_along_axis(blocks, block[:, None, None], axis=1)[:, 0]
    token = argmax_last_axis(within + jax.random.gumbel(token_key, within.shape, logits.dtype))
    return block * _BLOCK + token


def top_candidates(logits: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The k largest logits of each row [batch, vocab] and their ids, in decreasing order.

    Over a large vocabulary, first the k blocks of `_BLOCK` ids with the largest maxima (only they can hold
    a top-k id: each block whose maximum reaches the k-th largest logit holds a distinct such id), then the
    top k among their k x `_BLOCK` logits: exact, and XLA:CPU's top_k never sees the whole vocabulary.
    """
    batch, vocab = logits.shape
    if 4 * k * _BLOCK > vocab:
        return jax.lax.top_k(logits, min(k, vocab))
    num_blocks = -(-vocab // _BLOCK)
    blocks = jnp.pad(logits, ((0, 0), (0, num_blocks * _BLOCK - vocab)),
                     constant_values=-jnp.inf).reshape(batch, num_blocks, _BLOCK)
    _, best_blocks = jax.lax.top_k(jnp.max(blocks, axis=-1), k)
    candidates = jnp.take_along_axis(blocks, best_blocks[:, :, None], axis=1).reshape(batch, k * _BLOCK)
    values, index = jax.lax.top_k(candidates, k)
    ids = jnp.take_along_axis(best_blocks, index // _BLOCK, axis=1) * _BLOCK + index % _BLOCK
    return values, ids


_NUCLEUS_CANDIDATES = 64   # top-p alone: the nucleus is looked for among these first


def nucleus_mask(logits: jax.Array, top_p: float, iterations: int = 32) -> jax.Array:
    """Which ids of each row [batch, vocab] are in the nucleus: the most likely ids until their probability
    reaches top_p (an id is in when the mass of the ids more likely than it is below top_p).

    No sort of the vocabulary (a full sort of 151,936 logits takes ~270 ms for 8 rows on a 2-core CPU): the
    nucleus is {logit >= t} for the threshold t, found by bisection between the row's smallest and largest
    logit on the mass of the ids above it, one masked sum per step (32 steps reach adjacent floats).
    """
    probs = jax.nn.softmax(logits, axis=-1)
    finite = jnp.where(jnp.isfinite(logits), logits, jnp.inf)
    low = jnp.min(finite, axis=-1) - 1.0            # the mass above `low` is 1 >= top_p
    high = jnp.max(logits, axis=-1)                  # the mass above `high` is 0 < top_p

    def mass_above(t):
        return jnp.sum(jnp.where(logits > t[:, None], probs, 0.0), axis=-1)

    def halve(_, bounds):
        low, high = bounds
        middle = low + (high - low) / 2
        below = mass_above(middle) < top_p
        return jnp.where(below, low, middle), jnp.where(below, middle, high)

    low, high = jax.lax.fori_loop(0, iterations, halve, (low, high))
    # Ids at or above `high` have less than top_p above them; ids at or below `low` have at least top_p.
    return logits >= high[:, None]


class SamplingStrategy(Protocol):
    def next_tokens(self, logits: jax.Array, key: jax.Array) -> jax.Array: ...


@dataclasses.dataclass(frozen=True)
class Greedy:
    """The most likely token (ties go to the lowest id, as in transformers)."""

    def next_tokens(self, logits: jax.Array, key: jax.Array) -> jax.Array:
        del key
        return argmax_last_axis(logits).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Sampling at `temperature`, optionally truncated to the `top_k` most likely tokens
    and/or to the nucleus: the smallest set of most likely tokens whose probability
    (after temperature and top-k) reaches `top_p`."""

    temperature: float = 1.0
    top_k: int = 0      # 0 = no top-k truncation
    top_p: float = 1.0  # 1.0 = no nucleus truncation

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 for sampling (use Greedy for 0), got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def next_tokens(self, logits: jax.Array, key: jax.Array) -> jax.Array:
        logits = logits.astype(jnp.float32) / self.temperature
        vocab = logits.shape[-1]
        if self.top_k == 0 and self.top_p >= 1.0:
            return categorical(key, logits).astype(jnp.int32)
        if self.top_k == 0:
            return self._nucleus_only(logits, key)
        # Candidates sorted by decreasing logit: the top k.
        top_logits, top_ids = top_candidates(logits, min(self.top_k, vocab))
        if self.top_p < 1.0:
            top_logits = _truncate_sorted(top_logits, self.top_p)
        choice = categorical(key, top_logits)
        return jnp.take_along_axis(top_ids, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)

    def _nucleus_only(self, logits: jax.Array, key: jax.Array) -> jax.Array:
        """Top-p without top-k. When every row's nucleus lies within its `_NUCLEUS_CANDIDATES` most likely
        ids (the usual case for a trained model), it is read off those, sorted; else the threshold is
        bisected over the whole vocabulary (`nucleus_mask`)."""
        vocab = logits.shape[-1]
        if vocab <= _NUCLEUS_CANDIDATES:
            return categorical(key, jnp.where(nucleus_mask(logits, self.top_p), logits, _NEG_INF)).astype(jnp.int32)
        top_logits, top_ids = top_candidates(logits, _NUCLEUS_CANDIDATES)
        covered = jnp.sum(jnp.exp(top_logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)), axis=-1)

        def among_candidates(_):
            choice = categorical(key, _truncate_sorted(top_logits, self.top_p, logits))
            return jnp.take_along_axis(top_ids, choice[:, None], axis=-1)[:, 0]

        def whole_vocabulary(_):
            return categorical(key, jnp.where(nucleus_mask(logits, self.top_p), logits, _NEG_INF))

        # Strictly above top_p: the candidates then hold every id with less than top_p more likely than it.
        return jax.lax.cond(jnp.all(covered > self.top_p), among_candidates, whole_vocabulary,
                            None).astype(jnp.int32)


def _truncate_sorted(top_logits: jax.Array, top_p: float, all_logits: jax.Array | None = None) -> jax.Array:
    """Logits sorted in decreasing order, -inf past the nucleus (probabilities normalised over `all_logits`,
    by default the sorted ones themselves)."""
    total = jax.nn.logsumexp(top_logits if all_logits is None else all_logits, axis=-1, keepdims=True)
    probs = jnp.exp(top_logits - total)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    return jnp.where(mass_before < top_p, top_logits, _NEG_INF)


def make_strategy(temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0) -> SamplingStrategy:
    """Greedy at temperature 0, sampling otherwise."""
    if temperature == 0:
        return Greedy()
    return Sampling(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))
