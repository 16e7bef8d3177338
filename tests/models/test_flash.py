"""The flash-style cache attention of prefill/extend against the dense path it replaces (float32, 1e-5)."""

import jax
import jax.numpy as jnp
import numpy as np

from rlanything_jax.core.models.attention import grouped_query_attention
from rlanything_jax.core.models.attention_kernels import AttentionKernel
from rlanything_jax.core.models.flash import causal_window_attention
from rlanything_jax.core.sampling import decode as decode_lib


def _dense(q, k, v, key_valid, query_columns):
    window = k.shape[1]
    mask = key_valid[:, None, :] & (jnp.arange(window)[None, None, :] <= query_columns[None, :, None])
    return grouped_query_attention(q, k, v, mask)


def test_causal_window_attention_equals_the_dense_path():
    """An extend of 150 tokens (row 0 left-padded by 40, row 1 by 0) after a 161-column history with gaps
    (one a whole key chunk, which is skipped), over a 350-column window whose tail is unwritten: chunks of
    32 queries x 64 keys, both partial at the end, GQA with 3 query heads per kv head."""
    rng = np.random.default_rng(0)
    batch, new, heads, kv_heads, head_dim, history, window = 2, 150, 6, 2, 8, 161, 350
    q = rng.standard_normal((batch, new, heads, head_dim)).astype(np.float32)
    k, v = (rng.standard_normal((batch, window, kv_heads, head_dim)).astype(np.float32) for _ in range(2))
    valid = np.zeros((batch, window), bool)
    valid[:, :history + new] = True
    valid[0, 10:30] = False                 # an earlier turn's left padding
    valid[:, 64:128] = False                # a whole key chunk of it
    valid[1, :50] = False                   # a row that joined the conversation late
    valid[0, history:history + 40] = False  # this turn's left padding in row 0
    columns = history + np.arange(new)
    ours = jax.jit(lambda *a: causal_window_attention(*a, query_chunk=32, key_chunk=64))(q, k, v, valid, columns)
    expected = _dense(q, k, v, valid, columns)
    real = valid[:, history:history + new]   # left-pad queries' outputs are unspecified (nothing reads them)
    np.testing.assert_allclose(np.asarray(ours)[real], np.asarray(expected)[real], atol=1e-5, rtol=0)
    assert np.isfinite(np.asarray(ours)).all()


def test_a_chunk_of_queries_that_see_nothing_is_skipped_and_finite():
    """A row whose first valid column comes after some queries: those queries see no key at all."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 64, 2, 4)).astype(np.float32)
    k, v = (rng.standard_normal((1, 64, 2, 4)).astype(np.float32) for _ in range(2))
    valid = np.zeros((1, 64), bool)
    valid[0, 40:] = True
    columns = np.arange(64)
    ours = np.asarray(causal_window_attention(q, k, v, valid, columns, query_chunk=16, key_chunk=16))
    np.testing.assert_allclose(ours[0, 40:], np.asarray(_dense(q, k, v, valid, columns))[0, 40:], atol=1e-5)
    np.testing.assert_array_equal(ours[0, :32], 0.0)   # whole chunks of blind queries: skipped, zeros
    assert np.isfinite(ours).all()


def test_window_attention_under_chunked_equals_xla_over_the_same_cache():
    """`decode._window_attention` (what prefill and extend call per layer) under the chunked kernel equals
    the dense path on the same cache."""
    rng = np.random.default_rng(2)
    batch, new, heads, kv_heads, head_dim, window, start = 2, 200, 4, 2, 16, 512, 130
    q = jnp.asarray(rng.standard_normal((batch, new, heads, head_dim)), jnp.float32)
    cache_k, cache_v = (jnp.asarray(rng.standard_normal((batch, 1024, kv_heads, head_dim)), jnp.float32)
                        for _ in range(2))
    valid = np.zeros((batch, 1024), bool)
    valid[:, 5:start + new] = True
    valid[1, start:start + 60] = False
    write_index = jnp.asarray(start, jnp.int32)
    chunked, dense = (decode_lib._window_attention(q, cache_k[:, :window], cache_v[:, :window], jnp.asarray(valid),
                                                   write_index, window, AttentionKernel(name))
                      for name in ("chunked", "xla"))
    real = valid[:, start:start + new]
    np.testing.assert_allclose(np.asarray(chunked)[real], np.asarray(dense)[real], atol=1e-5, rtol=0)
