"""train.<role>.share_prompts: an update's examples with one prompt train it once, as a shared prefix, with the
same update and metrics as without sharing."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.data import DataConfig, Example, Segment
from rlanything_jax.core.rl.phase import Learner, train_phase
from rlanything_jax.core.rl.shared_prompts import collate_update, micro_batch_layout, prompt_groups, sharing_counts
from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.core.validation import ConfigError

CFG = DecoderConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)
TRAIN = dict(learning_rate=1e-2, aggregation="token_mean", updates_per_step=2, micro_batch_size=2,
             max_prompt_tokens=40, max_response_tokens=8, overlong_prompt="drop", kl_beta=0.05)
# Shared prefixes sum the prompt's gradients in another order than whole rows: float32 rounding, which Adam
# (learning rate 1e-2) turns into parameter differences of up to ~1e-5 where a gradient is near zero (measured:
# 8.5e-6 on one of 2048 weights after 2 epochs, on this machine; another CPU passed at atol 1e-6).
PARAM_TOL = {"rtol": 1e-4, "atol": 2e-5}
LORA = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "targets": ("q_proj", "v_proj", "down_proj")}


def _examples(seed=0, groups=5, judgments=3):
    """A step's judgments: `judgments` examples per prompt (prompts of 6-33 tokens), one lone prompt, and one
    packed example (segments) whose prompt another example repeats."""
    rng = np.random.RandomState(seed)
    out = []
    for g in range(groups):
        prompt = list(rng.randint(3, 60, size=6 + 7 * g))
        for _ in range(judgments - (g == 2)):   # one group of two
            response = list(rng.randint(3, 60, size=rng.randint(1, 6)))
            out.append(Example(prompt, response, float(rng.randn()), list(-3.0 + 0.1 * rng.randn(len(response))),
                               ref_logprobs=list(-3.0 + 0.2 * rng.randn(len(response)))))
    out.append(Example([7, 8, 9], [10, 11], 0.5, [-2.0, -2.5], ref_logprobs=[-2.1, -2.4]))   # a lone prompt
    packed = Example([5, 6, 7, 8], [20, 21, 30, 31, 22, 23], 0.0, [-1.0] * 6, ref_logprobs=[-1.1] * 6,
                     segments=(Segment(0, 2, 1.0), Segment(4, 6, -0.5)))
    out += [packed, dataclasses.replace(packed, segments=None, response_ids=[40, 41], advantage=0.7,
                                        old_logprobs=[-1.5, -1.6], ref_logprobs=[-1.4, -1.7])]
    return out


def _phase(share: bool, lora: bool = False, examples=None, **train):
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    mesh = sharding.build_mesh({"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    config = dict(TRAIN, share_prompts=share, **train)
    if lora:
        config["lora"] = LORA
    learner = Learner(graphdef=graphdef, train_config=config, mesh=mesh, eos_id=2, pad_id=0)
    state = learner.fresh_state(params)
    state, metrics = train_phase(learner, state, _examples() if examples is None else examples, seed=3,
                                 prefix="reward_model")
    return [np.asarray(x) for x in jax.tree.leaves(state.params)], metrics, learner


@pytest.mark.parametrize("lora", [False, True])
def test_sharing_prompts_gives_the_same_parameters_and_metrics(lora):
    epochs = 1 if lora else 2   # LoRA: one epoch (2 updates; the second sees adapters with B != 0), to save time
    plain, plain_metrics, _ = _phase(False, lora, ppo_epochs=epochs)
    shared, shared_metrics, learner = _phase(True, lora, ppo_epochs=epochs)
    assert shared_metrics["reward_model_data/shared_prompt_rows"] > 0   # the updates really shared prefixes
    assert shared_metrics["reward_model_data/shared_prompts"] > 0
    assert all(key[-1] is not None for key in learner.compiled)   # every update took the shared layout
    assert set(plain_metrics) <= set(shared_metrics)
    for name, value in plain_metrics.items():
        np.testing.assert_allclose(shared_metrics[name], value, rtol=2e-4, atol=1e-6, err_msg=name)
    if not lora:   # the second epoch moved the parameters: a real comparison
        assert any(not np.allclose(a, b) for a, b in zip(plain, _phase(False, ppo_epochs=1)[0]))
    for a, b in zip(plain, shared):
        np.testing.assert_allclose(b, a, **PARAM_TOL)


def test_a_wrong_prefix_index_changes_the_update(monkeypatch):
    """The comparison above can fail: rows continuing the wrong prompt give other parameters."""
    from rlanything_jax.core.rl import phase as phase_module

    def swapped(examples, cfg, micro_batch_size):
        batch = collate_update(examples, cfg, micro_batch_size)
        if batch.prefix_index is None:
            return batch
        index = np.asarray(batch.prefix_index).copy()
        index[index % micro_batch_size == 0] += 1   # each micro-batch's first prefix's rows -> its second
        return batch.replace(prefix_index=np.minimum(index, len(batch.prefix_ids) - 1))

    plain, _, _ = _phase(False)
    monkeypatch.setattr(phase_module, "collate_update", swapped)
    wrong, _, _ = _phase(True)
    assert any(not np.allclose(a, b, **PARAM_TOL) for a, b in zip(plain, wrong))


def test_without_repeated_prompts_the_update_is_collated_as_without_sharing():
    examples = [Example([3, 4 + i], [5, 6], 1.0, [-1.0, -1.0]) for i in range(4)]
    cfg = DataConfig(batch_size=4, max_prompt_tokens=8, max_response_tokens=4, eos_id=2)
    batch = collate_update(examples, cfg, micro_batch_size=2)
    assert batch.prefix_ids is None and batch.input_ids.shape == (4, 32)
    assert sharing_counts(batch) == {"shared_prompt_rows": 0, "shared_prompts": 0}
    _, metrics, learner = _phase(True, examples=examples + [dataclasses.replace(examples[0], advantage=-1.0)],
                                 updates_per_step=5)
    assert metrics["reward_model_data/shared_prompt_rows"] == 0 and metrics["reward_model/updates"] == 5
    assert all(key[-1] is None for key in learner.compiled)


def test_the_layout_groups_prompts_into_bucketed_micro_batches():
    a, b, c = [3, 4, 5, 6], [7, 8], [9, 10, 11]
    examples = [Example(p, [20 + i, 21], 1.0, [-1.0, -1.0]) for i, p in enumerate([a, b, a, c, a, b, a, a])]
    assert prompt_groups(examples) == [[0, 2, 4, 6, 7], [1, 5], [3]]
    # At most 2 prefixes and 3 rows a micro-batch: the group of 5 is split.
    assert micro_batch_layout(prompt_groups(examples), 2, 3) == [[[0, 2, 4]], [[6, 7]], [[1, 5], [3]]]
    cfg = DataConfig(batch_size=8, max_prompt_tokens=8, max_response_tokens=4, eos_id=2, min_bucket=4)
    batch = collate_update(examples, cfg, micro_batch_size=2)
    # Plain width 8 (4 + 2 tokens), rows of 4 (the last prompt token and the response): 2 * 8 // 4 = 4 rows a
    # micro-batch -> [a a a a] [a, b b] [c]; micro-batches rounded up to 4, rows to 4, prefixes 2 each.
    assert batch.prefix_ids.shape == (8, 4) and batch.input_ids.shape == (16, 4)
    assert np.asarray(batch.prefix_index).tolist() == [0] * 4 + [2, 3, 3, 2] + [4, 4, 4, 4] + [6] * 4
    np.testing.assert_array_equal(batch.prefix_ids[[0, 2, 3, 4]], [[0, 3, 4, 5], [0, 3, 4, 5], [0, 0, 0, 7],
                                                                    [0, 0, 9, 10]])
    np.testing.assert_array_equal(batch.prefix_mask[[1, 5, 6, 7]], np.zeros((4, 4)))   # filler prefixes
    assert np.asarray(batch.input_ids)[0].tolist() == [6, 20, 21, 0]   # the last prompt token and the response
    assert np.asarray(batch.attention_mask).sum(axis=1).tolist() == [3] * 7 + [0] + [3] + [0] * 7
    assert sharing_counts(batch) == {"shared_prompt_rows": 6, "shared_prompts": 2}


def test_the_switch_is_a_checked_boolean():
    assert TrainConfig().share_prompts is False and TrainConfig(share_prompts=True).share_prompts
    with pytest.raises(ConfigError, match=r"^config\.share_prompts: "):
        TrainConfig(share_prompts=1)
