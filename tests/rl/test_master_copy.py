"""bfloat16 parameters with a float32 master copy (`TrainConfig.master_copy`): the update is taken in float32 on
the copy and the parameters are its rounding, so updates far below a bfloat16 ulp add up instead of vanishing."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.checkpoint import SystemCheckpointer, abstract_like
from rlanything_jax.core.models import Decoder
from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.core.rl.train_state import init_train_state, make_optimizer, reset_optimizer
from rlanything_jax.core.rl.train_step import TrainSpec, _micro_objective, train_step
from rlanything_jax.system.planning import analytic
from tests.rl.test_train_step import CFG, _batch


def _bf16_params(seed: int = 0):
    return nnx.split(Decoder(CFG, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(seed)))


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x, np.float32) for x in jax.tree.leaves(tree)]


def test_the_update_is_taken_in_float32_on_the_copy_and_the_parameters_are_its_rounding():
    graphdef, params = _bf16_params()
    lr = 0.5
    tx = optax.sgd(lr)
    state = init_train_state(params, tx, master_copy=True)
    assert all(m.dtype == jnp.float32 for m in jax.tree.leaves(state.master))
    plain = init_train_state(params, tx)
    assert plain.master is None
    batch, spec = _batch(), TrainSpec(graphdef, tx)
    new, _ = jax.jit(lambda s, b: train_step(s, b, spec))(state, batch)
    # The gradient is the bfloat16 parameters' (what the forward pass ran), divided by the batch's weight in
    # float32: master - lr * g / weight.
    (_, sums), grads = jax.jit(lambda p, b: jax.value_and_grad(_micro_objective, has_aux=True)(p, b, spec))(
        params, batch)
    expected = jax.tree.map(lambda m, g: m - lr * (g.astype(jnp.float32) / sums.weight), state.master, grads)
    for got, want in zip(_leaves(new.master), _leaves(expected)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    for p, m in zip(jax.tree.leaves(new.params), jax.tree.leaves(new.master)):
        assert p.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(p), np.asarray(m.astype(jnp.bfloat16)))


def test_updates_below_a_bfloat16_ulp_add_up_only_with_the_copy():
    graphdef, params = _bf16_params()
    tx = make_optimizer(TrainConfig(learning_rate=1e-6))   # Adam: about 1e-6 per step, ulps are ~1e-4 here
    spec = TrainSpec(graphdef, tx)
    step = jax.jit(lambda s, b: train_step(s, b, spec))
    with_copy, without = init_train_state(params, tx, master_copy=True), init_train_state(params, tx)
    for i in range(20):
        with_copy, _ = step(with_copy, _batch(seed=i))
        without, _ = step(without, _batch(seed=i))
    start = np.concatenate([x.ravel() for x in _leaves(params)])

    def moved(tree) -> float:
        return float(np.mean(np.concatenate([x.ravel() for x in _leaves(tree)]) != start))

    # Without the copy, each step rounds back except on weights near zero (biases start at 0).
    assert moved(with_copy.master) > 0.95 and moved(without.params) < 0.2
    change = np.abs(np.concatenate([x.ravel() for x in _leaves(with_copy.master)]) - start)
    assert change.max() < 20 * 3e-6   # at most 20 Adam steps of a few learning rates
    moments = jax.tree.leaves(reset_optimizer(with_copy, tx).opt_state)
    assert all(m.dtype in (jnp.float32, jnp.int32) for m in moments)


def test_micro_batches_take_the_whole_batch_update_on_the_copy():
    graphdef, params = _bf16_params()
    tx = optax.sgd(0.5)
    state = init_train_state(params, tx, master_copy=True)
    batch = _batch()
    whole, _ = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx)))(state, batch)
    split, _ = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx, num_micro_batches=4)))(state, batch)
    # Each micro-batch's gradient comes in the parameters' dtype (bfloat16): the sums differ from the whole
    # batch's gradient by its rounding, 2^-8 of gradients up to ~0.1, times the learning rate.
    for a, b in zip(_leaves(whole.master), _leaves(split.master)):
        np.testing.assert_allclose(a, b, atol=5e-4)
    for p, m in zip(jax.tree.leaves(split.params), jax.tree.leaves(split.master)):
        np.testing.assert_array_equal(np.asarray(p), np.asarray(m.astype(jnp.bfloat16)))


def test_the_planner_counts_the_copy():
    _, params = _bf16_params()
    mesh = analytic.Mesh({"data": 1, "fsdp": 1, "tensor": 1}, tuple(sharding.DEFAULT_LOGICAL_AXIS_RULES))
    plain = analytic.learner_bytes(params, mesh, TrainConfig(master_copy=False), micro_batches=2, freeze_vision=False)
    copied = analytic.learner_bytes(params, mesh, TrainConfig(), micro_batches=2,
                                    freeze_vision=False)
    count = sum(x.size for x in jax.tree.leaves(params))
    assert plain.master == 0 and plain.optimizer == 2 * 2 * count and plain.gradients == 2 * 2 * count
    assert copied.master == 4 * count and copied.optimizer == 2 * 4 * count and copied.gradients == (2 + 4) * count


def test_the_copy_is_checkpointed_and_restored_exactly(tmp_path):
    graphdef, params = _bf16_params()
    tx = make_optimizer(TrainConfig(learning_rate=1e-6))
    state, _ = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx)))(
        init_train_state(params, tx, master_copy=True), _batch())
    checkpointer = SystemCheckpointer(tmp_path, async_save=False)
    checkpointer.save(1, {"policy": state})
    restored = checkpointer.restore_latest(abstract_like({"policy": state})).arrays["policy"]
    checkpointer.close()
    assert restored.master is not None
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
