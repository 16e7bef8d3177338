"""PPO-clip with a k3 KL penalty (ALGORITHM.md 2.3), the loss of both the policy and the reward model.

`ppo_clip_k3_sums` gives a batch's loss as sums (weighted loss contributions, their weight,
diagnostic counts) that add across micro-batches; `ppo_loss_from_sums` divides once. So a
batch split into micro-batches of any weights (rows of different lengths, empty filler
rows) gives the loss, gradient and diagnostics of the whole batch. `ppo_clip_k3_loss` is
the same loss for one batch, as a mean.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

AGGREGATIONS = ("sequence_mean", "token_mean")
# log-ratio bound before exp, as in the reference: keeps exp() finite for far-off tokens.
_LOG_RATIO_BOUND = 10.0


@struct.dataclass
class PPOSums:
    """Additive parts of the PPO loss over some rows; `ppo_loss_from_sums` turns them into means.

    The loss is (policy_loss + beta * kl) / weight. weight is the sum of the loss-mask weights
    (token_mean) or the number of rows with a trained token (sequence_mean, each row contributing
    its token mean). The diagnostics are plain sums over trained tokens (mask > 0).
    """
    policy_loss: jax.Array      # sum of -min(r A, clip(r) A) contributions
    kl: jax.Array               # sum of k3 contributions
    weight: jax.Array
    trained_tokens: jax.Array
    clipped_tokens: jax.Array   # trained tokens with |ratio - 1| > eps
    ratio: jax.Array            # sum of the ratios
    negative_logp: jax.Array    # sum of -logp_new: a sampled-token estimate of the entropy

    def objective(self, beta: float) -> jax.Array:
        """The summed loss whose gradient, divided by the total weight, is the loss's gradient."""
        return self.policy_loss + beta * self.kl


def _safe_divide(total: jnp.ndarray, count: jnp.ndarray) -> jnp.ndarray:
    # Not max(count, 1): a weighted mask's sums may be fractional (core/rl/data.py writes 1/length weights).
    return total / jnp.where(count > 0, count, 1.0)


def _aggregate_sum(per_token: jnp.ndarray, mask: jnp.ndarray, aggregation: str) -> jnp.ndarray:
    """The weighted sum whose division by `_aggregate_weight` is the aggregation's mean: token_mean
    sums l * w over every token; sequence_mean sums each row's weighted token mean."""
    if aggregation == "sequence_mean":
        return jnp.sum(_safe_divide(jnp.sum(per_token * mask, axis=-1), jnp.sum(mask, axis=-1)))
    if aggregation == "token_mean":
        return jnp.sum(per_token * mask)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


def _aggregate_weight(mask: jnp.ndarray, aggregation: str) -> jnp.ndarray:
    if aggregation == "sequence_mean":
        # Rows without tokens (batch padding) count for nothing.
        return jnp.sum(jnp.sum(mask, axis=-1) > 0).astype(jnp.float32)
    return jnp.sum(mask)


def ppo_clip_k3_sums(logp_new: jnp.ndarray, logp_old: jnp.ndarray, advantages: jnp.ndarray, mask: jnp.ndarray,
                     eps: float = 0.2, ref_logp: jnp.ndarray | None = None,
                     aggregation: str = "sequence_mean") -> PPOSums:
    """The PPO-clip + k3 loss's sums for token log-probabilities [B, T] (arguments as `ppo_clip_k3_loss`)."""
    mask = mask.astype(jnp.float32)
    if advantages.ndim == logp_new.ndim - 1:
        advantages = advantages[..., None]
    log_ratio = jnp.where(mask > 0, logp_new - logp_old, 0.0)
    ratio = jnp.exp(jnp.clip(log_ratio, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND))
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * advantages
    policy_loss = -_aggregate_sum(jnp.minimum(unclipped, clipped), mask, aggregation)

    base = logp_old if ref_logp is None else ref_logp
    d = jnp.where(mask > 0, logp_new - base, 0.0)
    k3 = jnp.exp(jnp.clip(-d, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)) - 1.0 + d

    # The diagnostics count trained tokens alike, whatever weights the mask holds.
    trained = (mask > 0).astype(jnp.float32)
    return PPOSums(
        policy_loss=policy_loss,
        kl=_aggregate_sum(k3, mask, aggregation),
        weight=_aggregate_weight(mask, aggregation),
        trained_tokens=jnp.sum(trained),
        clipped_tokens=jnp.sum((jnp.abs(ratio - 1.0) > eps).astype(jnp.float32) * trained),
        ratio=jnp.sum(ratio * trained),
        negative_logp=-jnp.sum(jnp.where(mask > 0, logp_new, 0.0)),
    )


def ppo_loss_from_sums(sums: PPOSums, beta: float) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The loss and diagnostics (means) from sums over a whole batch or update; 0 where nothing is trained."""
    tokens = jnp.maximum(sums.trained_tokens, 1.0)
    policy_loss = _safe_divide(sums.policy_loss, sums.weight)
    kl = _safe_divide(sums.kl, sums.weight)
    metrics = {
        "policy_loss": policy_loss,
        "kl": kl,
        "clip_fraction": sums.clipped_tokens / tokens,
        "entropy": sums.negative_logp / tokens,
        "ratio_mean": sums.ratio / tokens,
    }
    return policy_loss + beta * kl, metrics


def ppo_clip_k3_loss(logp_new: jnp.ndarray, logp_old: jnp.ndarray, advantages: jnp.ndarray, mask: jnp.ndarray,
                     eps: float = 0.2, beta: float = 0.01, ref_logp: jnp.ndarray | None = None,
                     aggregation: str = "sequence_mean") -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Loss and metrics for token log-probabilities [B, T].

    `advantages` is [B] (one per sequence, broadcast over its tokens) or [B, T].
    `mask` is 0/1, or non-negative token weights (weighted means; > 0 marks a trained token).
    The KL term is k3 = exp(-d) - 1 + d with d = logp_new - logp_base, against the
    old policy (the reference) or, when `ref_logp` is given, a frozen reference model.
    sequence_mean: each sequence's token mean, then the mean over non-empty sequences (the
    reference); token_mean: one mean over every token of the batch.
    """
    sums = ppo_clip_k3_sums(logp_new, logp_old, advantages, mask, eps=eps, ref_logp=ref_logp,
                            aggregation=aggregation)
    return ppo_loss_from_sums(sums, beta)
