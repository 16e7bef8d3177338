"""Log-probabilities of given next tokens through the output layer, with a fused backward.

`target_logprobs(hidden, weight, targets)` = log_softmax(hidden @ W)[target], float32.
Autodiff of log_softmax + take_along_axis builds its gradient through a zero
[N, T, vocab] buffer and a scatter, then a separate pass for the softmax term; the
custom VJP writes the logits' gradient g * (onehot(target) - softmax) in one
elementwise pass over the probabilities kept from the forward (no second exp).
Same values, fewer passes over the largest array of a train step.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

# weight_layout: "ve" for a [vocab, embed] matrix (a tied embedding), "ev" for [embed, vocab] (an lm_head kernel).
_LOGITS = {"ve": "bte,ve->btv", "ev": "bte,ev->btv"}
_HIDDEN_GRAD = {"ve": "btv,ve->bte", "ev": "btv,ev->bte"}
# [embed, vocab] first for both layouts: the large dlogits then stays in its row-major layout and
# only the small [embed, vocab] product is transposed (XLA:CPU otherwise transposes dlogits).
_WEIGHT_GRAD = "bte,btv->ev"


def _logits(hidden: jax.Array, weight: jax.Array, layout: str) -> jax.Array:
    return jnp.einsum(_LOGITS[layout], hidden, weight.astype(hidden.dtype), preferred_element_type=jnp.float32)


def _forward(hidden, weight, targets, layout):
    logits = _logits(hidden, weight, layout)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - lse, logits, lse


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def _target_logprobs(hidden, weight, targets, layout):
    return _forward(hidden, weight, targets, layout)[0]


def _fwd(hidden, weight, targets, layout):
    logp, logits, lse = _forward(hidden, weight, targets, layout)
    return logp, (hidden, weight, targets, jnp.exp(logits - lse[..., None]))


def _bwd(layout, residuals, g):
    hidden, weight, targets, probs = residuals
    vocab = jax.lax.broadcasted_iota(jnp.int32, probs.shape, probs.ndim - 1)
    onehot = (vocab == targets[..., None]).astype(jnp.float32)
    dlogits = g[..., None] * (onehot - probs)
    dhidden = jnp.einsum(_HIDDEN_GRAD[layout], dlogits.astype(hidden.dtype), weight.astype(hidden.dtype),
                         preferred_element_type=jnp.float32).astype(hidden.dtype)
    dweight = jnp.einsum(_WEIGHT_GRAD, hidden, dlogits.astype(hidden.dtype), preferred_element_type=jnp.float32)
    dweight = (dweight.T if layout == "ve" else dweight).astype(weight.dtype)
    return dhidden, dweight, None


_target_logprobs.defvjp(_fwd, _bwd)


def target_logprobs(hidden: jax.Array, weight: jax.Array, targets: jax.Array, layout: str = "ve") -> jax.Array:
    """hidden [B, T, embed], weight [vocab, embed] ("ve") or [embed, vocab] ("ev"), targets [B, T] int
    -> log p(target) [B, T] float32. Differentiable in hidden and weight."""
    if layout not in _LOGITS:
        raise ValueError(f"layout must be one of {sorted(_LOGITS)}, got {layout!r}")
    return _target_logprobs(hidden, weight, targets.astype(jnp.int32), layout)
