"""The flash-style vision attention (images beyond one chunk) against torch's attention, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from rlanything_jax.models.qwen3_vl.vision import image_attention


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
