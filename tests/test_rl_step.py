"""One RLAnything step with fake collaborators: what each stage hands the next, checked by hand.

`rl_step` reaches models and environments only through its declared protocols (`loop.Rollouts`,
`reward_models.RewardModelRole`, `Trainer`, `TaskGenerator`), so a step runs here in a fraction
of a second with scripted episodes, judgments and trainers that record what they are given (the
reward model's roles are the real ones, with their sampling scripted).
Everything between them is the real code: task sampling, candidate acceptance, adaptation,
integrated rewards, advantages, consistency rewards, bands and the weight hand-back.

Script (G = 4, m = 2): T0 wins 4/4, T1 0/4, T2 2/4; slot 3 plays its pending candidate C3
("harder", prev_acc 0.5), which wins 1/4. A won rollout takes 1 step, a lost one 2. The judge
votes +1, +1 on a won rollout's steps and -1, invalid on a lost one's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rlanything_jax.agents.curriculum.task_pool import Candidate, TaskPool, propose
from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.examples import SignalConfig
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models import Judgments, RewardModel
from rlanything_jax.agents.reward_models.step_judging import StepJudging
from rlanything_jax.agents.reward_models.unit_test_writing import UnitTestWriting
from rlanything_jax.agents.reward_models.unit_tests import ParsedUnitTest, UnitTestJudgments
from rlanything_jax.agents.rollout import RolloutConfig
from rlanything_jax.agents.trajectory import Episode, StepJudgments, StepRecord
from rlanything_jax.system.loop import LoopSettings, Services, SystemState, rl_step

G, M = 4, 2
T0, T1, T2, T3 = (Task(f"t{i}", "fake", f"goal {i}") for i in range(4))
C3 = Task("c3", "fake", "goal 3, harder")
WINS = {"t0": 4, "t1": 0, "t2": 2, "c3": 1}


@dataclasses.dataclass(frozen=True)
class FakeState:
    params: int   # stands for a TrainState: the trainers count their updates here
    base: None = None   # no LoRA base: the samplers get `params` (rl.train_state.sampler_weights)


def _step(task: Task, g: int, t: int) -> StepRecord:
    return StepRecord(observation=Observation(f"{task.task_id} obs {t}"), prompt_tokens=(int(task.task_id[1]), g, t),
                      response_tokens=(7, g, t), logprobs=(-0.5, -0.5, -0.5), response_text="x",
                      finish_reason="stop", action="a", parse_status="ok")


class FakePolicy:
    def __init__(self):
        self.played, self.params = [], None

    def play(self, tasks, config, seed):
        self.played.append([t.task_id for t in tasks])
        episodes = []
        for task in tasks:
            for g in range(config.group_size):
                won = g < WINS[task.task_id]
                steps = [_step(task, g, t) for t in range(1 if won else 2)]
                episodes.append(Episode(task=task, group_index=g, steps=steps, won=won,
                                        end_reason="won" if won else "max_steps"))
        return episodes, {}

    def update_params(self, params):
        self.params = params


class FakeRewardSampler:
    """The reward model's sampler: keeps the weights it is given."""

    def __init__(self):
        self.params = None

    def update_params(self, params):
        self.params = params


@dataclasses.dataclass(frozen=True)
class ScriptedStepJudging(StepJudging):
    """The step-judging role with its judgments scripted (the rest of the role is the real one)."""

    prompts: object = None

    def judge(self, reward_model, episodes, config, seed):
        out = []
        for e in episodes:
            n = len(e.steps)
            scores = np.tile([1, 1] if e.won else [-1, 0], (n, 1)).astype(np.int8)
            valid = np.tile([True, True] if e.won else [True, False], (n, 1))
            out.append(StepJudgments(scores=scores, valid=valid, texts=(("",) * M,) * n,
                                     prompts=tuple((100 + int(e.task.task_id[1]), e.group_index, t) for t in range(n)),
                                     samples=tuple(tuple(((200 + j,), (-1.0,)) for j in range(M)) for _ in range(n))))
        return Judgments(steps=tuple(out)), {}


class RecordingTrainer:
    def __init__(self):
        self.examples = []

    def train(self, state, examples, seed, prefix):
        self.examples.append(list(examples))
        return FakeState(state.params + 1), {f"{prefix}/loss": 0.0, f"{prefix}/updates": 1}


class FakeGenerator:
    def __init__(self):
        self.asked = []

    def propose(self, raw, active, direction, accuracy, episodes, step):
        self.asked.append((raw.task_id, direction, accuracy, len(episodes)))
        return Task(f"{raw.task_id}-{direction}", "fake", "rewritten"), {}


def _settings(**changes) -> LoopSettings:
    settings = LoopSettings(tasks_per_step=3, rollout=RolloutConfig(group_size=G, continuous_batching=True),
                            judge=JudgeConfig(num_judgments=M, continuous_batching=True),
                            signal=SignalConfig(num_judgments=M), pack_turns=False)
    return dataclasses.replace(settings, **changes)


def _state() -> SystemState:
    pool = propose(TaskPool.from_tasks([T0, T1, T2, T3]), 3, Candidate(C3, "harder", 0.5, 0))
    return SystemState(step=0, policy=FakeState(0), reward=FakeState(0), pool=pool)


def _run(settings=None, **collaborators):
    parts = dict(policy=FakePolicy(), policy_trainer=RecordingTrainer(), reward_trainer=RecordingTrainer(),
                 reward_model=RewardModel(ScriptedStepJudging(), FakeRewardSampler()), generator=FakeGenerator(),
                 log=lambda _: None)
    parts.update(collaborators)
    services = Services(**parts)
    state, metrics = rl_step(_state(), services, settings or _settings())
    return services, state, metrics


def _by_prompt(examples):
    return {(tuple(e.prompt_ids), tuple(e.response_ids)): e.advantage for e in examples}


def test_one_step_routes_tasks_candidates_and_examples():
    services, state, metrics = _run()
    assert services.policy.played == [["t0", "t1", "t2", "c3"]]   # every free slot, then the pending candidate
    # C3: harder, 0.25 < 0.5 and >= 0.2 -> accepted into slot 3; T0 (acc 1) and T1 (acc 0) ask for rewrites.
    slot3 = state.pool.slots[3]
    assert slot3.active == C3 and slot3.pending is None and slot3.history[0].event == "accepted"
    assert services.generator.asked == [("t0", "harder", 1.0, G), ("t1", "easier", 0.0, G)]
    assert state.pool.slots[0].pending.task.task_id == "t0-harder"
    assert metrics["curriculum/accepted"] == 1 and metrics["curriculum/accepted_total"] == 1
    # Both models trained once; their new weights went back to the samplers.
    assert (state.step, state.policy, state.reward) == (1, FakeState(1), FakeState(1))
    assert services.policy.params == 1 and services.reward_model.sampler.params == 1
    assert metrics["rollout/success_rate"] == pytest.approx(7 / 16)


def test_policy_examples_are_the_integrated_rewards_z_scored_per_step_index():
    services, _, _ = _run()
    [examples] = services.policy_trainer.examples
    advantages = _by_prompt(examples)
    # Policy band [1/8, 7/8]: T2 (0.5) and C3 (0.25); T0 (1.0) and T1 (0.0) are out.
    assert {prompt[0] for prompt, _ in advantages} == {2, 3}
    # T2: R = 1 + mean(+1, +1) = 2 on the won rollouts' one step, -1 + mean(-1, invalid 0) = -1.5 on the lost
    # rollouts' steps. Step 0: [2, 2, -1.5, -1.5] -> z = [1, 1, -1, -1]; step 1: [-1.5, -1.5] -> std 0 -> 0.
    for g in range(G):
        assert advantages[((2, g, 0), (7, g, 0))] == pytest.approx(1.0 if g < 2 else -1.0, abs=1e-6)
    assert advantages[((2, 2, 1), (7, 2, 1))] == 0.0 and advantages[((2, 3, 1), (7, 3, 1))] == 0.0
    # C3 (one won rollout): step 0 is [2, -1.5, -1.5, -1.5], z-scored with the population std.
    values = np.array([2, -1.5, -1.5, -1.5])
    z = (values - values.mean()) / values.std()
    for g in range(G):
        assert advantages[((3, g, 0), (7, g, 0))] == pytest.approx(z[g], abs=1e-6)


def test_reward_model_examples_are_consistency_rewards_of_in_band_tasks():
    services, _, _ = _run()
    [examples] = services.reward_trainer.examples
    by_prompt = {}
    for e in examples:
        by_prompt.setdefault(tuple(e.prompt_ids), []).append(e.advantage)
    # RM band [0.2, 0.8]: T2 (0.5) and C3 (0.25); one example per judgment.
    assert {p[0] for p in by_prompt} == {102, 103} and len(examples) == M * (2 * 1 + 2 * 2 + 1 + 3 * 2)
    # A won step: R = 2, R * S = [2, 2] -> std 0 -> [0, 0]. A lost step: R = -1.5, [-1.5 * -1, invalid -2]
    # = [1.5, -2] -> z = [1, -1].
    assert by_prompt[(102, 0, 0)] == [0.0, 0.0]
    assert by_prompt[(102, 2, 1)] == pytest.approx([1.0, -1.0], abs=1e-6)


def test_outcome_only_skips_the_reward_model_and_a_rejected_candidate_is_not_trained():
    global WINS
    saved, WINS = WINS, dict(WINS, c3=3)   # C3 at 0.75 is not harder than 0.5: rejected
    try:
        services, state, metrics = _run(_settings(use_reward_model=False, train_reward_model=False,
                                                  signal=SignalConfig(num_judgments=M, step_weight=0.0)),
                                        reward_model=None)
    finally:
        WINS = saved
    assert state.pool.slots[3].active == T3 and state.pool.slots[3].history[0].event == "rejected"
    [examples] = services.policy_trainer.examples
    assert {e.prompt_ids[0] for e in examples} == {2}            # T2 only: C3's rollouts are dropped
    assert services.reward_trainer.examples == [] and state.reward == FakeState(0)
    assert "reward_model/outcome_accuracy" not in metrics


@dataclasses.dataclass(frozen=True)
class ScriptedUnitTestWriting(UnitTestWriting):
    """The unit-test role with two scripted tests per task: the first passed by the won programs only, the
    second unparseable."""

    prompts: object = None
    groups: dict = dataclasses.field(default_factory=dict)   # what it was asked to write tests for

    def write(self, reward_model, groups, config, seed):
        self.groups.update({k: len(v) for k, v in groups.items()})
        out = {}
        for task_id, episodes in groups.items():
            won = np.array([e.won for e in episodes])
            out[task_id] = UnitTestJudgments(
                prompt=(300,), samples=(((301,), (-1.0,)), ((302,), (-1.0,))),
                tests=(ParsedUnitTest("1", "2", True, "ok"), ParsedUnitTest("", "", False, "missing_input")),
                program_passes=np.stack([won, np.zeros_like(won)], axis=1), program_is_gt=won)
        return out, {}


def test_a_unit_test_reward_model_is_written_to_trained_and_reported():
    services, state, metrics = _run(reward_model=RewardModel(ScriptedUnitTestWriting(), FakeRewardSampler()))
    assert services.reward_model.role.groups == {"t0": G, "t1": G, "t2": G, "c3": G}
    assert services.reward_model.sampler.params == 1 and state.reward == FakeState(1)
    [examples] = services.reward_trainer.examples
    assert examples and all(tuple(e.prompt_ids) == (300,) for e in examples)
    assert "reward_model/unit_test_accuracy" in metrics
