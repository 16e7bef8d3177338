"""A training phase: about updates_per_step updates over all examples, nothing dropped, few compilations."""


import jax
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.data import BatchIterator, DataConfig, Example
from rlanything_jax.core.rl.phase import Learner, epoch_seed, train_phase, update_plan
from rlanything_jax.core.rl.train_state import init_train_state

CFG = DecoderConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)
TRAIN = dict(learning_rate=1e-3, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8, weight_decay=0.0, max_grad_norm=1.0,
             clip_eps=0.2, kl_beta=0.01, aggregation="sequence_mean", updates_per_step=2, micro_batch_size=2,
             max_prompt_tokens=16, max_response_tokens=8, overlong_prompt="drop", append_eos=True,
             reset_optimizer_each_step=False)


def _examples(n, seed=0):
    rng = np.random.RandomState(seed)
    out = []
    for i in range(n):
        response = list(rng.randint(3, 60, size=1 + i % 4))
        out.append(Example(list(rng.randint(3, 60, size=4 + i % 5)), response, float(rng.randn()),
                           list(-3.0 + 0.1 * rng.randn(len(response)))))
    out.append(Example(list(range(3, 40)), [5], 1.0, [-1.0]))   # prompt over 16 tokens: dropped
    out.append(Example([3, 4], [5], 0.0, [-1.0]))               # zero advantage: dropped
    return out


def test_update_plan_shares_examples_evenly_and_rounds_micro_batches_up_to_a_power_of_two():
    assert update_plan(9, 2, 2) == (2, 4)      # 5 + 4 per update -> 3 micro-batches of 2 -> 4
    assert update_plan(33, 4, 1) == (4, 16)    # 9, 8, 8, 8 -> 16 rows each
    assert update_plan(65, 4, 1) == (4, 32)
    assert update_plan(64, 4, 1) == (4, 16)
    assert update_plan(3, 4, 1) == (3, 1)      # never an update without an example
    assert update_plan(1, 4, 1) == (1, 1)


@pytest.mark.parametrize("count, updates, expected", [(33, 4, [9, 8, 8, 8]), (65, 4, [17, 16, 16, 16]),
                                                      (9, 2, [5, 4]), (64, 4, [16] * 4)])
def test_every_update_gets_an_even_share_of_the_examples(count, updates, expected):
    """Not [16, 16, 1] for 33 examples in 4 updates (a full Adam step on one example), as batches of a
    fixed rounded-up size gave: each update trains its even share, every example exactly once."""
    examples = [Example([3, 4 + i % 50, 5 + i // 50], [6], 1.0, [-1.0]) for i in range(count)]
    _, rows = update_plan(count, updates, 1)
    batches = list(BatchIterator(examples, DataConfig(batch_size=rows, max_prompt_tokens=8, max_response_tokens=4,
                                                      eos_id=2, seed=3), num_batches=updates))
    assert [int((np.asarray(b.loss_mask).sum(axis=1) > 0).sum()) for b in batches] == expected
    assert all(b.input_ids.shape[0] == rows for b in batches)
    seen = sorted(tuple(row[row > 0][:3]) for b in batches for row, m in zip(np.asarray(b.input_ids),
                                                                              np.asarray(b.loss_mask)) if m.any())
    assert seen == sorted(tuple(e.prompt_ids) for e in examples)


def test_phase_trains_every_kept_example_in_about_updates_per_step_updates():
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    mesh = sharding.build_mesh({"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    learner = Learner(graphdef=graphdef, train_config=TRAIN, mesh=mesh, eos_id=2, pad_id=0)
    state = init_train_state(params, learner.tx)
    before = [np.asarray(x) for x in jax.tree.leaves(state.params)]
    state, phase_metrics = train_phase(learner, state, _examples(9), seed=0)
    metrics = phase_metrics
    assert metrics["policy_data/kept"] == 9 and metrics["policy_data/prompts_dropped"] == 1
    assert metrics["policy_data/zero_advantage_dropped"] == 1
    assert metrics["policy/updates"] == 2 and int(state.step) == 2   # 5 + 4 examples, in batches of 8 rows
    assert np.isfinite(phase_metrics["policy/loss"])
    after = [np.asarray(x) for x in jax.tree.leaves(state.params)]
    assert any(not np.allclose(a, b) for a, b in zip(before, after))
    # A second phase of the same size reuses the compiled steps.
    compiled = len(learner.compiled)
    state, _ = train_phase(learner, state, _examples(9, seed=1), seed=1)
    assert len(learner.compiled) <= compiled + 1   # at most a new width bucket


def test_epoch_seeds_are_keyed_by_seed_and_epoch():
    """The old `seed + 7919 * epoch` gave phase 7919's first pass the shuffle of phase 0's second."""
    seeds = {epoch_seed(seed, epoch) for seed in (0, 1, 7919, 7920) for epoch in range(3)}
    assert len(seeds) == 12 and all(0 <= s < 2 ** 31 for s in seeds)
    assert epoch_seed(5, 1) == epoch_seed(5, 1)
