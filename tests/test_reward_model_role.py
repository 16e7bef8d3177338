"""A reward-model role defined here, in tests/ only: a rule scores each step's action, no reward-model LLM.

It is registered by name (`reward_models.register_role`), made from the registry as a scenario's role
is, and plugged into a real `rl_step` with no edit to generic code. One task, G = 4 one-step rollouts:
g0 won with "go", g1 won with "stop", g2 lost with "go", g3 lost with "stop". The rule votes +1 on "go"
and -1 on anything else, m = 2 times, so the policy's integrated rewards R = O + lambda * mean(S) are
[2, 0, 0, -2], z-scored to [sqrt 2, 0, 0, -sqrt 2], where outcomes alone give [1, 1, -1, -1].
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rlanything_jax.agents.curriculum.task_pool import TaskPool
from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.examples import SignalConfig
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models import Judgments, RewardModel, make_role, register_role, role_names
from rlanything_jax.agents.rollout import RolloutConfig
from rlanything_jax.agents.trajectory import Episode, StepJudgments, StepRecord
from rlanything_jax.system.loop import LoopSettings, Services, SystemState, rl_step
from tests.test_rl_step import FakeState, RecordingTrainer

RULE = "tests_go_rule"
G, M = 4, 2
TASK = Task("t", "fake", "go somewhere")
PLAYS = (("go", True), ("stop", True), ("go", False), ("stop", False))   # rollout g: (its action, won)


@dataclasses.dataclass(frozen=True)
class GoRule:
    """Judges every step by its action's text: +1 for "go", -1 otherwise, m times; it has no model to train."""

    word: str = "go"
    name: str = RULE
    phase: str = "rule"
    held_out_judgments: int = 0

    def judge(self, reward_model, episodes, config, seed):
        steps = []
        for episode in episodes:
            scores = np.array([[1 if s.action == self.word else -1] * config.num_judgments for s in episode.steps],
                              np.int8).reshape(len(episode.steps), config.num_judgments)
            steps.append(StepJudgments(scores=scores, valid=np.ones(scores.shape, bool), texts=(), prompts=(),
                                       samples=()))
        return Judgments(steps=tuple(steps), summary="by rule"), {"rule/steps": sum(len(e.steps) for e in episodes)}

    def policy_bonus(self, judgments, signal):
        return None

    def training_examples(self, judgments, groups, signal):
        return [], {}

    def warm_start_examples(self, tokenizer, task, steps, expert, env, rng, negatives_per_step, image_inputs=None):
        return []

    def corpus_texts(self, render, task, episode):
        return []

    def metrics(self, judgments):
        scores = np.concatenate([j.scores[:, 0] for j in judgments.steps if j is not None])
        return {"reward_model/rule_go_fraction": float(np.mean(scores > 0))}

    def probe(self, reward_model, tasks, scenario, env, config, seed, negatives_per_step):
        return None


register_role(RULE, lambda prompts, cfg: GoRule())


class ScriptedPolicy:
    def __init__(self):
        self.params = None

    def play(self, tasks, config, seed):
        return [Episode(task=task, group_index=g, won=won, end_reason="won" if won else "max_steps",
                        steps=(StepRecord(observation=Observation("start"), prompt_tokens=(1, g),
                                          response_tokens=(2, g), logprobs=(-0.5, -0.5), response_text=action,
                                          finish_reason="stop", action=action, parse_status="ok"),))
                for task in tasks for g, (action, won) in enumerate(PLAYS[:config.group_size])], {}

    def update_params(self, params):
        self.params = params


def _step(use_reward_model: bool):
    services = Services(policy=ScriptedPolicy(), policy_trainer=RecordingTrainer(), reward_trainer=RecordingTrainer(),
                        reward_model=RewardModel(make_role(RULE, prompts=None)), log=lambda _: None)
    settings = LoopSettings(tasks_per_step=1, rollout=RolloutConfig(group_size=G, continuous_batching=True),
                            judge=JudgeConfig(num_judgments=M, continuous_batching=True),
                            signal=SignalConfig(num_judgments=M, step_weight=1.0 if use_reward_model else 0.0),
                            use_reward_model=use_reward_model, train_reward_model=use_reward_model, pack_turns=False,
                            adapt_environment=False)
    state = SystemState(step=0, policy=FakeState(0), reward=FakeState(0), pool=TaskPool.from_tasks([TASK]))
    new_state, metrics = rl_step(state, services, settings)
    [examples] = services.policy_trainer.examples
    return {e.prompt_ids[1]: e.advantage for e in examples}, metrics, services, new_state


def test_a_role_registered_from_tests_judges_a_real_step():
    assert RULE in role_names()
    advantages, metrics, services, state = _step(use_reward_model=True)
    root2 = math.sqrt(2)   # R = [2, 0, 0, -2]: mean 0, population std sqrt 2
    assert [advantages[g] for g in range(G)] == pytest.approx([root2, 0.0, 0.0, -root2], abs=1e-6)
    assert metrics["rule/steps"] == G and "time/rule_s" in metrics
    assert metrics["reward_model/rule_go_fraction"] == 0.5          # the role's own figure, reported
    assert metrics["reward_model/outcome_accuracy"] == 0.5          # per-step judgments, scored generically
    assert services.reward_trainer.examples == [[]] and state.reward == FakeState(1)   # nothing to learn


def test_without_the_reward_model_the_rule_is_not_asked():
    advantages, metrics, _, _ = _step(use_reward_model=False)
    assert [advantages[g] for g in range(G)] == pytest.approx([1.0, 1.0, -1.0, -1.0], abs=1e-6)
    assert "rule/steps" not in metrics and "reward_model/rule_go_fraction" not in metrics


def test_a_role_must_be_registered():
    with pytest.raises(KeyError, match="unknown reward-model role"):
        make_role("no_such_role", prompts=None)
