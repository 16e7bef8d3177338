"""One whole RLAnything step of the OSWorld scenario on real local desktops with tiny random Qwen3-VL models:
rollouts with screenshots, m judgments seeing the screenshots before and after each step, consistency
rewards, a candidate resolved, both train steps on examples with images, new weights in both samplers."""

import dataclasses

import jax
import numpy as np
import pytest

from rlanything_jax.agents import sft
from rlanything_jax.agents.curriculum.task_pool import Candidate, propose
from rlanything_jax.agents.envs.base import Observation
from rlanything_jax.agents.trajectory import ExpertStep, LabelledStep
from rlanything_jax.system import warm_start
from rlanything_jax.system.config import load_config
from rlanything_jax.system.loop import rl_step
from rlanything_jax.system.run import build_system
from tests.scenarios.osworld.conftest import require_desktop_packages

pytestmark = pytest.mark.slow


class RecordingJudge:
    """The run's reward-model role, keeping what it judged (to check the prompts' images)."""

    def __init__(self, role):
        self.judge_impl, self.judged, self.episodes = role, [], []

    def __getattr__(self, name):   # the rest of the role: the real one's
        return getattr(self.judge_impl, name)

    def judge(self, reward_model, episodes, config, seed):
        out, counts = self.judge_impl.judge(reward_model, episodes, config, seed)
        self.judged += out.steps
        self.episodes += episodes
        return out, counts


def judge_warm_start(system, state):
    """A few SFT passes of the reward model on judge prompts of made-up screenshots, so that its judgments
    parse (a random model never writes a boxed score, and then every consistency reward is the same)."""
    rng = np.random.default_rng(0)
    task = system.tasks.train[0]
    plan = system.scenario.expert.plan(task)
    examples = []
    for label, action in ((1, plan[0]), (-1, "WAIT")):
        shots = [Observation("", images=(rng.integers(0, 255, (360, 640, 3), np.uint8),)) for _ in range(2)]
        steps = (ExpertStep(shots[0], action, shots[1]),)
        examples += sft.reward_sft_examples(system.samplers["reward"].tokenizer, system.scenario.prompts, task,
                                            [LabelledStep(steps, label)], system.samplers["reward"].image_inputs)
    assert all(len(ex.images) == 2 for ex in examples)
    cfg = dataclasses.replace(system.cfg.warm_start, learning_rate=3e-3, batch_size=2)
    reward = warm_start.train_supervised(system.learners["reward"], state.reward, examples, cfg, 30, 0, "reward",
                                         lambda _: None)
    system.samplers["reward"].update_params(reward.params)
    return dataclasses.replace(state, reward=reward)


def test_one_rlanything_step_on_two_desktops(tmp_path):
    require_desktop_packages()
    cfg = load_config("configs/osworld.py:smoke", [
        f"workdir={tmp_path}", "env.num_train_tasks=2", "env.num_eval_tasks=1", "rollout.tasks_per_step=1",
        "rollout.max_live_episodes=2", "rollout.continuous_batching=true",
        "rollout.max_turns=2", "tasks.max_steps=2", "rollout.max_new_tokens=24",
        "reward.max_new_tokens=32", "reward.band_low=0.0", "reward.band_high=1.0",
        "model.scratch.num_layers=1", "model.scratch.hidden_size=64", "model.scratch.intermediate_size=128",
        "model.scratch.num_heads=2", "model.scratch.num_kv_heads=1", "model.scratch.vocab_size=1024"])
    system = build_system(cfg, tmp_path, log=lambda _: None)
    try:
        state = judge_warm_start(system, system.initial_state())
        # A pending candidate from last step: resolved (accepted or rejected) by this one.
        slot = 0
        candidate, _ = system.services.generator.propose(state.pool.slots[slot].raw, state.pool.slots[slot].active,
                                                         "harder", 1.0, [], 0)
        assert candidate is not None and candidate.payload["source"]["rla_knobs"]["n"] == 2
        state = dataclasses.replace(state, pool=propose(state.pool, slot, Candidate(candidate, "harder", 1.0, 0)))
        judge = RecordingJudge(system.services.reward_model.role)
        def expert_for_first_rollout(episode, observation):   # one rollout of each task plays the expert
            plan = system.scenario.expert.plan(episode.task)
            t = len(episode.steps) - 1
            return plan[t] if episode.group_index == 0 and t < len(plan) else None

        policy = dataclasses.replace(system.services.policy, action_override=expert_for_first_rollout)
        services = dataclasses.replace(system.services, policy=policy,
                                       reward_model=dataclasses.replace(system.services.reward_model, role=judge))
        settings = system.settings
        before = np.array(jax.tree.leaves(state.policy.params)[0])   # the train step donates the params
        new_state, metrics = rl_step(state, services, settings)
    finally:
        system.runner.close()

    assert metrics["rollout/env_steps"] > 0 and metrics["rollout/tokens"] > 0
    # Two cohorts of one slot (the config's overlap_env_steps): one's desktop steps while the other decodes.
    assert metrics["rollout/overlapped_env_steps"] > 0
    assert metrics["rollout/success_rate"] > 0   # the expert-played rollout won on its desktop
    # O = +1 / -1 (won: the evaluator's score > 0), never the evaluator's 0-1 score itself.
    assert {e.outcome for e in judge.episodes if e.trainable} <= {1.0, -1.0}
    assert all(e.outcome == (1.0 if e.won else -1.0) for e in judge.episodes)
    judged = [j for j in judge.judged if j is not None]
    assert judged
    for judgments in judged:
        assert judgments.scores.shape[1] == cfg.reward.num_judgments
        # each judge prompt holds the screenshots before and after its step
        assert all(len(images) == 2 for images in judgments.prompt_images)
    assert metrics["curriculum/accepted"] + metrics["curriculum/rejected"] == 1
    assert new_state.pool.slots[slot].pending is None
    assert metrics.get("parse/osworld_judgment/ok", 0) > 0   # the judgments parse: consistency rewards differ
    assert metrics["policy/updates"] >= 1 and metrics["reward_model/updates"] >= 1
    assert metrics["policy/trained_tokens"] > 0 and metrics["reward_model/trained_tokens"] > 0
    assert not np.array_equal(before, np.asarray(jax.tree.leaves(new_state.policy.params)[0]))
    for role, params in (("policy", new_state.policy.params), ("reward", new_state.reward.params)):
        synced = jax.tree.leaves(system.samplers[role].params)
        assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(synced, jax.tree.leaves(params)))
