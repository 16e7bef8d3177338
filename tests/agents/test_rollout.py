"""Batched multi-turn rollouts on real ALFWorld games with a tiny random policy and reward model."""

import dataclasses
from collections import Counter

import numpy as np
import pytest

from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.envs.runner import EnvRunner
from rlanything_jax.agents.judging import JudgeConfig, judge_episodes
from rlanything_jax.agents.rollout import RolloutConfig, play_episodes
from rlanything_jax.core import progress
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld.knobs import GameKnobs
from rlanything_jax.scenarios.text_games import prompts
from rlanything_jax.scenarios.text_games.reference import DialoguePrompts, ReferencePrompts
from tests import hf_reference

SCENARIO = ReferencePrompts()
KNOBS = GameKnobs(num_receptacles=5, num_distractors=1)


@pytest.fixture(scope="module")
def sampler(tmp_path_factory, qwen25_tokenizer):
    path = tmp_path_factory.mktemp("rollout_model")
    hf_reference.build("qwen2", path, vocab_size=qwen25_tokenizer.vocab_size, tie_word_embeddings=True)
    return Sampler(load_pretrained(path), tokenizer=qwen25_tokenizer, config=SamplerConfig(max_cache_length=8192))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("games"))
    kinds = ("pick_and_place_simple", "pick_heat_then_place_in_recep", "look_at_obj_in_light")
    return [alfworld.make_task(seed, kind, KNOBS, out) for seed, kind in enumerate(kinds)]


@pytest.fixture(scope="module")
def runner():
    with EnvRunner(num_workers=2, env_modules=("tests.envs.toy_envs", alfworld.__name__)) as r:
        yield r


def _check_well_formed(episode, config, tokenizer):
    assert 1 <= len(episode.steps) <= config.max_turns
    for t, step in enumerate(episode.steps):
        # The reference's prompt: the whole trajectory so far and the current candidates, built afresh.
        observations = [s.observation.text for s in episode.steps[:t + 1]]
        messages = prompts.policy_messages_full_history(observations, [s.action for s in episode.steps[:t]],
                                                        step.observation.admissible_actions)
        assert list(step.prompt_tokens) == tokenizer.encode_chat(messages)
    for step in episode.steps:
        assert len(step.logprobs) == len(step.response_tokens) > 0
        assert np.all(np.isfinite(step.logprobs)) and np.all(np.asarray(step.logprobs) <= 0)
        assert step.action in step.observation.admissible_actions
        assert step.next_observation is not None


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_random_policy_rollout_and_judgments_are_well_formed(sampler, tasks, runner):
    config = RolloutConfig(continuous_batching=True,
                           group_size=2, max_turns=3, max_new_tokens=8, max_prompt_tokens=8184)
    episodes, counts = play_episodes(sampler, runner, SCENARIO, tasks, config, 0)
    metrics = Counter(counts)
    assert len(episodes) == 6 and {e.group_index for e in episodes} == {0, 1}
    for episode in episodes:
        assert episode.env_error is None and episode.end_reason in ("max_steps", "won", "done")
        _check_well_formed(episode, config, sampler.tokenizer)
    steps = sum(len(e.steps) for e in episodes)
    parsed = sum(v for k, v in metrics.items() if k.startswith("parse/text_game_action/"))
    assert parsed == steps == metrics["rollout/env_steps"]
    assert metrics["parse/text_game_action/no_boxed"] > 0   # random text falls back to index 0, counted
    judgments, judge_counts = judge_episodes(sampler, SCENARIO, episodes,
                                             JudgeConfig(continuous_batching=True,
                                                         num_judgments=2, max_new_tokens=6, batch_size=16), 0)
    metrics.update(judge_counts)
    for episode, judged in zip(episodes, judgments, strict=True):
        assert judged.scores.shape == judged.valid.shape == (len(episode.steps), 2)
        assert set(np.unique(judged.scores)) <= {-1, 0, 1}
        assert len(judged.prompts) == len(episode.steps)
        assert all(len(tokens) == len(logprobs) for row in judged.samples for tokens, logprobs in row)
    judged = sum(v for k, v in metrics.items() if k.startswith("parse/text_game_judgment/"))
    assert judged == 2 * steps
    assert metrics["rollout/reprefills"] >= 2   # turns 2 and 3: the prompts do not extend the last ones


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_dialogue_prompts_reuse_the_cache(sampler, tasks, runner):
    """The dialogue form: each turn's prompt extends the previous prompt and response (the cache carries
    over, nothing is prefilled again), and its first prompt is the reference's."""
    config = RolloutConfig(continuous_batching=True,
                           group_size=1, max_turns=3, max_new_tokens=8, max_prompt_tokens=8184)
    episodes, counts = play_episodes(sampler, runner, DialoguePrompts(), tasks[:2], config, 0)
    metrics = Counter(counts)
    assert metrics["rollout/reprefills"] == 0 and metrics["rollout/reprefilled_rows"] == 0
    for episode in episodes:
        for before, after in zip(episode.steps, episode.steps[1:]):
            head = before.prompt_tokens + before.response_tokens
            assert after.prompt_tokens[:len(head)] == head
        first = episode.steps[0]
        assert list(first.prompt_tokens) == sampler.tokenizer.encode_chat(
            SCENARIO.step_messages(episode.task, dataclasses.replace(episode, steps=()), first.observation))


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_forced_expert_actions_win_every_game(sampler, tasks, runner):
    plans = {t.task_id: alfworld.expert_actions(t) for t in tasks}
    longest = max(len(p) for p in plans.values())
    config = RolloutConfig(continuous_batching=True,
                           group_size=2, max_turns=longest + 1, max_new_tokens=4, max_prompt_tokens=8188)

    def expert(episode, observation):
        return plans[episode.task.task_id][len(episode.steps) - 1]

    episodes, _ = play_episodes(sampler, runner, SCENARIO, tasks, config, 0, action_override=expert)
    assert all(e.won and e.end_reason == "won" for e in episodes)
    assert [len(e.steps) for e in episodes] == [len(plans[e.task.task_id]) for e in episodes]


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_an_environment_killed_mid_episode_ends_only_its_episode(sampler, tasks, runner):
    doomed = Task("toy/doomed", "toy", "reach a multiple of 3")
    config = RolloutConfig(continuous_batching=True,
                           group_size=1, max_turns=3, max_new_tokens=4, max_prompt_tokens=8188)

    def kill_toy_on_second_step(episode, observation):
        return "sigkill" if episode.task.kind == "toy" and len(episode.steps) == 2 else None

    episodes, counts = play_episodes(sampler, runner, SCENARIO, [doomed] + tasks[:2], config, 0,
                                      action_override=kill_toy_on_second_step)
    metrics = Counter(counts)
    assert episodes[0].end_reason == "env_error" and episodes[0].env_error and not episodes[0].trainable
    assert len(episodes[0].steps) == 2
    for episode in episodes[1:]:
        assert episode.env_error is None and len(episode.steps) == 3
    assert metrics["episodes/env_error"] == 1


@pytest.mark.slow   # shares the slow model fixture
def test_a_rollout_prints_progress_lines_of_episodes_done(sampler, tasks, runner, monkeypatch):
    lines = []
    progress.set_sink(lines.append)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)   # a line at every turn
    try:
        config = RolloutConfig(continuous_batching=True,
                               group_size=2, max_turns=2, max_new_tokens=4, max_prompt_tokens=8188)
        episodes, _ = play_episodes(sampler, runner, SCENARIO, tasks[:2], config, 0)
    finally:
        progress.set_sink(print)
    assert len(episodes) == 4 and lines[0].startswith("rollouts: 0/4 episodes (")
    assert lines[-1].startswith("rollouts: 4/4 episodes (100%)") and "elapsed" in lines[-1], lines
