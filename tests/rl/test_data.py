"""Training batches: length rules and their counts, layout, alignment with the model, shuffling, resume."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.data import BatchIterator, DataConfig, Example, collate, prepare_examples
from rlanything_jax.core.rl.train_step import token_logprobs
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.sampling.strategies import Sampling

EOS = 2
CFG = DataConfig(batch_size=4, max_prompt_tokens=6, max_response_tokens=4, eos_id=EOS, min_bucket=8)


def _example(prompt, response, advantage=1.0):
    return Example(prompt, response, advantage, [-0.5] * len(response))


def test_length_rules_are_applied_and_counted():
    examples = [_example([1] * 8, [5, EOS]),           # prompt too long -> left-truncated
                _example([3, 4], [5, 6, 7, 8, 9]),     # response too long (after EOS) -> cut to 4
                _example([3, 4], [5, 6]),              # no EOS -> appended
                _example([3, 4], [5, EOS], advantage=0.0)]  # no gradient -> dropped
    kept, counts = prepare_examples(examples, CFG)
    assert counts == dict(examples=4, prompts_dropped=0, prompts_truncated=1, responses_truncated=1,
                          eos_appended=2, zero_advantage_dropped=1, kept=3)
    assert list(kept[0].prompt_ids) == [1] * 6
    assert list(kept[1].response_ids) == [5, 6, 7, 8]
    assert list(kept[2].response_ids) == [5, 6, EOS] and np.isnan(kept[2].old_logprobs[-1])
    dropped, counts = prepare_examples(examples, DataConfig(**{**CFG.__dict__, "overlong_prompt": "drop"}))
    assert counts["prompts_dropped"] == 1 and len(dropped) == 2


def test_only_responses_that_did_not_end_themselves_get_an_eos():
    """A response that stopped on another stop token (Qwen's <|endoftext|> beside its EOS <|im_end|>) or on
    a stop string ended as sampled: nothing is appended. One cut by length still gets the EOS."""
    end_of_text = 7
    cfg = DataConfig(**{**CFG.__dict__, "stop_ids": (EOS, end_of_text)})
    examples = [_example([3, 4], [5, end_of_text]),                      # stopped on another stop token
                dataclasses.replace(_example([3, 4], [5, 6]), stop_string=True),   # stopped on a stop string
                _example([3, 4], [5, EOS]),                              # stopped on EOS
                _example([3, 4], [5, 6])]                                # cut by length
    kept, counts = prepare_examples(examples, cfg)
    assert counts["eos_appended"] == 1
    assert [list(e.response_ids) for e in kept] == [[5, end_of_text], [5, 6], [5, EOS], [5, 6, EOS]]
    # Without the other stop ids (as before), the first one got an EOS after its <|endoftext|>.
    assert list(prepare_examples(examples[:1], CFG)[0][0].response_ids) == [5, end_of_text, EOS]


def test_collate_layout():
    batch = collate([Example([11, 12, 13], [21, EOS], 2.0, [-0.1, -0.2]),
                     Example([14], [22, 23, EOS], -1.0, [-0.3, -0.4, -0.5])], CFG)
    # Width: longest prompt + response = 6 -> bucket 8. Prompts end at column 3 (left-padded).
    np.testing.assert_array_equal(batch.input_ids[:2], [[11, 12, 13, 21, EOS, 0, 0, 0],
                                                        [0, 0, 14, 22, 23, EOS, 0, 0]])
    np.testing.assert_array_equal(batch.attention_mask[:2], [[1, 1, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 0, 0]])
    # Column 2 (the last prompt token) predicts the first response token.
    np.testing.assert_array_equal(batch.loss_mask[:2], [[0, 0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(batch.targets[0, 2:4], [21, EOS])
    np.testing.assert_array_equal(batch.targets[1, 2:5], [22, 23, EOS])
    np.testing.assert_allclose(batch.old_logp[1, 2:5], [-0.3, -0.4, -0.5])
    np.testing.assert_array_equal(batch.advantages, [2.0, -1.0, 0.0, 0.0])
    assert batch.input_ids.shape == (4, 8) and not batch.loss_mask[2:].any()  # empty filler rows


def test_loss_window_keeps_the_columns_from_the_earliest_response_on():
    examples = [Example(list(range(10, 40)), [21, EOS], 1.0, [-0.1, -0.2]),
                Example(list(range(10, 30)), [22, 23, 24, EOS], -1.0, [-0.3, -0.4, -0.5, -0.6])]
    full = collate(examples, DataConfig(**{**CFG.__dict__, "loss_window": False}))
    batch = collate(examples, CFG)
    # Rows of 32 and 24 tokens -> 32 columns. The second row ends at column 32 and shifts left by 2, so its
    # last prompt token (predicting its first response token) sits at column 27: 5 columns -> bucket 8.
    assert full.input_ids.shape == batch.input_ids.shape == (4, 32) and batch.targets.shape == (4, 8)
    np.testing.assert_array_equal(batch.input_ids, full.input_ids)
    for name in ("targets", "loss_mask", "old_logp", "advantages"):
        np.testing.assert_array_equal(getattr(batch, name), getattr(full, name)[..., -8:] if name != "advantages"
                                      else full.advantages)
    assert not full.loss_mask[:, :-8].any()
    np.testing.assert_array_equal(batch.targets[1, 3:7], [22, 23, 24, EOS])


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_batches_line_up_with_the_sampler_logprobs():
    """The train step's log-probabilities at the loss positions equal what the sampler returned."""
    cfg = DecoderConfig(model_type="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=8, qkv_bias=True)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    prompts = [[5, 6, 7, 8, 9], [10, 11], [3, 4, 5]]
    rollouts = Sampler(model).generate(prompts, 6, Sampling(1.0), seed=1, stop_token_ids=[EOS])
    examples = [Example(p, r.token_ids, 1.0, r.logprobs) for p, r in zip(prompts, rollouts)]
    batch = collate(prepare_examples(examples, DataConfig(batch_size=4, max_prompt_tokens=8, max_response_tokens=8,
                                                          eos_id=EOS, append_eos=False))[0],
                    DataConfig(batch_size=4, max_prompt_tokens=8, max_response_tokens=8, eos_id=EOS))
    graphdef, params = nnx.split(model)
    logp = np.asarray(token_logprobs(graphdef, params, jnp.asarray(batch.input_ids),
                                     jnp.asarray(batch.attention_mask), jnp.asarray(batch.targets)))
    mask = batch.loss_mask > 0
    np.testing.assert_allclose(logp[mask], batch.old_logp[mask], atol=1e-4)


def _examples(n=10):
    return [_example([1, 2, i + 3], [i + 10, EOS], advantage=float(i + 1)) for i in range(n)]


def test_deterministic_shuffle_and_resumable_position():
    first = [b.advantages.tolist() for b in BatchIterator(_examples(), CFG)]
    again = [b.advantages.tolist() for b in BatchIterator(_examples(), CFG)]
    other = [b.advantages.tolist() for b in BatchIterator(_examples(), DataConfig(**{**CFG.__dict__, "seed": 1}))]
    assert first == again and first != other
    assert len(first) == 3 and sorted(a for b in first for a in b if a) == [float(i + 1) for i in range(10)]

    iterator = BatchIterator(_examples(), CFG)
    next(iterator)
    state = iterator.state_dict()
    expected = [b.advantages.tolist() for b in iterator]
    resumed = BatchIterator(_examples(), CFG)
    resumed.load_state_dict(state)
    assert [b.advantages.tolist() for b in resumed] == expected
    with pytest.raises(ValueError, match="seed"):
        BatchIterator(_examples(), DataConfig(**{**CFG.__dict__, "seed": 5})).load_state_dict(state)
