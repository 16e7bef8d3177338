"""Two RLAnything steps of the default configuration (generated ALFWorld games, compact prompts,
scratch-built models), shrunk: 1-layer models, 4 task slots, G = 8, 6 turns.

Everything `rl_step` runs is real: the policy and reward-model samplers, the environment
runner, the procedural task generator, the task pool, the reward and advantage code and
both train phases. Two things are scripted so that the outcome of every group is known in
advance and the expectations can be computed by hand:
- the actions sent to the environment (the rollout engine's own `action_override`): rollout g of
  a task wins iff g < its scripted number of wins, by playing the expert's walkthrough (odd g
  after one "look" when there is room); the others only look around until the turn limit.
  The policy's responses are still sampled and recorded, and are what the train phases see.
- the reading of the judge's text: an untrained model never writes `\\boxed{..}`, so a text
  the real parser rejects is mapped, by a hash of the text, to +1, -1 or "invalid", which
  gives a mix of all three votes.
Every collaborator `rl_step` is given (rollouts, judge, trainers, generator) is wrapped by a
recorder that calls the real one: nothing is monkeypatched.

Script (slot: step-1 task and wins of G = 8 | step-2 task and wins). Bands: policy data [1/8, 7/8],
reward-model data [0.2, 0.8], rewrites outside [0.2, 0.8], acceptance in [0.2, 0.8].
  S0: T0 8/8: acc 1, "harder" candidate C0        | C0 1/8: 0.125 < 0.2, rejected (in the policy band)
  S1: T1 0/8: acc 0, "easier" candidate C1        | C1 6/8: 0 < 0.75 <= 0.8, accepted
  S2: T2 4/8: in every band, no candidate         | T2 7/8: policy data only; "harder" candidate
  S3: P 4/8, pre-seeded "harder" candidate with   | T3 0/8: "easier" candidate
      prev_acc 0.5: 0.5 is not < 0.5, rejected (in both bands)
"""

from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path

import jax
import numpy as np
import pytest

from rlanything_jax.agents.curriculum.adaptation import accept_candidate
from rlanything_jax.agents.curriculum.task_pool import Candidate, TaskPool, propose
from rlanything_jax.agents.envs.runner import EnvRunner
from rlanything_jax.agents.reward_models import RewardModel
from rlanything_jax.agents.reward_models.step_judging import StepJudging
from rlanything_jax.agents.rollout import RolloutEngine
from rlanything_jax.agents.trajectory import ParsedJudgment
from rlanything_jax.core import sharding
from rlanything_jax.core.rl.data import unpack
from rlanything_jax.core.rl.train_state import init_train_state
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.system import assemble
from rlanything_jax.system.config import load_config
from rlanything_jax.system.loop import Services, SystemState, rl_step
from tests.loop_recorder import Recorder

G = 8
MAX_TURNS = 6
OVERRIDES = ["env.num_train_tasks=4", "env.num_eval_tasks=0", "env.workers=1", "rollout.tasks_per_step=4",
             f"rollout.group_size={G}", f"rollout.max_turns={MAX_TURNS}", "model.scratch.num_layers=1",
             "model.scratch.vocab_size=512", "warm_start.enabled=False", "warm_start.num_tasks=4"]


# ------------------------------------------------------------------ scripted pieces

class _Script:
    """How many of a task's G rollouts win; candidates are named by ("candidate", raw task id)."""

    def __init__(self):
        self.wins: dict = {}
        self._plans: dict[str, list[str]] = {}

    @staticmethod
    def key(task):
        if "proposed_by" in task.payload:
            return ("candidate", task.payload["raw_task_id"])
        return task.task_id

    def wins_of(self, task) -> int:
        return self.wins[self.key(task)]  # a KeyError: a task the script did not expect was played

    def action(self, episode, observation) -> str:
        t, g = len(episode.steps) - 1, episode.group_index  # the step just recorded
        if g < self.wins_of(episode.task):
            if episode.task.task_id not in self._plans:
                self._plans[episode.task.task_id] = alfworld.expert_actions(episode.task)
            plan = self._plans[episode.task.task_id]
            plan = ["look"] * (g % 2 and len(plan) < MAX_TURNS - 1) + plan
            assert len(plan) <= MAX_TURNS
            return plan[t]
        return ("look", "inventory")[(t + g) % 2]


@dataclasses.dataclass(frozen=True)
class _HashedJudge:
    """The configured scenario, with untrained judges' texts read as +1 / -1 / invalid by a hash."""

    inner: object
    name: str = "compact_game"

    def __getattr__(self, attribute):
        return getattr(self.inner, attribute)

    def parse_judgment(self, text: str) -> ParsedJudgment:
        parsed = self.inner.parse_judgment(text)
        if parsed.valid:
            return parsed
        code = zlib.crc32(text.encode()) % 3
        return ParsedJudgment(score=(1, -1, 0)[code], valid=code < 2, status="hashed")


def _services(cfg, workdir: Path, runner, script: _Script) -> tuple[Services, SystemState, list, Recorder]:
    """What `run.build_system` builds (without warm start or checkpoints), each collaborator wrapped by a
    recorder that calls the real one."""
    # One device, as the default configuration runs on a CPU (the suite fakes 8, for sharding tests).
    mesh = sharding.build_mesh(dict(cfg.mesh.shape), devices=jax.devices()[:1])
    scenario = assemble.build_scenario(cfg)
    tasks = assemble.build_tasks(cfg, scenario, workdir / "games")
    expert_env = alfworld.AlfworldEnv()
    samplers, learners = {}, {}
    for role in ("policy", "reward"):
        directory = assemble.model_dir(cfg, role, workdir,
                                       lambda: assemble.scratch_corpus(scenario, tasks.train, expert_env))
        model, tokenizer = assemble.load_model(cfg, role, directory, mesh)
        samplers[role] = assemble.sampler_for(cfg, role, model, tokenizer, mesh)
        learners[role] = assemble.learner_for(cfg, role, model, tokenizer, mesh)
    record = Recorder()
    services = Services(
        policy=record.wrap_policy(RolloutEngine(samplers["policy"], runner, scenario.prompts, script.action)),
        reward_model=RewardModel(record.wrap_role(StepJudging(_HashedJudge(scenario.prompts))), samplers["reward"]),
        policy_trainer=record.wrap_trainer(learners["policy"]), reward_trainer=record.wrap_trainer(learners["reward"]),
        generator=record.wrap_generator(assemble.task_generator(cfg, scenario, workdir, None)),
        step_labeler=scenario.expert.step_label, seed=cfg.seed, log=print)
    state = SystemState(step=0, policy=init_train_state(samplers["policy"].params, learners["policy"].tx),
                        reward=init_train_state(samplers["reward"].params, learners["reward"].tx),
                        pool=TaskPool.from_tasks(tasks.train))
    return services, state, tasks.train, record, samplers, learners


# ------------------------------------------------------------------ expectations, by hand (numpy)

def _integrated(judged, lam: float, m: int):
    """R [G, T] = O + lam * mean_j S (invalid votes count 0, still in m), and the step mask [G, T]."""
    steps = max(len(j.episode.steps) for j in judged)
    rewards = np.zeros((len(judged), steps))
    mask = np.zeros((len(judged), steps), bool)
    for g, item in enumerate(judged):
        episode = item.episode
        votes = np.where(item.judgments.valid, item.judgments.scores, 0).astype(np.float64)
        assert votes.shape == (len(episode.steps), m)
        rewards[g, :len(episode.steps)] = (1.0 if episode.won else -1.0) + lam * votes.mean(axis=1)
        mask[g, :len(episode.steps)] = True
    return rewards, mask


def _zscore(values: np.ndarray) -> np.ndarray:
    std = values.std()
    return np.zeros_like(values) if len(values) < 2 or std <= 1e-8 else (values - values.mean()) / std


def _policy_advantages(rewards, mask) -> np.ndarray:
    """Per step index: z-score over the rollouts reaching it; one rollout alone keeps its raw R."""
    advantages = np.zeros_like(rewards)
    for t in range(rewards.shape[1]):
        reach = mask[:, t]
        advantages[reach, t] = rewards[reach, t] if reach.sum() == 1 else _zscore(rewards[reach, t])
    return advantages


def _expected_policy_steps(judged, lam, m):
    rewards, mask = _integrated(judged, lam, m)
    advantages = _policy_advantages(rewards, mask)
    return [(tuple(s.prompt_tokens), tuple(s.response_tokens), advantages[g, t])
            for g, j in enumerate(judged) for t, s in enumerate(j.episode.steps)]


def _expected_reward_model_examples(judged, lam, m, penalty):
    rewards, _ = _integrated(judged, lam, m)
    out = []
    for g, item in enumerate(judged):
        judgments = item.judgments
        for t in range(len(item.episode.steps)):
            raw = np.where(judgments.valid[t], rewards[g, t] * judgments.scores[t], penalty)
            advantages = _zscore(raw.astype(np.float64))
            for j, (tokens, _) in enumerate(judgments.samples[t]):
                out.append((tuple(judgments.prompts[t]), tuple(tokens), advantages[j]))
    return out


def _as_steps(examples):
    """Per-step (prompt, response, advantage) of policy examples; packed ones are unpacked."""
    out = []
    for example in examples:
        for plain in (unpack(example) if example.segments is not None else [example]):
            out.append((tuple(plain.prompt_ids), tuple(plain.response_ids), plain.advantage))
    return out


def _assert_same_examples(actual, expected):
    actual, expected = sorted(actual), sorted(expected)
    assert [a[:2] for a in actual] == [e[:2] for e in expected]
    np.testing.assert_allclose([a[2] for a in actual], [e[2] for e in expected], atol=1e-5)


def _leaves_equal(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


# ------------------------------------------------------------------ the test

@pytest.mark.slow  # about 80 s on 2 CPU cores, nearly all of it compilation
def test_two_loop_steps_route_candidates_rewards_and_advantages(tmp_path):
    cfg = load_config("configs/default.py", OVERRIDES)
    settings = assemble.loop_settings(cfg, assemble.build_scenario(cfg))
    signal = settings.signal
    lam, m, penalty = signal.step_weight, signal.num_judgments, signal.invalid_judgment_reward
    assert settings.pack_turns and settings.adapt_environment and settings.train_reward_model
    assert (signal.policy_acc_low, signal.policy_acc_high, signal.band_low, signal.band_high) == \
        (1 / 8, 7 / 8, 0.2, 0.8)
    assert (settings.easier_at, settings.harder_at, settings.accept_low, settings.accept_high) == (0.2, 0.8, 0.2, 0.8)
    low, high = settings.accept_low, settings.accept_high

    runner = EnvRunner(num_workers=1, step_timeout_s=cfg.env.step_timeout_s, env_modules=(alfworld.__name__,))
    try:
        script = _Script()
        services, state, (t0, t1, t2, t3), record, samplers, learners = _services(cfg, tmp_path, runner, script)
        seeded = alfworld.make_task(100, "pick_and_place_simple", cfg.tasks.game_knobs(),
                                    str(tmp_path / "games"))
        state = dataclasses.replace(state, pool=propose(state.pool, 3, Candidate(seeded, "harder", 0.5, 0)))

        # ---------------------------------------------------------- step 1
        script.wins = {t0.task_id: 8, t1.task_id: 0, t2.task_id: 4, seeded.task_id: 4}
        before = jax.tree.map(np.asarray, (state.policy.params, state.reward.params))
        state1, metrics1 = rl_step(state, services, settings)
        _check_step(state1, metrics1, samplers, learners, record, before, step=1, lam=lam, m=m, penalty=penalty,
                    played={t0.task_id, t1.task_id, t2.task_id, seeded.task_id},
                    accuracy={t0.task_id: 1.0, t1.task_id: 0.0, t2.task_id: 0.5, seeded.task_id: 0.5},
                    rejected={seeded.task_id}, accepted=set(), policy_tasks={t2.task_id},
                    reward_tasks={t2.task_id})
        # Candidates for the played active tasks out of [easier_at, harder_at] only: T0 harder, T1 easier.
        assert [(p[0], p[1], p[2], p[3]) for p in record.proposals] == [(t0.task_id, "harder", 1.0, 1),
                                                                        (t1.task_id, "easier", 0.0, 1)]
        c0, c1 = record.proposals[0][4], record.proposals[1][4]
        assert c0 is not None and c1 is not None
        slots = state1.pool.slots
        assert slots[0].pending == Candidate(c0, "harder", 1.0, 1) and slots[0].active == t0
        assert slots[1].pending == Candidate(c1, "easier", 0.0, 1) and slots[1].active == t1
        assert slots[2].pending is None and slots[2].active == t2
        # The rejected seeded candidate leaves its slot as it was, with the event in its history.
        assert slots[3].pending is None and slots[3].active == t3 and slots[3].raw == t3
        assert [(h.task_id, h.event, h.goal, h.prev_acc, h.now_acc) for h in slots[3].history] == \
            [(seeded.task_id, "rejected", "harder", 0.5, 0.5)]
        assert not bool(accept_candidate("harder", 0.5, 0.5, low, high))
        assert metrics1["curriculum/pending"] == 2 and metrics1["curriculum/accepted_total"] == 0
        assert metrics1["curriculum/proposals_made"] == 2
        assert metrics1["policy_data/tasks_out_of_band"] == 2 and metrics1["reward_model_data/tasks_out_of_band"] == 2

        updates1 = {role: int(getattr(state1, role).step) for role in ("policy", "reward")}  # donated in step 2

        # ---------------------------------------------------------- step 2
        record.reset()
        script.wins = {t2.task_id: 7, t3.task_id: 0, ("candidate", t0.task_id): 1, ("candidate", t1.task_id): 6}
        before = jax.tree.map(np.asarray, (state1.policy.params, state1.reward.params))
        state2, metrics2 = rl_step(state1, services, settings)
        by_task = _check_step(state2, metrics2, samplers, learners, record, before, step=2, lam=lam, m=m,
                              penalty=penalty,
                    played={t2.task_id, t3.task_id, c0.task_id, c1.task_id},
                    accuracy={t2.task_id: 0.875, t3.task_id: 0.0, c0.task_id: 0.125, c1.task_id: 0.75},
                    rejected={c0.task_id}, accepted={c1.task_id}, policy_tasks={t2.task_id, c1.task_id},
                    reward_tasks={c1.task_id})
        # T2's last step index is reached by its one loser alone: its advantage is the raw reward there.
        lengths = sorted(len(j.episode.steps) for j in by_task[t2.task_id])
        assert lengths[-1] == MAX_TURNS > lengths[-2]
        assert not bool(accept_candidate("harder", 1.0, 0.125, low, high))
        assert bool(accept_candidate("easier", 0.0, 0.75, low, high))
        # Only the played active tasks propose (S2 and S3; S0 and S1 played their candidates).
        assert [(p[0], p[1], p[2], p[3]) for p in record.proposals] == [(t2.task_id, "harder", 0.875, 2),
                                                                        (t3.task_id, "easier", 0.0, 2)]
        slots = state2.pool.slots
        assert slots[0].active == t0 and slots[0].raw == t0 and slots[0].pending is None
        assert [(h.task_id, h.event, h.now_acc) for h in slots[0].history] == [(c0.task_id, "rejected", 0.125)]
        assert slots[1].active == c1 and slots[1].raw == t1 and slots[1].pending is None
        assert [(h.task_id, h.event, h.now_acc) for h in slots[1].history] == [(c1.task_id, "accepted", 0.75)]
        assert slots[2].history == () and slots[2].active == t2
        assert slots[2].pending == Candidate(record.proposals[0][4], "harder", 0.875, 2)
        assert slots[3].pending == Candidate(record.proposals[1][4], "easier", 0.0, 2)
        for slot in slots:  # every decision agrees with the acceptance rule
            for h in slot.history:
                assert h.event == ("accepted" if accept_candidate(h.goal, h.prev_acc, h.now_acc, low, high)
                                   else "rejected")
        # The optimizer step counters advance by the updates each phase reported.
        for role, prefix in (("policy", "policy"), ("reward", "reward_model")):
            assert updates1[role] == metrics1[f"{prefix}/updates"]
            assert int(getattr(state2, role).step) == updates1[role] + metrics2[f"{prefix}/updates"]
        assert metrics2["curriculum/pending"] == 2 and metrics2["curriculum/accepted_total"] == 1
        assert metrics2["curriculum/proposals_made"] == 2
        assert metrics2["policy_data/tasks_out_of_band"] == 1 and metrics2["reward_model_data/tasks_out_of_band"] == 2
    finally:
        runner.close()


def _check_step(state, metrics, samplers, learners, record, before, *, step, lam, m, penalty, played, accuracy,
                rejected, accepted, policy_tasks, reward_tasks):
    assert state.step == step
    # Rollouts: active + pending tasks, G each; accuracies as scripted.
    by_task: dict[str, list] = {}
    for item in record.judged():
        assert item.episode.env_error is None and item.judgments is not None
        by_task.setdefault(item.episode.task.task_id, []).append(item)
    assert set(by_task) == played and all(len(v) == G for v in by_task.values())
    assert {k: float(np.mean([j.episode.won for j in v])) for k, v in by_task.items()} == accuracy
    assert metrics["curriculum/accepted"] == len(accepted) and metrics["curriculum/rejected"] == len(rejected)

    (policy_prefix, policy_learner, policy_examples), (reward_prefix, reward_learner, reward_examples) = \
        record.trained
    assert (policy_prefix, reward_prefix) == ("policy", "reward_model")
    assert policy_learner is learners["policy"] and reward_learner is learners["reward"]

    # Policy: per in-band task, the integrated step rewards' per-step-index z-scores; packed per episode.
    assert policy_examples and any(e.segments is not None for e in policy_examples)
    expected = [x for task in sorted(policy_tasks) for x in _expected_policy_steps(by_task[task], lam, m)]
    assert any(abs(x[2]) > 1e-6 for x in expected)
    _assert_same_examples(_as_steps(policy_examples), expected)
    # Reward model: per in-band task, R * S_j (the penalty when invalid) z-scored over the step's m judgments.
    expected = [x for task in sorted(reward_tasks)
                for x in _expected_reward_model_examples(by_task[task], lam, m, penalty)]
    assert any(abs(x[2]) > 1e-6 for x in expected)
    _assert_same_examples([(tuple(e.prompt_ids), tuple(e.response_ids), e.advantage) for e in reward_examples],
                          expected)
    # And, said directly: no step of a rejected candidate or of an out-of-band task is trained on.
    trained_steps = {x[:2] for x in _as_steps(policy_examples)}
    trained_judgments = {(tuple(e.prompt_ids), tuple(e.response_ids)) for e in reward_examples}
    for task_id, task_episodes in by_task.items():
        steps = {(tuple(s.prompt_tokens), tuple(s.response_tokens)) for j in task_episodes for s in j.episode.steps}
        judgments = {(tuple(j.judgments.prompts[t]), tuple(tokens)) for j in task_episodes
                     for t in range(len(j.episode.steps)) for tokens, _ in j.judgments.samples[t]}
        assert bool(steps & trained_steps) == (task_id in policy_tasks), task_id
        assert bool(judgments & trained_judgments) == (task_id in reward_tasks), task_id
        if task_id in rejected:
            assert not steps & trained_steps and not judgments & trained_judgments
    if accepted:
        assert accepted <= policy_tasks

    # Both models were updated, and both samplers hold the new weights.
    assert metrics["policy/updates"] > 0 and metrics["reward_model/updates"] > 0
    assert _leaves_equal(samplers["policy"].params, state.policy.params)
    assert _leaves_equal(samplers["reward"].params, state.reward.params)
    assert not _leaves_equal(before[0], state.policy.params)
    assert not _leaves_equal(before[1], state.reward.params)
    assert metrics["rollout/success_rate"] == pytest.approx(
        np.mean([accuracy[t] for t in played - rejected]))
    return by_task
