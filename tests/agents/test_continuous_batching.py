"""Continuous batching: an ended episode's slot is refilled at once, and what each episode samples does not
depend on how episodes were batched (nor on two cohorts of slots taking turns, one's environments stepping
while the other decodes).

16 toy episodes (tests/envs/toy_envs.py) that end after 1 to 8 turns (the action "finish" is forced at each
task's length; the policy's responses are still sampled and recorded) go through 4 sampler slots. A tiny
random Qwen2 with the real Qwen2.5 tokenizer plays them greedily: each episode's tokens are then a function of
its own history only, so the same 16 episodes played all at once, in waves of whole tasks and through refilled
slots (in one cohort or two) must agree token for token, and the log-probabilities recorded for rows that
joined a running conversation must be the trainer's.
"""

from collections import Counter

import pytest

from rlanything_jax.agents.envs.runner import EnvRunner
from rlanything_jax.agents.rollout import RolloutConfig, RolloutEngine, play_episodes
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
from rlanything_jax.scenarios.text_games.reference import DialoguePrompts
from tests import hf_reference
from tests.envs.toy_envs import toy_task
from tests.sampling.test_rollout_logprobs import check_against_trainer

LENGTHS = (8, 1, 7, 2, 6, 1, 5, 3)   # turns per task; G = 2 episodes each
TASKS = [toy_task(i, start=i) for i in range(len(LENGTHS))]
SLOTS = 4
PROMPTS = DialoguePrompts()   # turns extend the cache: joins, extends and repacks are exercised


@pytest.fixture(scope="module")
def policy(tmp_path_factory, qwen25_tokenizer):
    path = tmp_path_factory.mktemp("continuous_batching_policy")
    hf_reference.build("qwen2", path, vocab_size=qwen25_tokenizer.vocab_size)
    model = load_pretrained(path)
    return Sampler(model, tokenizer=qwen25_tokenizer, config=SamplerConfig(max_cache_length=4096)), model


@pytest.fixture(scope="module")
def runner():
    with EnvRunner(num_workers=1, env_modules=("tests.envs.toy_envs",)) as r:
        yield r


def finish_at_task_length(episode, observation):
    return "finish" if len(episode.steps) >= LENGTHS[TASKS.index(episode.task)] else "add 1"


def _config(continuous_batching: bool = True, **changes) -> RolloutConfig:
    return RolloutConfig(group_size=2, max_turns=10, max_new_tokens=6, max_prompt_tokens=4090, temperature=0.0,
                         continuous_batching=continuous_batching, **changes)


def _play(policy, runner, config: RolloutConfig) -> tuple[list, Counter]:
    engine = RolloutEngine(policy, runner, PROMPTS, action_override=finish_at_task_length)
    episodes, counts = engine.play(TASKS, config, 0)
    return episodes, Counter(counts)


@pytest.mark.slow   # ~60 s on a 2-core CPU
def test_refilled_slots_stay_busy_and_sample_what_a_full_batch_samples(policy, runner):
    sampler, model = policy
    continuous, metrics = _play(sampler, runner, _config(max_live_episodes=SLOTS))
    waves, wave_metrics = _play(sampler, runner, _config(max_live_episodes=SLOTS, continuous_batching=False))
    everyone, _ = play_episodes(sampler, runner, PROMPTS, TASKS, _config(), 0, finish_at_task_length)
    # Two cohorts of 2 slots taking turns: each one's environments step while the other decodes.
    overlapped, overlap_metrics = _play(sampler, runner, _config(max_live_episodes=SLOTS, overlap_env_steps=True))

    assert [len(e.steps) for e in continuous] == [n for n in LENGTHS for _ in range(2)]
    # 66 busy slot-turns: refilled slots take 17 turns (0.97), waves of two tasks 26 (0.63).
    assert metrics["rollout/slot_occupancy"] > 0.8
    assert wave_metrics["rollout/slot_occupancy"] < 0.7
    assert metrics["rollout/busy_slot_turns"] == wave_metrics["rollout/busy_slot_turns"] == sum(2 * n for n in LENGTHS)
    assert metrics["rollout/joined_rows"] == 12   # every late episode joined a running conversation
    assert overlap_metrics["rollout/busy_slot_turns"] == metrics["rollout/busy_slot_turns"]
    assert overlap_metrics["rollout/slot_occupancy"] > 0.8
    # Only a cohort's last turns, when the other has nothing left to decode, wait without overlap.
    assert overlap_metrics["rollout/overlapped_env_steps"] >= 0.8 * overlap_metrics["rollout/env_steps"]
    assert "rollout/overlapped_env_steps" not in metrics
    for played in (waves, everyone, overlapped):
        for ours, theirs in zip(continuous, played, strict=True):
            assert [s.response_tokens for s in ours.steps] == [s.response_tokens for s in theirs.steps]
            assert [s.prompt_tokens for s in ours.steps] == [s.prompt_tokens for s in theirs.steps]
    check_against_trainer(model, continuous, atol=1e-4)


def test_a_join_that_does_not_fit_before_the_write_column_is_refused(policy):
    sampler, _ = policy
    conversation = sampler.start([[1, 2, 3]], 4)
    with pytest.raises(ValueError, match="cannot end at column"):
        sampler.join(conversation, [0], [list(range(1, 40))])
    with pytest.raises(ValueError, match="distinct rows"):
        sampler.join(conversation, [0, 0], [[1], [2]])
