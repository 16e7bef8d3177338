"""The flash-style vision attention (images beyond one chunk) against torch's attention, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from rlanything_jax.core.models.qwen3_vl.vision import image_attention, segment_attention


def test_blocked_attention_and_its_gradients_equal_torch():
    rng = np.random.default_rng(0)
    q, k, v, upstream = (rng.standard_normal((300, 3, 8)).astype(np.float32) for _ in range(4))

    def loss(q, k, v):   # 300 patches: five chunks of 64 queries, three of 128 keys, the last ones partial
        return jnp.sum(image_attention(q, k, v, query_chunk=64, key_chunk=128) * upstream)

    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)
    tq, tk, tv = (torch.tensor(x.transpose(1, 0, 2)[None], requires_grad=True) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)[0].transpose(0, 1)
    expected = (out * torch.tensor(upstream)).sum()
    expected.backward()
    np.testing.assert_allclose(float(value), expected.item(), rtol=1e-5)
    forward = jax.jit(lambda q, k, v: image_attention(q, k, v, query_chunk=64, key_chunk=128))
    np.testing.assert_allclose(np.asarray(forward(q, k, v)), out.detach().numpy(), atol=1e-5)
    for ours, theirs in zip(grads, (tq, tk, tv)):
        np.testing.assert_allclose(np.asarray(ours), theirs.grad[0].transpose(0, 1).numpy(), atol=1e-5)


def test_packed_images_attend_only_within_their_own_image():
    """Three images of 150, 70 and 80 patches packed into one run (plus 20 padding patches, a segment of
    their own): tiles inside one image skip the mask, tiles across a boundary or over chunk padding keep it."""
    rng = np.random.default_rng(1)
    sizes = (150, 70, 80, 20)
    q, k, v = (rng.standard_normal((sum(sizes), 2, 8)).astype(np.float32) for _ in range(3))
    segments = np.repeat(np.arange(len(sizes)), sizes)
    valid = segments < 3
    out = jax.jit(lambda q, k, v: segment_attention(q, k, v, segments, valid, query_chunk=32, key_chunk=64))(q, k, v)
    start = 0
    for size in sizes[:3]:
        part = slice(start, start + size)
        tq, tk, tv = (torch.tensor(x[part].transpose(1, 0, 2)[None]) for x in (q, k, v))
        expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)[0].transpose(0, 1).numpy()
        np.testing.assert_allclose(np.asarray(out[part]), expected, atol=1e-5)
        start += size
