"""The train step's fast paths against the plain computation: the hand-written backward passes
(attention, projections, output layer) against autodiff of the textbook formulas, and the
last-positions and shared-prefix forwards against the full forward of whole rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.models.attention import causal_padding_mask, grouped_query_attention
from rlanything_jax.core.models.linear import linear
from rlanything_jax.core.models.lm_head import target_logprobs

RNG = np.random.default_rng(0)


def _normal(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def _textbook_attention(q, k, v, mask):
    """repeat_kv + softmax(q k^T / sqrt(d) masked) v, one head at a time in plain jnp."""
    group = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    scores = jnp.einsum("bqhd,bshd->bhqs", q, k) / np.sqrt(q.shape[-1])
    scores = jnp.where(mask[:, None], scores, -1e30)
    return jnp.einsum("bhqs,bshd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def _grads(fn, *args):
    """Gradients of a fixed random projection of fn's output (the same one for every fn of that shape)."""
    shape = jax.eval_shape(fn, *args).shape
    weights = jnp.asarray(np.random.default_rng(len(shape)).normal(size=shape), jnp.float32)
    return jax.grad(lambda *a: jnp.sum(fn(*a) * weights), argnums=tuple(range(len(args))))(*args)


def _assert_close(a, b, atol=2e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-4)


@pytest.mark.parametrize("q_len", [7, 3])   # 3: the last queries over 7 keys (a cache or a loss window)
def test_attention_backward_matches_autodiff(q_len):
    q, k, v = _normal(2, q_len, 4, 8), _normal(2, 7, 2, 8), _normal(2, 7, 2, 8)
    valid = np.ones((2, 7), np.int32)
    valid[1, :4] = 0   # a left-padded row: its first queries see no key at all
    mask = causal_padding_mask(jnp.asarray(valid))[:, 7 - q_len:]
    np.testing.assert_allclose(grouped_query_attention(q, k, v, mask), _textbook_attention(q, k, v, mask), atol=1e-6)
    ours = _grads(lambda q, k, v: grouped_query_attention(q, k, v, mask), q, k, v)
    textbook = _grads(lambda q, k, v: _textbook_attention(q, k, v, mask), q, k, v)
    _assert_close(ours, textbook)
    if q_len == 7:   # a fully masked query row gets no gradient (the forward's select blocks it)
        assert not np.asarray(ours[0])[1, :4].any()


def test_linear_backward_matches_autodiff():
    x, kernel = _normal(3, 5, 4, 6), _normal(4, 6, 9)   # two contracted input dims, as o_proj has
    np.testing.assert_allclose(linear(x, kernel, 2), jnp.einsum("btij,ijo->bto", x, kernel), atol=1e-5)
    _assert_close(_grads(lambda x, w: linear(x, w, 2), x, kernel),
                  _grads(lambda x, w: jnp.einsum("btij,ijo->bto", x, w), x, kernel))


@pytest.mark.parametrize("layout", ["ve", "ev"])
def test_target_logprobs_backward_matches_autodiff(layout):
    hidden, targets = _normal(2, 5, 8), jnp.asarray(RNG.integers(0, 11, (2, 5)))
    weight = _normal(11, 8) if layout == "ve" else _normal(8, 11)

    def textbook(h, w):
        logits = h @ (w.T if layout == "ve" else w)
        return jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1)[..., 0]

    np.testing.assert_allclose(target_logprobs(hidden, weight, targets, layout), textbook(hidden, weight), atol=1e-5)
    _assert_close(_grads(lambda h, w: target_logprobs(h, w, targets, layout), hidden, weight),
                  _grads(textbook, hidden, weight))


def test_hidden_states_of_the_last_positions_equal_the_full_forward():
    cfg = DecoderConfig(model_type="qwen3", vocab_size=50, hidden_size=16, intermediate_size=32, num_layers=3,
                        num_heads=4, num_kv_heads=2, head_dim=4, qk_norm=True)
    model = Decoder(cfg, rngs=nnx.Rngs(3))
    ids = jnp.asarray(RNG.integers(0, 50, (2, 9)), jnp.int32)
    valid = jnp.asarray([[1] * 9, [0, 0, 0] + [1] * 6], jnp.int32)
    full = model.hidden_states(ids, valid)
    np.testing.assert_allclose(model.hidden_states(ids, valid, last=4), full[:, -4:], atol=1e-5)
    with pytest.raises(ValueError, match="last must be in"):
        model.hidden_states(ids, valid, last=10)


def test_rows_after_shared_prefixes_equal_the_whole_rows():
    cfg = DecoderConfig(model_type="qwen2", vocab_size=50, hidden_size=16, intermediate_size=32, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=4, qkv_bias=True)
    model = Decoder(cfg, rngs=nnx.Rngs(4))
    prefix_ids = np.asarray(RNG.integers(1, 50, (2, 5)), np.int32)
    prefix_mask = np.array([[1] * 5, [0, 0, 1, 1, 1]], np.int32)            # the second prefix is left-padded
    rows = np.asarray(RNG.integers(1, 50, (3, 4)), np.int32)
    row_mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]], np.int32)  # a right-padded row
    index = np.array([1, 0, 1], np.int32)
    fast = model.hidden_states_after_prefixes(prefix_ids, prefix_mask, index, rows, row_mask)
    whole = model.hidden_states(np.concatenate([prefix_ids[index], rows], 1),
                                np.concatenate([prefix_mask[index], row_mask], 1))[:, 5:]
    valid = row_mask.astype(bool)
    np.testing.assert_allclose(np.asarray(fast)[valid], np.asarray(whole)[valid], atol=1e-5)
    last = model.hidden_states_after_prefixes(prefix_ids, prefix_mask, index, rows, row_mask, last=2)
    np.testing.assert_allclose(np.asarray(last)[valid[:, 2:]], np.asarray(whole[:, 2:])[valid[:, 2:]], atol=1e-5)
