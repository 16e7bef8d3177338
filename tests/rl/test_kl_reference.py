"""The KL against a frozen reference model (`train.<role>.kl_reference="initial"`): the train step takes the KL's
base from the reference parameters the state carries (the hand-built update of test_accumulation, with the base
from the reference's plain forward), and the phase keeps them frozen while the policy moves away from them."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlanything_jax.core.rl.phase import train_phase
from rlanything_jax.core.rl.train_state import TrainState, init_train_state
from rlanything_jax.core.rl.train_step import TrainSpec, train_step
from tests.rl.test_accumulation import (
    BETA,
    EPS,
    MICRO_BATCH_SIZES,
    _assert_same_params,
    _batch,
    _copy,
    _flat,
    _learner,
    _model,
    _on_policy,
    _plain_loss,
    _response_logprobs,
    _steps_and_examples,
)


def _moved(params, seed=1, scale=0.05):
    """`params` plus noise: a policy some updates away from its reference."""
    leaves, tree = jax.tree.flatten(params)
    rng = np.random.RandomState(seed)
    return jax.tree.unflatten(tree, [x + scale * rng.randn(*x.shape).astype(x.dtype) for x in leaves])


def _assert_bitwise(actual, expected):
    for a, b in zip(_flat(actual), _flat(expected), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_the_train_step_takes_the_kl_base_from_the_frozen_reference(aggregation):
    graphdef, reference = _model()
    params = _moved(reference)
    batch = _batch()
    window = batch.targets.shape[1]
    # The reference's log-probabilities of the batch's targets, from its plain forward (full logits).
    logits = nnx.merge(graphdef, reference)(batch.input_ids, batch.attention_mask)[:, -window:]
    base = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), batch.targets[..., None], axis=-1)[..., 0]
    loss, grads = jax.value_and_grad(_plain_loss, argnums=2)(
        graphdef, aggregation, params, batch.input_ids, batch.attention_mask, batch.targets, batch.loss_mask,
        batch.old_logp, batch.advantages, base)
    lr = 1.0
    expected = jax.tree.map(lambda p, g: p - lr * g, params, grads)
    tx = optax.sgd(lr)
    for micro_batch_size in MICRO_BATCH_SIZES:
        spec = TrainSpec(graphdef, tx, clip_eps=EPS, kl_beta=BETA, aggregation=aggregation,
                         num_micro_batches=8 // micro_batch_size)
        state = TrainState(step=np.int32(0), params=_copy(params), opt_state=tx.init(params),
                           reference=_copy(reference))
        new, metrics = jax.jit(lambda s, b, spec=spec: train_step(s, b, spec))(state, batch)
        what = f"{aggregation}, micro-batches of {micro_batch_size}"
        _assert_same_params(new.params, expected, what)
        assert float(metrics["loss"]) == pytest.approx(float(loss), abs=1e-6), what
        assert float(metrics["kl"]) > 1e-4, what
        _assert_bitwise(new.reference, reference)


def test_a_phase_takes_the_kl_against_the_model_the_run_started_from():
    """Two RL steps' phases, each on the sampler's own log-probabilities (ratio 1): the first starts at the
    reference (KL 0); the second, after the policy moved, reports the k3 KL to the frozen model computed here by
    hand, where the rollout base ("rollout", the reference implementation's) reports 0."""
    graphdef, params = _model()
    steps = _steps_and_examples()[0]
    learner = _learner(graphdef, learning_rate=1e-2, adam_eps=1e-8, aggregation="token_mean", micro_batch_size=2,
                       kl_reference="initial")
    state = init_train_state(_copy(params), learner.tx, frozen_reference=True)
    state, first = train_phase(learner, state, _on_policy(graphdef, params, steps), seed=0)
    assert first["policy/kl"] == pytest.approx(0.0, abs=1e-7)
    _assert_bitwise(state.reference, params)

    moved = jax.device_get(state.params)
    d = np.concatenate([new - old for new, old in zip(_response_logprobs(graphdef, moved, steps),
                                                      _response_logprobs(graphdef, params, steps))])
    k3 = float(np.mean(np.exp(-d) - 1 + d))   # token mean: every token weighs 1
    assert k3 > 1e-5
    on_policy = _on_policy(graphdef, moved, steps)
    frozen_state, second = train_phase(learner, state, on_policy, seed=1)
    assert second["policy/kl"] == pytest.approx(k3, rel=1e-3, abs=1e-7)
    _assert_bitwise(frozen_state.reference, params)

    rollout_learner = _learner(graphdef, learning_rate=1e-2, adam_eps=1e-8, aggregation="token_mean",
                               micro_batch_size=2)
    _, rollout = train_phase(rollout_learner, init_train_state(jax.device_put(moved), rollout_learner.tx),
                             on_policy, seed=1)
    assert rollout["policy/kl"] == pytest.approx(0.0, abs=1e-7)


def test_the_reference_is_a_copy_not_the_trained_buffers():
    _, params = _model()
    state = init_train_state(params, optax.sgd(1.0), frozen_reference=True)
    _assert_bitwise(state.reference, params)
    assert all(a is not b for a, b in zip(jax.tree.leaves(state.reference), jax.tree.leaves(state.params)))
    assert init_train_state(params, optax.sgd(1.0)).reference is None
