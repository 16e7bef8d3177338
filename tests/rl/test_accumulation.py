"""The applied update equals the algorithm's loss over all of an update's rows, however the rows are split
into micro-batches or padded: parameters after `train_step` / `train_phase` against an update built by hand
(jax.grad of a plainly written PPO loss over every row at once, through the model's plain forward)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.data import Example, pack_turns
from rlanything_jax.core.rl.phase import Learner, train_phase
from rlanything_jax.core.rl.train_state import init_train_state
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, train_step

CFG = DecoderConfig(model_type="qwen3", vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1,
                    num_heads=2, num_kv_heads=1, head_dim=8, qk_norm=True)
EOS, EPS, BETA = 2, 0.2, 0.05
MICRO_BATCH_SIZES = (1, 2, 8)


def _model():
    return nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))


def _copy(tree):
    return jax.tree.map(jnp.copy, tree)   # the compiled steps donate their state


def _flat(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _assert_same_params(actual, expected, what):
    for a, b in zip(_flat(actual), _flat(expected), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0, err_msg=what)


def _token_terms(logp, old, advantage, base):
    """The per-token PPO-clip + k3 loss of ALGORITHM.md 2.3 (ratio and KL log-ratio clamped to +-10)."""
    ratio = jnp.exp(jnp.clip(logp - old, -10.0, 10.0))
    surrogate = jnp.minimum(ratio * advantage, jnp.clip(ratio, 1 - EPS, 1 + EPS) * advantage)
    d = logp - base
    return -surrogate + BETA * (jnp.exp(jnp.clip(-d, -10.0, 10.0)) - 1 + d)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _plain_loss(graphdef, aggregation, params, ids, attention, targets, weights, old, advantages, base):
    """The loss of all rows at once from the model's plain forward (full logits, log_softmax): targets and the
    per-token arrays [N, W] cover the rows' last W positions, `weights` hold each token's loss weight.
    token_mean: sum(w * l) / sum(w) over every token; sequence_mean: the mean over rows with a trained token of
    their weighted means sum_t(w * l) / sum_t(w)."""
    window = targets.shape[1]
    logits = nnx.merge(graphdef, params)(ids, attention)[:, -window:]
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), targets[..., None], axis=-1)[..., 0]
    weighted = weights * _token_terms(logp, old, advantages[:, None], base)
    if aggregation == "token_mean":
        return jnp.sum(weighted) / jnp.sum(weights)
    rows = jnp.sum(weights, axis=1) > 0
    row_means = jnp.sum(weighted, axis=1) / jnp.where(rows, jnp.sum(weights, axis=1), 1.0)
    return jnp.sum(jnp.where(rows, row_means, 0.0)) / jnp.sum(rows)


# --- train_step: a hand-made batch with unequal rows, unequal weights and empty filler rows ---

def _batch() -> TrainBatch:
    """8 rows of 12 columns, the loss on the last 8: rows 0-5 train 1..6 tokens with unequal weights and
    per-row advantages, rows 6 and 7 are empty (what a short final batch is padded with)."""
    rng = np.random.RandomState(3)
    n, length, window = 8, 12, 8
    ids = rng.randint(3, CFG.vocab_size, (n, length)).astype(np.int32)
    attention = np.ones((n, length), np.int32)
    attention[1, :4] = attention[4, :2] = 0    # left-padded prompts
    loss_mask = np.zeros((n, window), np.float32)
    for row, tokens in enumerate((1, 6, 2, 5, 3, 4)):
        loss_mask[row, window - 1 - tokens:window - 1] = rng.uniform(0.2, 2.0, tokens)
    return TrainBatch(input_ids=ids, attention_mask=attention, targets=np.roll(ids, -1, axis=1)[:, -window:],
                      loss_mask=loss_mask, old_logp=(np.log(1 / CFG.vocab_size) + 0.3 * rng.randn(n, window))
                      .astype(np.float32), advantages=rng.randn(n).astype(np.float32))


def _batch_reference(graphdef, params, batch: TrainBatch, aggregation):
    """(loss, gradient) of the batch's rows at once (old log-probs are the KL base, as without ref_logp)."""
    return jax.value_and_grad(_plain_loss, argnums=2)(
        graphdef, aggregation, params, batch.input_ids, batch.attention_mask, batch.targets, batch.loss_mask,
        batch.old_logp, batch.advantages, batch.old_logp)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_train_step_micro_batches_give_the_update_of_all_rows_at_once(aggregation):
    graphdef, params = _model()
    batch = _batch()
    lr = 1.0
    loss, grads = _batch_reference(graphdef, params, batch, aggregation)
    expected = jax.tree.map(lambda p, g: p - lr * g, params, grads)
    tx = optax.sgd(lr)
    for micro_batch_size in MICRO_BATCH_SIZES:
        spec = TrainSpec(graphdef, tx, clip_eps=EPS, kl_beta=BETA, aggregation=aggregation,
                         num_micro_batches=8 // micro_batch_size)
        new, metrics = jax.jit(lambda s, b, spec=spec: train_step(s, b, spec))(init_train_state(params, tx), batch)
        what = f"{aggregation}, micro-batches of {micro_batch_size}"
        _assert_same_params(new.params, expected, what)
        assert float(metrics["loss"]) == pytest.approx(float(loss), abs=1e-6), what
        assert float(metrics["trained_tokens"]) == 21 and float(metrics["loss_weight"]) == pytest.approx(
            6.0 if aggregation == "sequence_mean" else float(batch.loss_mask.sum()), rel=1e-6), what


# --- train_phase: turn-packed episodes and plain examples, against every step as its own row ---

def _episode(rng, turns: int) -> list[Example]:
    """One multi-turn episode's per-step examples: step t + 1's prompt extends step t's prompt + response."""
    prompt, steps = list(rng.randint(3, CFG.vocab_size, 4)), []
    for _ in range(turns):
        response = list(rng.randint(3, CFG.vocab_size, rng.randint(1, 5))) + [EOS]
        steps.append(Example(prompt, response, float(rng.choice([-1, 1]) * rng.uniform(0.3, 2.0)),
                             list(np.log(1 / CFG.vocab_size) + 0.3 * rng.randn(len(response)))))
        prompt = prompt + response + list(rng.randint(3, CFG.vocab_size, 2))
    return steps


def _steps_and_examples(seed=0):
    """Five rows (three packed episodes of 3, 2 and 4 steps, two plain steps); the steps they hold."""
    rng = np.random.RandomState(seed)
    episodes = [_episode(rng, turns) for turns in (3, 2, 4)]
    plain = [step for _ in range(2) for step in _episode(rng, 1)]
    return [s for e in episodes for s in e] + plain, [pack_turns(e) for e in episodes] + plain


def _step_rows(steps: list[Example]):
    """Each step's prompt + response as its own row, right-padded (under causal attention, padding after a
    token cannot change its log-probability: no attention mask is needed): ids and targets [N, L] (the next
    token), weights 1 on each response token's column, and the steps' old / KL-base log-probs and advantages."""
    length = max(len(s.prompt_ids) + len(s.response_ids) for s in steps) + 1
    shape = (len(steps), length)
    ids, weights, old, base = np.zeros(shape, np.int32), *(np.zeros(shape, np.float32) for _ in range(3))
    for row, step in enumerate(steps):
        sequence = list(step.prompt_ids) + list(step.response_ids)
        ids[row, :len(sequence)] = sequence
        columns = len(step.prompt_ids) - 1 + np.arange(len(step.response_ids))   # position t predicts token t + 1
        weights[row, columns] = 1.0
        old[row, columns] = step.old_logprobs
        base[row, columns] = step.old_logprobs if step.ref_logprobs is None else step.ref_logprobs
    advantages = np.array([s.advantage for s in steps], np.float32)
    return ids, np.roll(ids, -1, axis=1), weights, old, advantages, base


def _steps_reference(graphdef, params, steps, aggregation):
    """(loss, gradient) of the plain loss over every step, each its own row."""
    ids, targets, weights, old, advantages, base = _step_rows(steps)
    return jax.value_and_grad(_plain_loss, argnums=2)(graphdef, aggregation, params, ids, np.ones_like(ids),
                                                      targets, weights, old, advantages, base)


@functools.partial(jax.jit, static_argnums=0)
def _target_logprobs(graphdef, params, ids):
    logits = nnx.merge(graphdef, params)(ids)
    targets = jnp.roll(ids, -1, axis=1)
    return jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), targets[..., None], axis=-1)[..., 0]


def _response_logprobs(graphdef, params, steps) -> list[np.ndarray]:
    """Each step's response-token log-probabilities under `params`, from the model's plain forward."""
    ids, _, weights, *_ = _step_rows(steps)
    table = np.asarray(_target_logprobs(graphdef, params, ids))
    return [table[row][weights[row] > 0] for row in range(len(steps))]


def _learner(graphdef, **overrides) -> Learner:
    mesh = sharding.build_mesh({"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    # Adam with eps 1: its first update is -lr * g / (|g| + 1), which keeps gradient rounding as small as it is
    # (eps 1e-8 gives about lr * sign(g)); no clipping or decay: the update is a function of the gradient alone.
    config = dict(learning_rate=1.0, adam_eps=1.0, weight_decay=0.0, max_grad_norm=0.0, clip_eps=EPS, kl_beta=BETA,
                  updates_per_step=1, max_prompt_tokens=64, max_response_tokens=64, overlong_prompt="drop")
    return Learner(graphdef=graphdef, train_config={**config, **overrides}, mesh=mesh, eos_id=EOS, pad_id=0)


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
def test_phase_update_equals_the_loss_over_every_step(aggregation):
    """Five rows of unequal lengths and step counts in one update, padded to 8 rows (3 empty), in micro-batches
    of 1, 2 and 8: the parameters equal the update of the plain loss over the 11 steps, each its own row."""
    graphdef, params = _model()
    steps, examples = _steps_and_examples()
    loss, grads = _steps_reference(graphdef, params, steps, aggregation)
    for micro_batch_size in MICRO_BATCH_SIZES:
        learner = _learner(graphdef, aggregation=aggregation, micro_batch_size=micro_batch_size)
        updates, _ = learner.tx.update(grads, learner.tx.init(params), params)
        state, metrics = train_phase(learner, init_train_state(_copy(params), learner.tx), examples, seed=0)
        what = f"{aggregation}, micro-batches of {micro_batch_size}"
        assert int(state.step) == 1, what
        _assert_same_params(state.params, optax.apply_updates(params, updates), what)
        assert metrics["policy/loss"] == pytest.approx(float(loss), abs=1e-6), what
        assert metrics["policy/trained_tokens"] == sum(len(s.response_ids) for s in steps), what


def _on_policy(graphdef, params, steps, ref_shift=None) -> list[Example]:
    """The steps with the model's own log-probabilities as old ones (and ref = own - ref_shift)."""
    out = []
    for step, own in zip(steps, _response_logprobs(graphdef, params, steps)):
        ref = None if ref_shift is None else list(own - ref_shift)
        out.append(dataclasses.replace(step, old_logprobs=list(own), ref_logprobs=ref))
    return out


def _mean_ratio(graphdef, params, steps) -> float:
    ratios = [np.exp(new - np.asarray(s.old_logprobs))
              for s, new in zip(steps, _response_logprobs(graphdef, params, steps))]
    return float(np.mean(np.concatenate(ratios)))


def test_ppo_epochs_start_on_policy_and_later_passes_see_the_moved_policy():
    """Old log-probs from the model itself: one pass trains at ratio 1 exactly; a second pass (one update each)
    reports the mean of that 1 and the ratio of the once-updated model, computed here by hand."""
    graphdef, params = _model()
    steps = _on_policy(graphdef, params, _steps_and_examples()[0])
    config = dict(learning_rate=1e-2, adam_eps=1e-8, aggregation="token_mean", micro_batch_size=2)
    learner = _learner(graphdef, **config)
    once, one_pass = train_phase(learner, init_train_state(_copy(params), learner.tx), steps, seed=0)
    assert one_pass["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert one_pass["policy/clip_fraction"] == 0.0 and one_pass["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    second_ratio = _mean_ratio(graphdef, once.params, steps)
    assert abs(second_ratio - 1.0) > 1e-3
    learner = _learner(graphdef, **config, ppo_epochs=2)
    twice, two_passes = train_phase(learner, init_train_state(_copy(params), learner.tx), steps, seed=0)
    assert int(twice.step) == 2
    assert two_passes["policy/ratio_mean"] == pytest.approx((1.0 + second_ratio) / 2, abs=1e-5)


def test_reset_optimizer_each_step_gives_a_fresh_optimizers_moments():
    graphdef, params = _model()
    steps, examples = _steps_and_examples()
    later = _steps_and_examples(seed=1)[1]
    config = dict(learning_rate=1e-2, adam_eps=1e-8, micro_batch_size=4)
    resetting = _learner(graphdef, **config, reset_optimizer_each_step=True)
    # The same optimizer settings: the compiled steps are shared.
    keeping = dataclasses.replace(resetting, train_config=dataclasses.replace(
        resetting.train_config, reset_optimizer_each_step=False), compiled=resetting.compiled)
    first, _ = train_phase(keeping, init_train_state(_copy(params), keeping.tx), examples, seed=0)
    after_first = jax.device_get(first)
    reset, _ = train_phase(resetting, _copy(first), later, seed=1)
    fresh, _ = train_phase(keeping, init_train_state(_copy(after_first.params), keeping.tx), later, seed=1)
    kept, _ = train_phase(keeping, jax.device_put(after_first), later, seed=1)
    # Adam's count, mu and nu after the reset phase: those of a fresh optimizer given that phase's gradient.
    for a, b in zip(_flat(reset.opt_state), _flat(fresh.opt_state), strict=True):
        np.testing.assert_array_equal(a, b)
    _assert_same_params(reset.params, fresh.params, "reset against fresh")
    counts = [int(x) for x in jax.tree.leaves(kept.opt_state) if np.asarray(x).dtype == np.int32]
    assert counts and all(c == 2 for c in counts)
    moments = [(np.asarray(a), np.asarray(b)) for a, b in zip(jax.tree.leaves(kept.opt_state),
                                                             jax.tree.leaves(fresh.opt_state)) if np.ndim(a) > 0]
    assert any(not np.allclose(a, b) for a, b in moments)


def test_a_frozen_reference_gives_the_hand_computed_kl():
    """On-policy steps (ratio 1) whose reference log-probs are 0.3 lower: k3 = exp(-0.3) - 1 + 0.3 on every
    token (0.0408182207), through the data's ref_logp; the policy loss is minus the mean advantage."""
    graphdef, params = _model()
    steps = _on_policy(graphdef, params, _steps_and_examples()[0], ref_shift=0.3)
    learner = _learner(graphdef, aggregation="sequence_mean", micro_batch_size=4)
    _, metrics = train_phase(learner, init_train_state(_copy(params), learner.tx), steps, seed=0)
    k3 = np.exp(-0.3) - 1 + 0.3
    assert metrics["policy/kl"] == pytest.approx(k3, abs=1e-5)
    policy_loss = -np.mean([s.advantage for s in steps])
    assert metrics["policy/policy_loss"] == pytest.approx(policy_loss, abs=1e-5)
    assert metrics["policy/loss"] == pytest.approx(policy_loss + BETA * k3, abs=1e-5)
