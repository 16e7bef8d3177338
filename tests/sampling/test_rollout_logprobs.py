"""Rollout log-probabilities are the trainer's: every step of real multi-turn rollouts, recomputed by the
train step's own `token_logprobs` (a full forward of the step's prompt + response, temperature 1).

PPO's ratio divides the trainer's probability by the sampler's: a sampler that reports the log-probs
of the distribution it samples from (tempered, top-k/top-p truncated), or whose KV cache drifts from
the recorded history (after `extend`, after a repack into another cache), biases every update while
training still "runs". Rollouts here go through `agents.rollout.play_episodes` on the toy
environment (tests/envs/toy_envs.py) in a worker process, with a tiny random Qwen2 over the real
Qwen2.5 tokenizer and chat template.
"""

import functools
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from rlanything_jax.agents.envs.runner import EnvRunner
from rlanything_jax.agents.rollout import RolloutConfig, play_episodes
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.rl.train_step import token_logprobs
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
from rlanything_jax.scenarios.text_games.reference import DialoguePrompts
from tests import hf_reference
from tests.envs.toy_envs import toy_task

PROMPTS = DialoguePrompts()   # turns extend the cache (the reference style rebuilds each prompt)
TASKS = [toy_task(0), toy_task(1, start=4)]
# The random model's output layer is scaled up so its next-token entropy is ~5 nats (~11.9 is uniform over
# the vocabulary): temperature and truncation then change what is sampled, and the sampling distribution's
# log-probs differ from the model's by ~0.5, far outside the 1e-4 tolerance (checked in each test).
LOGIT_SCALE = 4.0
MAX_CACHE = 1024
BF16_ULP = 2.0 ** -8   # bfloat16 keeps 8 significant bits


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, qwen25_tokenizer):
    path = tmp_path_factory.mktemp("rollout_logprobs_policy")
    torch_model = hf_reference.build("qwen2", path, vocab_size=qwen25_tokenizer.vocab_size)
    with torch.no_grad():
        torch_model.lm_head.weight.mul_(LOGIT_SCALE)
    torch_model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def f32(model_dir, qwen25_tokenizer):
    model = load_pretrained(model_dir)
    return Sampler(model, tokenizer=qwen25_tokenizer, config=SamplerConfig(max_cache_length=MAX_CACHE)), model


@pytest.fixture(scope="module")
def runner():
    with EnvRunner(num_workers=1, env_modules=("tests.envs.toy_envs",)) as r:
        yield r


@functools.partial(jax.jit, static_argnames="graphdef")
def _trainer_view(params, ids, mask, targets, graphdef):
    """The train step's log-probs of `targets` (the last W columns) and the logits behind them."""
    logprobs = token_logprobs(graphdef, params, ids, mask, targets)
    model = nnx.merge(graphdef, params)
    return logprobs, model.logits(model.hidden_states(ids, mask, last=targets.shape[1]))



def trainer_logprobs(model, steps):
    """Per step: the trainer's log-probs of its response tokens [n] and the logits they come from [n, vocab].

    All steps in one left-padded batch: row = prompt + response without its last token, targets = the
    last W tokens of prompt + response (W = the longest response), as a packed training row."""
    sequences = [list(s.prompt_tokens) + list(s.response_tokens) for s in steps]
    length = max(len(s) for s in sequences)
    window = max(len(s.response_tokens) for s in steps)
    ids = np.zeros((len(steps), length), np.int32)
    mask = np.zeros_like(ids)
    for row, sequence in enumerate(sequences):
        ids[row, length - len(sequence):] = sequence
        mask[row, length - len(sequence):] = 1
    graphdef, params = nnx.split(model)
    logprobs, logits = _trainer_view(params, jnp.asarray(ids[:, :-1]), jnp.asarray(mask[:, :-1]),
                                     jnp.asarray(ids[:, length - window:]), graphdef=graphdef)
    logprobs, logits = np.asarray(logprobs), np.asarray(logits)
    return [(logprobs[row, window - len(s.response_tokens):], logits[row, window - len(s.response_tokens):])
            for row, s in enumerate(steps)]


def sampling_logprob(logits: np.ndarray, token: int, temperature: float, top_k: int, top_p: float) -> float:
    """log-probability of `token` under the distribution the strategy samples from (strategies.Sampling),
    in float64: -inf when truncation excludes it."""
    z = logits.astype(np.float64) / temperature
    order = np.argsort(-z, kind="stable")[:top_k or None]
    probs = np.exp(z[order] - z[order].max())
    probs /= probs.sum()
    kept = order[(np.cumsum(probs) - probs) < top_p]
    if token not in kept:
        return -np.inf
    return float(z[token] - np.log(np.sum(np.exp(z[kept] - z.max()))) - z.max())


def check_against_trainer(model, episodes, atol):
    """Every step's recorded log-probs equal the trainer's within atol; returns (step, trainer lp, logits)."""
    steps = [s for e in episodes for s in e.steps]
    assert steps
    out = []
    for step, (expected, logits) in zip(steps, trainer_logprobs(model, steps), strict=True):
        assert len(step.logprobs) == len(step.response_tokens) > 0
        np.testing.assert_allclose(step.logprobs, expected, atol=atol, rtol=0)
        out.append((step, expected, logits))
    return out


def check_continued_caches(episodes, turns):
    """Every episode played `turns` steps, each prompt extending the previous prompt + response."""
    for episode in episodes:
        assert len(episode.steps) == turns and episode.end_reason == "max_steps"
        for before, after in zip(episode.steps, episode.steps[1:]):
            head = before.prompt_tokens + before.response_tokens
            assert after.prompt_tokens[:len(head)] == head and len(after.prompt_tokens) > len(head)


def mean_gap_to_sampling_distribution(checked, temperature, top_k, top_p) -> float:
    gaps = [abs(recorded - sampling_logprob(logits[j], token, temperature, top_k, top_p))
            for step, _, logits in checked
            for j, (token, recorded) in enumerate(zip(step.response_tokens, step.logprobs))]
    return float(np.mean(gaps))


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_tempered_nucleus_rollouts_record_the_models_logprobs_across_extended_turns(f32, runner):
    sampler, model = f32
    config = RolloutConfig(continuous_batching=True,
                           group_size=2, max_turns=3, max_new_tokens=8, max_prompt_tokens=MAX_CACHE - 8,
                           temperature=0.8, top_p=0.95)
    episodes, counts = play_episodes(sampler, runner, PROMPTS, TASKS, config, 3)
    metrics = Counter(counts)
    # Turns 2 and 3 append to each row's cache (Sampler.extend); nothing was re-prefilled.
    assert metrics["rollout/compactions"] == 0
    check_continued_caches(episodes, turns=3)
    checked = check_against_trainer(model, episodes, atol=1e-4)

    tokens = [(t, logits[j]) for step, _, logits in checked for j, t in enumerate(step.response_tokens)]
    greedy = sum(t == int(np.argmax(row)) for t, row in tokens)
    assert 0 < greedy < len(tokens)   # sampled, not decoded greedily
    # Every token is inside the tempered nucleus (with no truncation ~0.95 ** 96 ~ 1% of runs would be).
    assert all(np.isfinite(sampling_logprob(row, t, 0.8, 0, 0.95)) for t, row in tokens)
    # A sampler reporting the log-probs of the tempered nucleus would be off by far more than 1e-4.
    assert mean_gap_to_sampling_distribution(checked, 0.8, 0, 0.95) > 0.1


@pytest.mark.parametrize("slots", [0, 2], ids=["all_at_once", "two_slots_refilled"])
def test_top_k_rollouts_record_the_untruncated_logprobs(f32, runner, slots):
    """With two slots, the second task's episodes join the conversation in the rows the first task's left."""
    sampler, model = f32
    top_k = 4
    config = RolloutConfig(continuous_batching=True,
                           group_size=2, max_turns=3, max_new_tokens=8, max_prompt_tokens=MAX_CACHE - 8,
                           temperature=1.0, top_k=top_k, top_p=1.0)
    episodes, counts = play_episodes(sampler, runner, PROMPTS, TASKS, config, 4, slots=slots)
    metrics = Counter(counts)
    assert metrics["rollout/compactions"] == 0
    assert metrics["rollout/joined_rows"] == (2 if slots else 0)
    check_continued_caches(episodes, turns=3)
    checked = check_against_trainer(model, episodes, atol=1e-4)

    rows = [(t, logits[j]) for step, _, logits in checked for j, t in enumerate(step.response_tokens)]
    assert all(t in np.argsort(-row)[:top_k] for t, row in rows)
    # Drawn from the full softmax, all of them would land in the top k with this probability:
    top_k_mass = [float(np.sum(np.sort(jax.nn.softmax(row))[-top_k:])) for _, row in rows]
    assert np.prod(top_k_mass) < 1e-6
    assert mean_gap_to_sampling_distribution(checked, 1.0, top_k, 1.0) > 0.1


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_logprobs_after_a_repack_and_up_to_a_full_context(f32, runner, monkeypatch):
    """A tight context: the shared cache fills (its rows are moved into a larger cache, `Sampler.repack`, with
    no new prefill, and later turns extend that one) and then the histories outgrow max_prompt_tokens + max_new_tokens
    (`context_full`)."""
    sampler, model = f32
    prefilled: list[list[list[int]]] = []
    start, repack = sampler.start, sampler.repack
    repacked_at: list[int] = []   # the number of steps played when a repack happened

    def recording_start(prompts, *args, **kwargs):
        prefilled.append([list(p) for p in prompts])
        return start(prompts, *args, **kwargs)

    submit_step, stepped = runner.submit_step, [0]   # env steps submitted so far

    def recording_repack(conversation, rows, cache_length):
        repacked_at.append(stepped[0])
        return repack(conversation, rows, cache_length)

    def counting_submit_step(actions, *args, **kwargs):
        stepped[0] += len(actions)
        return submit_step(actions, *args, **kwargs)

    monkeypatch.setattr(sampler, "start", recording_start)
    monkeypatch.setattr(sampler, "repack", recording_repack)
    monkeypatch.setattr(runner, "submit_step", counting_submit_step)
    config = RolloutConfig(continuous_batching=True,
                           group_size=2, max_turns=8, max_new_tokens=8, max_prompt_tokens=MAX_CACHE - 8,
                           temperature=0.8, top_p=0.95)
    episodes, counts = play_episodes(sampler, runner, PROMPTS, TASKS, config, 5)
    metrics = Counter(counts)
    assert metrics["rollout/repacks"] >= 1 and metrics["rollout/compactions"] == 0 and len(prefilled) == 1
    assert metrics["episodes/context_full"] >= 1
    assert any(e.end_reason == "context_full" for e in episodes)
    # Steps were sampled after a repack, the first of them right after it, from the moved cache.
    assert 0 < repacked_at[0] < metrics["rollout/env_steps"]
    check_against_trainer(model, episodes, atol=1e-4)


@pytest.mark.slow
def test_bfloat16_rollouts_match_the_bfloat16_trainer(model_dir, qwen25_tokenizer, runner):
    """Tolerance 2 * 2**-8 * max|logit|. Sampler and trainer run the same bfloat16 model but in a different
    order of operations (one cached token at a time against the whole sequence at once), so each can
    round its activations differently: about one bfloat16 ulp (2**-8 relative) of the largest logit on
    each of the two logits a log-softmax difference involves. (Measured with |logit| <= ~22: max difference
    0.016, mean 5e-4, 0.09 at most with another rollout seed; tolerance ~0.17; the tempered nucleus's
    log-probs are off by ~0.4 on average.)"""
    model = load_pretrained(model_dir, dtype="bfloat16")
    sampler = Sampler(model, tokenizer=qwen25_tokenizer, config=SamplerConfig(max_cache_length=MAX_CACHE))
    config = RolloutConfig(continuous_batching=True,
                           group_size=2, max_turns=3, max_new_tokens=8, max_prompt_tokens=MAX_CACHE - 8,
                           temperature=0.8, top_p=0.95)
    episodes, _ = play_episodes(sampler, runner, PROMPTS, TASKS, config, 3)
    check_continued_caches(episodes, turns=3)
    steps = [s for e in episodes for s in e.steps]
    largest_logit = max(float(np.abs(logits).max()) for _, logits in trainer_logprobs(model, steps))
    tolerance = 2 * BF16_ULP * largest_logit
    checked = check_against_trainer(model, episodes, atol=tolerance)
    assert mean_gap_to_sampling_distribution(checked, 0.8, 0, 0.95) > 2 * tolerance
