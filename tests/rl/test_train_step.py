"""The pure train step: micro-batch accumulation, sharding invariance, and a learning signal."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from rlanything_jax.core import sharding
from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl import stepwise_group_advantages
from rlanything_jax.core.rl.train_state import init_train_state, make_optimizer, reset_optimizer
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, jit_train_step, share_prompt_prefixes, train_step
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.sampling.strategies import Sampling

CFG = DecoderConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=8, num_kv_heads=4, head_dim=8, qk_norm=True)
ADAMW = dict(learning_rate=1e-3, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8, weight_decay=0.01, max_grad_norm=1.0)


def _batch(n: int = 8, length: int = 12, seed: int = 0) -> TrainBatch:
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, CFG.vocab_size, (n, length)).astype(np.int32)
    mask = np.ones((n, length), np.int32)
    mask[1, :3] = 0  # a left-padded prompt
    return TrainBatch(input_ids=ids, attention_mask=mask, targets=np.roll(ids, -1, axis=1),
                      loss_mask=np.tile((np.arange(length) >= 6) & (np.arange(length) < length - 1), (n, 1))
                      .astype(np.float32),
                      old_logp=np.full((n, length), -4.0, np.float32) + rng.randn(n, length).astype(np.float32) * 0.1,
                      advantages=rng.randn(n).astype(np.float32))


def _setup(seed: int = 0):
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(seed)))
    tx = make_optimizer(ADAMW)
    return graphdef, tx, init_train_state(params, tx)


def _flat(params) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(params)]


def _sgd_setup():
    """Plain SGD, so that the update is the averaged gradient itself: Adam's first step
    (about lr * sign(g)) would amplify float rounding in near-zero gradients."""
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    tx = optax.sgd(0.5)
    return graphdef, tx, init_train_state(params, tx)


def test_micro_batches_give_the_update_of_one_batch():
    graphdef, tx, state = _sgd_setup()
    batch = _batch()
    whole, whole_metrics = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx)))(state, batch)
    split, split_metrics = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx, num_micro_batches=4)))(
        state, batch)
    np.testing.assert_allclose(float(split_metrics["loss"]), float(whole_metrics["loss"]), atol=1e-6)
    for a, b in zip(_flat(whole.params), _flat(split.params)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert int(split.step) == 1


def test_metrics_skip_micro_batches_without_trained_tokens():
    """A short final batch padded with empty rows: on-policy tokens (NaN old log-probs) have ratio 1,
    and the empty 4th micro-batch must not pull the mean ratio to 3/4."""
    graphdef, tx, state = _sgd_setup()
    batch = _batch()
    loss_mask = batch.loss_mask.copy()
    loss_mask[6:] = 0
    batch = batch.replace(loss_mask=loss_mask, old_logp=np.full_like(batch.old_logp, np.nan))
    _, metrics = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx, num_micro_batches=4)))(state, batch)
    assert float(metrics["ratio_mean"]) == 1.0 and float(metrics["clip_fraction"]) == 0.0
    assert float(metrics["entropy"]) > 3.0   # the mean NLL of random targets under a random model, about log(64)


def test_a_loss_window_gives_the_update_of_the_whole_row():
    """Targets etc. for the last 7 of 12 columns (the loss starts at column 6): same loss, same params."""
    graphdef, tx, state = _sgd_setup()
    batch = _batch()
    windowed = batch.replace(**{name: getattr(batch, name)[:, 5:] for name in
                                ("targets", "loss_mask", "old_logp")})
    step = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx, kl_beta=0.05)))
    whole, whole_metrics = step(state, batch)
    cut, cut_metrics = step(state, windowed)
    for name in ("loss", "kl", "clip_fraction", "entropy", "grad_norm"):
        np.testing.assert_allclose(float(cut_metrics[name]), float(whole_metrics[name]), atol=1e-6)
    for a, b in zip(_flat(whole.params), _flat(cut.params)):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_shared_prefixes_give_the_update_of_the_whole_rows():
    """Two groups of 4 rows sharing their first 5 columns (one group left-padded), loss from column 5 on:
    the prefix form runs each group's prefix once and must give the same step, also in 2 micro-batches."""
    graphdef, tx, state = _sgd_setup()
    batch = _batch()
    ids, mask = batch.input_ids.copy(), batch.attention_mask.copy()
    mask[:4, :2] = 0
    ids[:4, :5], mask[:4, :5] = ids[0, :5], mask[0, :5]
    ids[4:, :5], mask[4:, :5] = ids[4, :5], mask[4, :5]
    whole = batch.replace(input_ids=ids, attention_mask=mask,
                          **{name: getattr(batch, name)[:, 5:] for name in ("targets", "loss_mask", "old_logp")})
    shared = share_prompt_prefixes(whole, group_size=4, prefix_length=5)
    assert shared.input_ids.shape == (8, 7) and shared.prefix_ids.shape == (2, 5)
    assert shared.prefix_index.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    results = []
    for b, micro in [(whole, 1), (shared, 1), (shared, 2)]:
        spec = TrainSpec(graphdef, tx, kl_beta=0.05, num_micro_batches=micro)
        results.append(jax.jit(lambda s, b, spec=spec: train_step(s, b, spec))(state, b))
    (reference, reference_metrics), *others = results
    for new, metrics in others:
        for name in ("loss", "kl", "entropy", "grad_norm"):
            np.testing.assert_allclose(float(metrics[name]), float(reference_metrics[name]), atol=1e-5)
        for a, b in zip(_flat(reference.params), _flat(new.params)):
            np.testing.assert_allclose(a, b, atol=1e-5)
    ids[1, 4] = (ids[1, 4] + 1) % CFG.vocab_size
    with pytest.raises(ValueError, match="differ in their first"):
        share_prompt_prefixes(whole.replace(input_ids=ids), group_size=4, prefix_length=5)
    with pytest.raises(ValueError, match="reaches into the prefix"):
        share_prompt_prefixes(batch, group_size=4, prefix_length=5)


def test_same_step_on_one_device_and_on_a_2x4_mesh():
    graphdef, tx, state = _sgd_setup()
    batch = _batch()
    spec = TrainSpec(graphdef, tx, num_micro_batches=2)
    single_mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    one, one_metrics = jit_train_step(spec, state, batch, single_mesh)(state, batch)

    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    _, _, fresh = _sgd_setup()
    step = jit_train_step(spec, fresh, batch, mesh)
    sharded, sharded_metrics = step(fresh, batch)
    assert sharded.params["layers"][0]["mlp"]["gate_proj"]["kernel"][...].sharding.spec == P("fsdp", "tensor")
    np.testing.assert_allclose(float(sharded_metrics["loss"]), float(one_metrics["loss"]), atol=1e-5)
    for a, b in zip(_flat(one.params), _flat(sharded.params)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_optimizer_state_persists_unless_reset():
    graphdef, tx, state = _setup()
    step = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx)))
    state, _ = step(state, _batch(seed=1))
    moments = [x for x in jax.tree.leaves(state.opt_state) if x.ndim > 0]
    assert any(np.any(np.asarray(m) != 0) for m in moments)
    reset = reset_optimizer(state, tx)
    assert all(not np.any(np.asarray(m)) for m in jax.tree.leaves(reset.opt_state) if m.ndim > 0)


TARGET = [5, 9, 13, 17]


def test_policy_learns_a_rewarded_token_sequence():
    """Reward = fraction of the 4 response tokens equal to TARGET; G = 16 rollouts per step."""
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(1)))
    tx = make_optimizer({**ADAMW, "learning_rate": 3e-2, "weight_decay": 0.0})
    state = init_train_state(params, tx)
    step = jax.jit(lambda s, b: train_step(s, b, TrainSpec(graphdef, tx, kl_beta=0.0)))
    sampler = Sampler(nnx.merge(graphdef, params))
    prompt, group = [1, 2, 3], 16
    mean_rewards = []
    for iteration in range(30):
        sampler.update_params(state.params)
        rollouts = sampler.generate([prompt] * group, len(TARGET), Sampling(temperature=1.0), seed=iteration,
                                    stop_token_ids=[])
        rewards = np.array([np.mean(np.array(r.token_ids) == TARGET) for r in rollouts], np.float32)
        mean_rewards.append(rewards.mean())
        advantages = stepwise_group_advantages(rewards[:, None], np.ones((group, 1), bool))[:, 0]
        sequences = np.array([prompt + r.token_ids for r in rollouts], np.int32)
        old_logp = np.zeros(sequences.shape, np.float32)
        old_logp[:, len(prompt) - 1:-1] = [r.logprobs for r in rollouts]
        loss_mask = np.zeros(sequences.shape, np.float32)
        loss_mask[:, len(prompt) - 1:-1] = 1
        batch = TrainBatch(input_ids=sequences, attention_mask=np.ones_like(sequences),
                           targets=np.roll(sequences, -1, axis=1), loss_mask=loss_mask, old_logp=old_logp,
                           advantages=np.asarray(advantages))
        state, _ = step(state, batch)
    print("mean reward per step:", np.round(mean_rewards, 3))
    assert mean_rewards[0] < 0.15  # the random initial policy rarely hits a target token
    assert np.mean(mean_rewards[-5:]) > mean_rewards[0] + 0.3, mean_rewards
