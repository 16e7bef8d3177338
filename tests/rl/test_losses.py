"""PPO-clip + k3 KL: hand-computed values, clipping on both sides, gradients, aggregation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlanything_jax.core.rl import ppo_clip_k3_loss
from rlanything_jax.core.rl.losses import ppo_clip_k3_sums, ppo_loss_from_sums

EPS = 0.2


def _one_token(ratio: float, advantage: float, beta: float = 0.0):
    logp_old = jnp.array([[-1.0]])
    logp_new = logp_old + jnp.log(ratio)

    def loss(lp):
        return ppo_clip_k3_loss(lp, logp_old, jnp.array([advantage]), jnp.ones((1, 1)), eps=EPS, beta=beta)[0]

    value, grad = jax.value_and_grad(loss)(logp_new)
    return float(value), float(grad[0, 0])


@pytest.mark.parametrize("ratio,advantage,loss,grad", [
    (1.5, 1.0, -1.2, 0.0),    # A > 0 above 1 + eps: clipped, no gradient
    (0.5, 1.0, -0.5, -0.5),   # A > 0 below 1 - eps: the unclipped term is smaller, d(-r A)/d logp = -r A
    (1.1, 1.0, -1.1, -1.1),   # inside the trust region
    (1.5, -1.0, 1.5, 1.5),    # A < 0 above 1 + eps: unclipped (pessimistic), gradient -r A
    (0.5, -1.0, 0.8, 0.0),    # A < 0 below 1 - eps: clipped, no gradient
])
def test_clipping_on_both_sides(ratio, advantage, loss, grad):
    value, gradient = _one_token(ratio, advantage)
    assert value == pytest.approx(loss, abs=1e-6)
    assert gradient == pytest.approx(grad, abs=1e-6)


def test_k3_kl_is_zero_when_policies_agree_and_hand_computed_otherwise():
    logp = jnp.array([[-0.5, -1.5]])
    mask = jnp.ones((1, 2))
    loss, metrics = ppo_clip_k3_loss(logp, logp, jnp.array([2.0]), mask, beta=0.5)
    assert float(metrics["kl"]) == 0.0 and float(loss) == pytest.approx(-2.0)
    # d = logp_new - logp_old = 0.1 on both tokens: k3 = exp(-0.1) - 1 + 0.1 = 0.0048374180
    _, metrics = ppo_clip_k3_loss(logp + 0.1, logp, jnp.array([0.0]), mask, beta=0.5)
    assert float(metrics["kl"]) == pytest.approx(np.exp(-0.1) - 1 + 0.1, abs=1e-7)


def test_kl_against_a_frozen_reference():
    logp = jnp.array([[-1.0]])
    # new == old, but new - ref = 0.2: k3 = exp(-0.2) - 1 + 0.2 = 0.0187307531
    loss, metrics = ppo_clip_k3_loss(logp, logp, jnp.array([0.0]), jnp.ones((1, 1)), beta=1.0, ref_logp=logp - 0.2)
    assert float(metrics["kl"]) == pytest.approx(np.exp(-0.2) - 1 + 0.2, abs=1e-7)
    assert float(loss) == pytest.approx(float(metrics["kl"]), abs=1e-7)


def test_sequence_and_token_aggregation():
    logp = jnp.zeros((2, 4))
    mask = jnp.array([[1, 1, 1, 0], [1, 0, 0, 0]], jnp.float32)
    advantages = jnp.array([2.0, -1.0])
    # ratio 1 everywhere: per-token objective = A.
    # sequence_mean: mean(2, -1) = 0.5 -> loss -0.5; token_mean: (3 * 2 - 1) / 4 = 1.25 -> loss -1.25
    seq, _ = ppo_clip_k3_loss(logp, logp, advantages, mask, beta=0.0)
    tok, _ = ppo_clip_k3_loss(logp, logp, advantages, mask, beta=0.0, aggregation="token_mean")
    assert float(seq) == pytest.approx(-0.5) and float(tok) == pytest.approx(-1.25)
    with pytest.raises(ValueError, match="aggregation"):
        ppo_clip_k3_loss(logp, logp, advantages, mask, aggregation="sum")


def test_padding_is_ignored_and_metrics():
    logp_old = jnp.array([[-1.0, -2.0, -3.0]])
    logp_new = logp_old + jnp.log(jnp.array([[1.5, 1.0, 100.0]]))  # the padded third token is far off
    mask = jnp.array([[1.0, 1.0, 0.0]])
    loss, metrics = ppo_clip_k3_loss(logp_new, logp_old, jnp.array([1.0]), mask, beta=0.0)
    # tokens: min(1.5, 1.2) = 1.2 and 1.0 -> sequence mean 1.1 -> loss -1.1
    assert float(loss) == pytest.approx(-1.1, abs=1e-6)
    assert float(metrics["clip_fraction"]) == pytest.approx(0.5)
    # entropy estimate: -(mean of the two real new log-probs) = -((-1 + log 1.5) + -2) / 2
    assert float(metrics["entropy"]) == pytest.approx(-((-1 + np.log(1.5)) - 2) / 2, abs=1e-6)


def test_per_token_advantages():
    logp = jnp.zeros((1, 2))
    loss, _ = ppo_clip_k3_loss(logp, logp, jnp.array([[1.0, 3.0]]), jnp.ones((1, 2)), beta=0.0)
    assert float(loss) == pytest.approx(-2.0)


def test_log_ratios_are_clamped_at_ten():
    """A token 15 nats above the sampler's: the ratio is e^10, not e^15 (no gradient past the bound); the KL's
    log-ratio is clamped too, on both sides."""
    logp_old = jnp.array([[-20.0]])

    def loss(lp, advantage, beta):
        return ppo_clip_k3_loss(lp, logp_old, jnp.array([advantage]), jnp.ones((1, 1)), eps=EPS, beta=beta)[0]

    # A < 0, ratio above 1 + eps: the pessimistic unclipped term -r A = e^10 = 22026.4658
    value, grad = jax.value_and_grad(loss)(logp_old + 15.0, -1.0, 0.0)
    assert float(value) == pytest.approx(np.exp(10.0), rel=1e-6) and float(grad[0, 0]) == 0.0
    # k3 with d = logp_new - logp_old = +15: exp(clamp(-15)) - 1 + 15 = e^-10 + 14 = 14.0000454 (e^-15 + 14 unclamped)
    _, metrics = ppo_clip_k3_loss(logp_old + 15.0, logp_old, jnp.array([0.0]), jnp.ones((1, 1)), beta=1.0)
    assert float(metrics["kl"]) == pytest.approx(np.exp(-10.0) + 14.0, abs=2e-6)
    # d = -15: exp(clamp(15)) - 1 - 15 = e^10 - 16 = 22010.4658
    _, metrics = ppo_clip_k3_loss(logp_old - 15.0, logp_old, jnp.array([0.0]), jnp.ones((1, 1)), beta=1.0)
    assert float(metrics["kl"]) == pytest.approx(np.exp(10.0) - 16.0, rel=1e-6)


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
def test_sums_of_parts_give_the_loss_of_the_whole(aggregation):
    """Rows split 1 + 3 (an empty row in the second part): the parts' sums added, then divided once, are the
    loss and diagnostics of all four rows at once; the plain mean of the parts' losses is not."""
    rng = np.random.RandomState(0)
    logp_old = jnp.asarray(rng.randn(4, 5) - 2.0, jnp.float32)
    logp_new = logp_old + jnp.asarray(0.3 * rng.randn(4, 5), jnp.float32)
    mask = jnp.asarray([[1, 1, 1, 1, 0], [0.5, 2, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]], jnp.float32)
    advantages = jnp.asarray([1.0, -2.0, 0.5, 3.0])
    whole_loss, whole_metrics = ppo_clip_k3_loss(logp_new, logp_old, advantages, mask, beta=0.1,
                                                 aggregation=aggregation)
    parts = [ppo_clip_k3_sums(logp_new[rows], logp_old[rows], advantages[rows], mask[rows], aggregation=aggregation)
             for rows in (slice(0, 1), slice(1, 4))]
    loss, metrics = ppo_loss_from_sums(jax.tree.map(jnp.add, *parts), beta=0.1)
    assert float(loss) == pytest.approx(float(whole_loss), abs=1e-6)
    for name, value in whole_metrics.items():
        assert float(metrics[name]) == pytest.approx(float(value), abs=1e-6), name
    part_losses = [float(ppo_loss_from_sums(p, beta=0.1)[0]) for p in parts]
    assert abs(np.mean(part_losses) - float(whole_loss)) > 1e-2
