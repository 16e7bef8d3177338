"""`linear(x, kernel, num_in_dims)`: the projection matmul, with the kernel gradient written input-first.

JAX's transpose rule computes a kernel's gradient as dot(dy, x) over the token dims and
then transposes; XLA:CPU lays that out by transposing dy, the larger operand when a
layer widens (MLP up/gate: [tokens, mlp] vs [tokens, embed]). Writing dot(x, dy) lets
it keep dy row-major. The values are the same; on the tiny Qwen3 of bench/train_step.py
the two SwiGLU transposes took about 20 ms of a 250 ms train step.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp


def _forward(x: jax.Array, kernel: jax.Array, num_in_dims: int) -> jax.Array:
    contract = (tuple(range(x.ndim - num_in_dims, x.ndim)), tuple(range(num_in_dims)))
    # float32 accumulation: exact for float32, and CPUs' fast bfloat16 kernels need it.
    return jax.lax.dot_general(x, kernel, (contract, ((), ())), preferred_element_type=jnp.float32)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def linear(x: jax.Array, kernel: jax.Array, num_in_dims: int) -> jax.Array:
    """x [..., *in] . kernel [*in, *out] -> float32 [..., *out] (x and kernel in one dtype)."""
    return _forward(x, kernel, num_in_dims)


def _fwd(x, kernel, num_in_dims):
    return _forward(x, kernel, num_in_dims), (x, kernel)


def _bwd(num_in_dims, residuals, g):
    x, kernel = residuals
    batch_dims = x.ndim - num_in_dims
    g = g.astype(x.dtype)
    out_of_g = tuple(range(batch_dims, g.ndim))
    out_of_kernel = tuple(range(num_in_dims, kernel.ndim))
    dx = jax.lax.dot_general(g, kernel, ((out_of_g, out_of_kernel), ((), ())), preferred_element_type=jnp.float32)
    leading = tuple(range(batch_dims))
    dkernel = jax.lax.dot_general(x, g, ((leading, leading), ((), ())), preferred_element_type=jnp.float32)
    return dx.astype(x.dtype), dkernel.astype(kernel.dtype)


linear.defvjp(_fwd, _bwd)
