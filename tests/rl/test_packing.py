"""Turn packing: one example per multi-turn episode trains exactly as its per-step examples, at O(T) tokens."""

import dataclasses

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.examples import SignalConfig, policy_examples
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, StepJudgments, StepRecord
from rlanything_jax.core import sharding
from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.data import DataConfig, Example, Segment, collate, pack_turns, prepare_examples, unpack
from rlanything_jax.core.rl.phase import Learner, train_phase
from rlanything_jax.core.rl.train_state import init_train_state
from rlanything_jax.core.rl.train_step import TrainSpec, train_step

EOS, OPEN, CLOSE = 2, 3, 4   # <|im_end|>, <|im_start|>user\n, ...<|im_start|>assistant\n
MODEL = DecoderConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=8, num_kv_heads=4, head_dim=8, qk_norm=True)
DATA = DataConfig(batch_size=1, max_prompt_tokens=64, max_response_tokens=64, eos_id=EOS, min_bucket=8)
TASK = Task("t", "alfworld", "goal")


def _delta(response, observation):
    """What the rollout appends before the next turn: the close (unless the response stopped on it)."""
    return ([] if response[-1:] == [EOS] else [EOS]) + [OPEN] + observation + [CLOSE]


def _episode(g, won, responses, rng, finish=None):
    """Step t's prompt = step t-1's prompt + response + delta, as `agents/rollout.py` records them."""
    history, steps = [1, 5, 6, 7, 8, CLOSE], []
    for t, response in enumerate(responses):
        reason = (finish or {}).get(t, "stop" if response[-1] == EOS else "length")
        steps.append(StepRecord(observation=Observation("o"), prompt_tokens=list(history), response_tokens=response,
                                logprobs=list(-4.16 + 0.15 * rng.randn(len(response))), response_text="",
                                finish_reason=reason, action="a", parse_status="ok"))
        history = history + response + _delta(response, [20 + t, 30 + g, 40 + t])
    scores = rng.choice([-1, 1], size=(len(responses), 3)).astype(np.int8)
    n = len(responses)
    judgments = StepJudgments(scores=scores, valid=np.ones_like(scores, bool), texts=(("",) * 3,) * n,
                              prompts=((1,),) * n, samples=((((2,), (-0.1,)),) * 3,) * n)
    return JudgedEpisode(Episode(task=TASK, group_index=g, steps=steps, won=won), judgments)


def _groups(seed=0):
    rng = np.random.RandomState(seed)
    won = _episode(0, True, [[10, 11, 12, EOS], [13, 14, 15], [16, EOS], [17, 18]], rng)   # ended by EOS / by length
    lost = _episode(1, False, [[50, EOS], [51, 52, 53, 54], [55, 56, EOS]], rng)
    return {"t": [won, lost]}


def _grads_and_loss(examples, aggregation, weighted):
    """One SGD(1) step on all `examples` in one batch: (loss, -update = gradient)."""
    kept, _ = prepare_examples(examples, DATA)
    cfg = dataclasses.replace(DATA, batch_size=len(kept), aggregation=aggregation if weighted else None)
    batch = collate(kept, cfg)
    graphdef, params = nnx.split(Decoder(MODEL, rngs=nnx.Rngs(0)))
    tx = optax.sgd(1.0)
    spec = TrainSpec(graphdef, tx, aggregation="token_mean" if weighted else aggregation)
    state = init_train_state(params, tx)
    new, metrics = jax.jit(lambda s, b: train_step(s, b, spec))(state, batch)
    grads = [np.asarray(a) - np.asarray(b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(new.params))]
    return metrics, grads, batch


def _assert_same_training(reference, packed, aggregation):
    ref_metrics, ref_grads, ref_batch = _grads_and_loss(reference, aggregation, weighted=False)
    for examples in (reference, packed):  # the weighted path, per step and packed
        metrics, grads, batch = _grads_and_loss(examples, aggregation, weighted=True)
        for name in ("loss", "policy_loss", "kl", "clip_fraction", "entropy", "ratio_mean"):
            np.testing.assert_allclose(float(metrics[name]), float(ref_metrics[name]), atol=1e-5, err_msg=name)
        assert float(np.sum(batch.loss_mask > 0)) == float(np.sum(ref_batch.loss_mask > 0))  # same trained tokens
        for a, b in zip(grads, ref_grads):
            np.testing.assert_allclose(a, b, atol=1e-5)
    assert 0 < float(ref_metrics["clip_fraction"]) < 1   # both PPO branches are exercised
    assert np.abs(np.concatenate([g.ravel() for g in ref_grads])).max() > 1e-3


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean"])
def test_packed_episodes_train_as_their_steps(aggregation):
    groups = _groups()
    reference = policy_examples(groups, SignalConfig())[0]
    packed, metrics = policy_examples(groups, SignalConfig(), pack_turns=True)
    assert len(reference) == 7 and len(packed) == 2 and all(e.segments is not None for e in packed)
    assert metrics["policy_data/packed_episodes"] == 2 and metrics["policy_data/examples"] == 2
    assert [len(e.segments) for e in packed] == [4, 3]
    assert [(list(p.prompt_ids), list(p.response_ids), p.advantage) for e in packed for p in unpack(e)] == \
        [(list(r.prompt_ids), list(r.response_ids), r.advantage) for r in reference]
    _assert_same_training(reference, packed, aggregation)


@pytest.mark.parametrize("advantages,spans", [([1.5, 0.0, -0.7, 0.0], [(0, 4), (18, 20)]),
                                               ([0.0, 1.5, 0.0, 0.0], [(9, 13)])])
def test_zero_advantage_steps_carry_no_loss(advantages, spans):
    steps = policy_examples(_groups(1), SignalConfig())[0][:4]   # the won episode
    steps = [dataclasses.replace(s, advantage=a) for s, a in zip(steps, advantages)]
    packed = pack_turns(steps)
    (kept,), counts = prepare_examples([packed], DATA)
    assert counts["zero_advantage_segments"] == advantages.count(0.0) and counts["packed_segments"] == len(spans)
    # Nothing after the last trained step is kept (there its missing EOS is appended, as in its plain example).
    assert [tuple(s[:2]) for s in kept.segments] == spans and len(kept.response_ids) == spans[-1][1]
    assert kept.response_ids[-1] == EOS
    _assert_same_training(steps, [packed], "sequence_mean")
    _, zero = prepare_examples([pack_turns([dataclasses.replace(s, advantage=0.0) for s in steps])], DATA)
    assert zero["zero_advantage_dropped"] == 1 and zero["kept"] == 0


def test_eos_rules_and_counts():
    steps = policy_examples(_groups(), SignalConfig())[0][:4]
    plain, plain_counts = prepare_examples(steps, DATA)
    packed, counts = prepare_examples([pack_turns(steps)], DATA)
    assert counts["eos_appended"] == plain_counts["eos_appended"] == 2   # the length-cut step 1 and last step 3
    (example,) = packed
    response = list(example.response_ids)
    # Step 1 ([13, 14, 15]) was cut by length: the close's EOS that follows it is trained, unsampled (NaN).
    s, e, _ = example.segments[1]
    assert response[s:e] == [13, 14, 15, EOS] and np.isnan(example.old_logprobs[e - 1])
    assert response[-3:] == [17, 18, EOS] and np.isnan(example.old_logprobs[-1])
    assert not np.isnan(np.asarray(example.old_logprobs)[[seg.start for seg in example.segments]]).any()

    # A response stopped by a stop string whose next token is not the EOS: nothing extra can be trained there.
    odd = Example([1, 9], [10, 11, OPEN, 12, CLOSE, 13, EOS], 0.0, [-1.0] * 7,
                  segments=(Segment(0, 2, 1.0), Segment(5, 7, -1.0)))
    (kept,), counts = prepare_examples([odd], DATA)
    assert counts["packed_eos_skipped"] == 1 and counts["eos_appended"] == 0
    assert [tuple(s[:2]) for s in kept.segments] == [(0, 2), (5, 7)]
    no_eos, counts = prepare_examples([pack_turns(steps)], dataclasses.replace(DATA, append_eos=False))
    assert counts["eos_appended"] == 0 and [s.end - s.start for s in no_eos[0].segments] == [4, 3, 2, 2]


EVERY_TASK = SignalConfig(policy_acc_low=0.0, policy_acc_high=1.0)


def test_stop_strings_get_no_eos_when_packed():
    """A step that ended on a stop string is followed by the template's close, which the model never
    wrote there: the last one gets no EOS appended, and an earlier one keeps the episode unpacked."""
    rng = np.random.RandomState(0)
    last = _episode(0, True, [[10, 11, EOS], [13, 14, 15]], rng, finish={1: "stop_string"})
    steps = [dataclasses.replace(e, advantage=1.0) for e in policy_examples({"t": [last]}, EVERY_TASK)[0]]
    (packed,), counts = prepare_examples([pack_turns(steps)], DATA)
    assert counts["eos_appended"] == 0 and list(packed.response_ids[-3:]) == [13, 14, 15]
    middle = _episode(0, True, [[10, 11], [13, EOS]], rng, finish={0: "stop_string"})
    steps = [dataclasses.replace(e, advantage=1.0) for e in policy_examples({"t": [middle]}, EVERY_TASK)[0]]
    assert pack_turns(steps) is None
    kept, counts = prepare_examples(steps, DATA)
    assert counts["eos_appended"] == 0 and list(kept[0].response_ids) == [10, 11]


def test_fallbacks_to_per_step_examples():
    groups = _groups()
    won = groups["t"][0]
    steps = list(won.episode.steps)
    steps[2] = dataclasses.replace(steps[2], prompt_tokens=steps[2].prompt_tokens[3:])   # a left-truncated history
    groups["t"][0] = dataclasses.replace(won, episode=dataclasses.replace(won.episode, steps=steps))
    examples, metrics = policy_examples(groups, SignalConfig(), pack_turns=True)
    assert metrics["policy_data/unpacked_episodes"] == 1 and metrics["policy_data/packed_episodes"] == 1
    assert sum(e.segments is None for e in examples) == 4 and len(examples) == 5

    # Longer than max_prompt_tokens + max_response_tokens: the per-step examples, under the plain rules.
    steps = policy_examples(_groups(), SignalConfig())[0][:4]
    tight = dataclasses.replace(DATA, max_prompt_tokens=20, max_response_tokens=4, overlong_prompt="drop")
    kept, counts = prepare_examples([pack_turns(steps)], tight)
    plain, plain_counts = prepare_examples(steps, tight)
    assert counts["packed_fallback"] == 1 and counts["packed_segments"] == 0
    assert [(e.prompt_ids, e.response_ids) for e in kept] == [(e.prompt_ids, e.response_ids) for e in plain]
    assert counts["prompts_dropped"] == plain_counts["prompts_dropped"] == 2
    with pytest.raises(ValueError, match="aggregation"):
        collate(prepare_examples([pack_turns(steps)], DATA)[0], dataclasses.replace(DATA, batch_size=1))


def test_a_realistic_episode_costs_o_t_tokens():
    """10 turns: a 600-token first prompt, 60-token responses, 80-token observations."""
    rng = np.random.RandomState(0)
    history, steps = list(rng.randint(5, 60, 600)), []
    for t in range(10):
        response = list(rng.randint(5, 60, 59)) + [EOS]
        steps.append(Example(list(history), response, 1.0 if t % 2 else -1.0, [-1.0] * 60))
        history += response + list(rng.randint(5, 60, 80))
    cfg = DataConfig(batch_size=10, max_prompt_tokens=2048, max_response_tokens=2048, eos_id=EOS)
    plain, _ = prepare_examples(steps, cfg)
    packed, _ = prepare_examples([pack_turns(steps)], cfg)
    plain_tokens = sum(len(e.prompt_ids) + len(e.response_ids) for e in plain)
    packed_tokens = sum(len(e.prompt_ids) + len(e.response_ids) for e in packed)
    assert (plain_tokens, packed_tokens) == (12_900, 1_920)
    one_row = dataclasses.replace(cfg, batch_size=1, aggregation="sequence_mean")
    plain_cells = sum(collate([e], one_row).input_ids.size for e in plain)
    packed_cells = collate(packed, one_row).input_ids.size
    assert (plain_cells, packed_cells) == (17_408, 2_048)   # padded to buckets, one row per batch


def test_collate_keeps_mixed_rows_in_the_bucket():
    """A packed row (short prompt, long response) next to a plain one (long prompt): rows shift left to fit."""
    packed = pack_turns(policy_examples(_groups(), SignalConfig())[0][:4])
    plain = Example(list(range(5, 45)), [7, EOS], 1.0, [-1.0, -1.0])
    kept, _ = prepare_examples([packed, plain], DATA)
    batch = collate(kept, dataclasses.replace(DATA, batch_size=2, aggregation="sequence_mean"))
    assert batch.input_ids.shape == (2, 64)   # 34 + 40 columns would not fit with the prompts aligned
    for row, ex in enumerate(kept):
        sequence = list(ex.prompt_ids) + list(ex.response_ids)
        start = int(np.argmax(batch.attention_mask[row]))
        assert batch.input_ids[row, start:start + len(sequence)].tolist() == sequence
        # Each segment's weights sum to 1 (sequence_mean) and its targets are its tokens; the per-token
        # arrays cover the last columns (the loss window), so column c is their index c - offset.
        first = start + len(ex.prompt_ids) - 1 - (batch.input_ids.shape[1] - batch.targets.shape[1])
        for s, e, advantage in (ex.segments or [Segment(0, len(ex.response_ids), ex.advantage)]):
            np.testing.assert_allclose(batch.loss_mask[row, first + s:first + e].sum(), 1.0, rtol=1e-6)
            assert batch.targets[row, first + s:first + e].tolist() == list(ex.response_ids[s:e])
            assert np.all(batch.advantages[row, first + s:first + e] == np.float32(advantage))
    assert np.isclose(batch.loss_mask.sum(), 5.0)   # 4 steps + 1


def _one_device_mesh():
    return sharding.build_mesh({"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])


def _phase_config(**overrides) -> dict:
    return dict(dict(learning_rate=1e-3, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8, weight_decay=0.0,
                     max_grad_norm=1.0, clip_eps=0.2, kl_beta=0.01, aggregation="sequence_mean", updates_per_step=1,
                     micro_batch_size=8, max_prompt_tokens=64, max_response_tokens=64, overlong_prompt="drop",
                     append_eos=True, reset_optimizer_each_step=False), **overrides)


def test_phase_trains_packed_examples_like_their_steps():
    """Through `train_phase` (DataConfig.aggregation + a token-mean step): same loss metrics as per step."""
    mesh = _one_device_mesh()
    train = _phase_config()
    results = []
    for pack in (False, True):
        graphdef, params = nnx.split(Decoder(MODEL, rngs=nnx.Rngs(0)))   # the step donates the state
        learner = Learner(graphdef=graphdef, train_config=train, mesh=mesh, eos_id=EOS, pad_id=0)
        _, phase_metrics = train_phase(learner, init_train_state(params, learner.tx),
                                       policy_examples(_groups(), SignalConfig(), pack_turns=pack)[0], seed=0)
        assert phase_metrics["policy/updates"] == 1
        results.append(phase_metrics)
    metrics = results[-1]
    assert metrics["policy_data/packed_segments"] == 7 and metrics["policy_data/kept"] == 2
    for name in ("policy/loss", "policy/kl", "policy/entropy", "policy/clip_fraction"):
        np.testing.assert_allclose(results[1][name], results[0][name], atol=1e-5, err_msg=name)


def test_ppo_epochs_repeat_the_pass_against_the_sampler_logprobs():
    """Three passes: three times the updates over data prepared once; the later passes see the moved
    policy, so the mean ratio to the sampler's log-probs differs from one pass's."""
    mesh = _one_device_mesh()
    train = _phase_config(learning_rate=1e-2, kl_beta=0.0, aggregation="token_mean")
    ratios = []
    for epochs in (1, 3):
        graphdef, params = nnx.split(Decoder(MODEL, rngs=nnx.Rngs(0)))
        learner = Learner(graphdef=graphdef, train_config={**train, "ppo_epochs": epochs}, mesh=mesh, eos_id=EOS,
                          pad_id=0)
        examples = policy_examples(_groups(), SignalConfig(), pack_turns=True)[0]
        state, phase_metrics = train_phase(learner, init_train_state(params, learner.tx), examples, seed=0)
        metrics = phase_metrics
        assert metrics["policy/updates"] == epochs and int(state.step) == epochs
        assert metrics["policy_data/kept"] == 2   # the data is prepared once
        ratios.append(phase_metrics["policy/ratio_mean"])
    assert abs(ratios[1] - ratios[0]) > 1e-3
