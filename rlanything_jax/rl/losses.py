"""PPO-clip with a k3 KL penalty (ALGORITHM.md 2.3), the loss of both the policy and the reward model."""

from __future__ import annotations

import jax.numpy as jnp

from rlanything_jax.rl.registry import register_policy_loss

AGGREGATIONS = ("sequence_mean", "token_mean")
# log-ratio bound before exp, as in the reference: keeps exp() finite for far-off tokens.
_LOG_RATIO_BOUND = 10.0


def _safe_divide(total: jnp.ndarray, count: jnp.ndarray) -> jnp.ndarray:
    # Not max(count, 1): a weighted mask's sums may be fractional (rl/data.py writes 1/length weights).
    return total / jnp.where(count > 0, count, 1.0)


def _aggregate(per_token: jnp.ndarray, mask: jnp.ndarray, aggregation: str) -> jnp.ndarray:
    """sequence_mean: each sequence's token mean, then the mean over non-empty sequences (the reference);
    token_mean: one mean over every token of the batch. A mask may hold weights: the means are weighted."""
    if aggregation == "sequence_mean":
        tokens = jnp.sum(mask, axis=-1)
        per_sequence = _safe_divide(jnp.sum(per_token * mask, axis=-1), tokens)
        # Rows without tokens (batch padding) do not dilute the mean.
        return _safe_divide(jnp.sum(per_sequence), jnp.sum(tokens > 0).astype(jnp.float32))
    if aggregation == "token_mean":
        return _safe_divide(jnp.sum(per_token * mask), jnp.sum(mask))
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


@register_policy_loss("ppo_clip_k3")
def ppo_clip_k3_loss(logp_new: jnp.ndarray, logp_old: jnp.ndarray, advantages: jnp.ndarray, mask: jnp.ndarray,
                     eps: float = 0.2, beta: float = 0.01, ref_logp: jnp.ndarray | None = None,
                     aggregation: str = "sequence_mean") -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Loss and metrics for token log-probabilities [B, T].

    `advantages` is [B] (one per sequence, broadcast over its tokens) or [B, T].
    `mask` is 0/1, or non-negative token weights (weighted means; > 0 marks a trained token).
    The KL term is k3 = exp(-d) - 1 + d with d = logp_new - logp_base, against the
    old policy (the reference) or, when `ref_logp` is given, a frozen reference model.
    """
    mask = mask.astype(jnp.float32)
    if advantages.ndim == logp_new.ndim - 1:
        advantages = advantages[..., None]
    log_ratio = jnp.where(mask > 0, logp_new - logp_old, 0.0)
    ratio = jnp.exp(jnp.clip(log_ratio, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND))
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * advantages
    policy_loss = -_aggregate(jnp.minimum(unclipped, clipped), mask, aggregation)

    base = logp_old if ref_logp is None else ref_logp
    d = jnp.where(mask > 0, logp_new - base, 0.0)
    k3 = jnp.exp(jnp.clip(-d, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)) - 1.0 + d
    kl = _aggregate(k3, mask, aggregation)
    loss = policy_loss + beta * kl

    # The diagnostics are plain means over the trained tokens, whatever weights the mask holds.
    trained = (mask > 0).astype(jnp.float32)
    tokens = jnp.maximum(jnp.sum(trained), 1.0)
    outside = (jnp.abs(ratio - 1.0) > eps).astype(jnp.float32)
    metrics = {
        "policy_loss": policy_loss,
        "kl": kl,
        "clip_fraction": jnp.sum(outside * trained) / tokens,
        "entropy": -jnp.sum(jnp.where(mask > 0, logp_new, 0.0)) / tokens,  # sampled-token estimate of the entropy
        "ratio_mean": jnp.sum(ratio * trained) / tokens,
    }
    return loss, metrics
