"""Sampling strategies: truncation sets are respected, seeds reproduce, distributions are right."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlanything_jax.sampling.strategies import Greedy, Sampling, make_strategy

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
    """Hand-computed nucleus: most likely tokens until their mass reaches p."""
    probs = np.exp(logits_row / temperature - np.max(logits_row / temperature))
    probs /= probs.sum()
    order = np.argsort(-probs)
    chosen, mass = set(), 0.0
    for token in order:
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
    from rlanything_jax.sampling.strategies import categorical

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
