"""Sampling strategies: truncation sets are respected, seeds reproduce, distributions are right."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlanything_jax.core.sampling.strategies import Greedy, Sampling, make_strategy

VOCAB = 50


def _logits(seed: int, batch: int = 4) -> jnp.ndarray:
    return jax.random.normal(jax.random.key(seed), (batch, VOCAB)) * 3.0


def _draws(strategy, logits, n: int = 400) -> np.ndarray:
    keys = jax.random.split(jax.random.key(123), n)
    return np.asarray(jax.jit(jax.vmap(strategy.next_tokens, in_axes=(None, 0)))(logits, keys))  # [n, batch]


def test_greedy_is_argmax():
    logits = _logits(0)
    np.testing.assert_array_equal(Greedy().next_tokens(logits, None), np.argmax(np.asarray(logits), -1))


@pytest.mark.parametrize("k", [1, 3, 10])
def test_top_k_never_leaves_the_k_most_likely(k):
    logits = _logits(1)
    allowed = np.argsort(-np.asarray(logits), axis=-1)[:, :k]
    draws = _draws(Sampling(temperature=1.5, top_k=k), logits)
    for row in range(logits.shape[0]):
        assert set(draws[:, row]) <= set(allowed[row])
    if k > 1:
        assert all(len(set(draws[:, row])) > 1 for row in range(logits.shape[0]))


def _nucleus(logits_row: np.ndarray, p: float, temperature: float = 1.0) -> set[int]:
    """Hand-computed nucleus (float64): most likely tokens until their mass reaches p."""
    scaled = np.asarray(logits_row, np.float64) / temperature
    probs = np.exp(scaled - np.max(scaled))
    probs /= probs.sum()
    chosen, mass = set(), 0.0
    for token in np.argsort(-probs, kind="stable"):
        chosen.add(int(token))
        mass += probs[token]
        if mass >= p:
            break
    return chosen


@pytest.mark.parametrize("p,top_k", [(0.5, 0), (0.9, 0), (0.8, 5)])
def test_top_p_never_leaves_the_nucleus(p, top_k):
    logits = _logits(2)
    draws = _draws(Sampling(temperature=1.0, top_p=p, top_k=top_k), logits)
    for row in range(logits.shape[0]):
        row_logits = np.asarray(logits[row])
        if top_k:
            row_logits = np.where(row_logits >= np.sort(row_logits)[-top_k], row_logits, -np.inf)
        assert set(draws[:, row].tolist()) <= _nucleus(row_logits, p)


def test_a_fixed_seed_reproduces_and_another_differs():
    logits = _logits(3, batch=8)
    strategy = Sampling(temperature=1.0, top_p=0.95)
    a = strategy.next_tokens(logits, jax.random.key(7))
    b = strategy.next_tokens(logits, jax.random.key(7))
    c = strategy.next_tokens(logits, jax.random.key(8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_temperature_sampling_follows_the_softmax():
    logits = jnp.asarray([[2.0, 1.0, 0.0, -1.0]])
    draws = _draws(Sampling(temperature=2.0), logits, n=20000)[:, 0]
    expected = np.exp(np.asarray(logits[0]) / 2.0)
    expected /= expected.sum()
    observed = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(observed, expected, atol=0.015)


def test_make_strategy_and_validation():
    assert make_strategy(0.0) == Greedy()
    assert make_strategy(0.7, top_k=5, top_p=0.9) == Sampling(0.7, 5, 0.9)
    assert hash(Sampling(0.7, 5, 0.9)) == hash(Sampling(0.7, 5, 0.9))
    for bad in (dict(temperature=0.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            Sampling(**bad)


def test_large_vocabulary_sampling_follows_the_softmax():
    """Vocabularies over 4096 ids are sampled block first: the frequencies must still be softmax(logits)."""
    from rlanything_jax.core.sampling.strategies import categorical

    vocab, ids = 10_000, [3, 1500, 4096, 9999]
    logits = np.full(vocab, -5.0, np.float32)
    logits[ids] = [2.0, 1.0, 0.5, 1.5]
    expected = np.exp(logits - logits.max())
    expected /= expected.sum()
    draw = jax.jit(categorical)
    batch = jnp.asarray(np.tile(logits, (4096, 1)))
    counts = np.zeros(vocab)
    for seed in range(12):
        np.add.at(counts, np.asarray(draw(jax.random.key(seed), batch)), 1)
    frequencies = counts / counts.sum()
    # 49k draws: binomial standard errors are below 0.002 for these probabilities.
    np.testing.assert_allclose(frequencies[ids], expected[ids], atol=0.006)
    assert abs(frequencies.sum() - frequencies[ids].sum() - (1 - expected[ids].sum())) < 0.01
    assert counts[np.setdiff1d(np.arange(vocab), ids)].max() < 40   # no id is favoured


@pytest.mark.parametrize("k", [1, 4])
def test_top_candidates_over_a_large_vocabulary_are_lax_top_k(k):
    """Over 151,936 ids the k largest are found block first (4 x k x 1024 <= vocab); the same ids and values."""
    from rlanything_jax.core.sampling.strategies import top_candidates

    logits = jax.random.normal(jax.random.key(5), (6, 151_936)) * 2.0
    logits = logits.at[0, 151_935].set(50.0).at[1, :1024].set(30.0)   # the last, partial block; one full block
    values, ids = jax.jit(top_candidates, static_argnums=1)(logits, k)
    expected_values, expected_ids = jax.lax.top_k(logits, k)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(values, expected_values)


@pytest.mark.parametrize("peaked", [True, False], ids=["nucleus_in_64_candidates", "bisected_over_vocabulary"])
def test_top_p_alone_over_a_large_vocabulary_is_the_nucleus(peaked):
    """Top-p with no top-k over 20,000 ids: a peaked distribution takes the candidates' path, a flat one the
    bisection; both must sample inside the hand-computed nucleus and mark exactly it."""
    from rlanything_jax.core.sampling.strategies import nucleus_mask

    vocab, p = 20_000, 0.9
    logits = np.asarray(jax.random.normal(jax.random.key(6), (3, vocab)), np.float32) * 0.5
    if peaked:
        logits[:, [7, 9000, 19_999]] += [[14.0, 13.0, 12.5]]
    expected = [_nucleus(row, p) for row in logits]
    assert all((len(e) < 64) == peaked for e in expected)
    marked = np.asarray(jax.jit(nucleus_mask, static_argnums=1)(jnp.asarray(logits), p))
    for row in range(3):
        assert set(np.flatnonzero(marked[row]).tolist()) == expected[row]
    draws = _draws(Sampling(temperature=1.0, top_p=p), jnp.asarray(logits), n=200)
    for row in range(3):
        assert set(draws[:, row].tolist()) <= expected[row] and len(set(draws[:, row].tolist())) > 1
