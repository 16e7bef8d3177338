"""One RLAnything step, and the run of many.

One step: sample tasks (active + pending candidates) -> policy rollouts -> reward-model
judgments -> accept/reject last step's candidates -> propose rewrites for tasks out of
the band -> policy update on integrated step rewards -> reward-model update on
consistency rewards (tasks in the band) -> new weights into both samplers, in memory
-> checkpoint -> metrics. Every constant comes from the config (`LoopSettings`).

The loop is host-side orchestration; the math lives in `rl/` and `curriculum/`.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from rlanything_jax.agents.judging import JudgeConfig, judge_episodes
from rlanything_jax.agents.scenario import JUDGE_STEPS
from rlanything_jax.agents.rollout import RolloutConfig, play_episodes
from rlanything_jax.agents.trajectory import Episode, group_by_task, task_accuracy
from rlanything_jax.curriculum.adaptation import difficulty_direction
from rlanything_jax.curriculum.task_pool import (Candidate, TaskPool, propose, resolve_candidates,
                                                 sample_step_tasks)
from rlanything_jax.envs.base import Task
from rlanything_jax.agents.examples import SignalConfig, policy_examples, reward_model_examples
from rlanything_jax.rl.phase import Learner, train_phase
from rlanything_jax.rl.train_state import TrainState
from rlanything_jax.sampling.sampler import Sampler
from rlanything_jax.seeds import derive_rng, derive_seed


class TaskGenerator(Protocol):
    """Proposes a rewrite of a slot's raw task in a direction ("harder"/"easier"), or None."""

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[Episode], step: int) -> Task | None: ...


StepLabeler = Callable[[Episode, int], "int | None"]  # expert label of step t: +1 good, -1 bad, None unknown


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    tasks_per_step: int
    rollout: RolloutConfig
    judge: JudgeConfig
    signal: SignalConfig
    reward_model_use: str | None = JUDGE_STEPS  # the scenario's (agents.scenario); None: no reward model
    unit_tests_in_policy_reward: bool = False
    pack_turns: bool = True            # one policy example per episode (rl/data.pack_turns), not per step
    train_reward_model: bool = True
    adapt_environment: bool = True
    harder_at: float = 0.8
    easier_at: float = 0.2
    accept_low: float = 0.2
    accept_high: float = 0.8


    @property
    def judge_steps(self) -> bool:
        return self.reward_model_use == JUDGE_STEPS


@dataclasses.dataclass
class SystemState:
    """Everything a checkpoint holds (the samplers are rebuilt from the params)."""

    step: int
    policy: TrainState
    reward: TrainState
    pool: TaskPool


@dataclasses.dataclass
class Services:
    """The resident pieces one run uses; built once by `main`."""

    policy_sampler: Sampler
    reward_sampler: Sampler
    policy_learner: Learner
    reward_learner: Learner
    runner: Any                        # envs.runner.EnvRunner
    scenario: Any                      # agents.scenario.PolicyPrompts + StepJudgePrompts
    generator: TaskGenerator | None
    step_labeler: StepLabeler | None
    seed: int
    log: Callable[[str], None] = print


def rl_step(state: SystemState, services: Services, settings: LoopSettings) -> tuple[SystemState, dict[str, float]]:
    started = time.perf_counter()
    step = state.step + 1
    metrics: Counter = Counter()
    rng = derive_rng(services.seed, "tasks", step)
    picked = sample_step_tasks(state.pool, settings.tasks_per_step, rng)
    active = [state.pool.slots[i].active for i in picked.active]
    pending = [state.pool.slots[i].pending.task for i in picked.pending]
    rollout_cfg = dataclasses.replace(settings.rollout, seed=derive_seed(services.seed, "rollout", step))
    phase = _PhaseClock(services.log, step, metrics)
    episodes = play_episodes(services.policy_sampler, services.runner, services.scenario, active + pending,
                             rollout_cfg, metrics=metrics)
    check_environment(episodes, f"step {step}")
    failed = sum(e.env_error is not None for e in episodes)
    phase.done("rollout", f"{len(episodes)} episodes of {len(active)} tasks + {len(pending)} candidates, "
                          f"{sum(e.won for e in episodes)} won{f', {failed} failed in the environment' if failed else ''}")
    if settings.judge_steps:
        judge_episodes(services.reward_sampler, services.scenario, episodes,
                       dataclasses.replace(settings.judge, seed=derive_seed(services.seed, "judge", step)), metrics)
        phase.done("judge", f"{sum(len(e.steps) for e in episodes)} steps x {settings.judge.num_judgments}")
    groups = group_by_task(episodes)
    accuracy = {task_id: task_accuracy(eps) for task_id, eps in groups.items()}

    pool, accepted, rejected = resolve_candidates(
        state.pool, {t.task_id: accuracy.get(t.task_id) for t in pending}, step,
        settings.accept_low, settings.accept_high)
    for task_id in rejected:  # a rejected candidate's rollouts are not trained on
        groups.pop(task_id, None)
    if settings.adapt_environment and services.generator is not None:
        pool = _adapt(pool, picked.active, groups, accuracy, services.generator, settings, step, metrics)

    policy_state, policy_metrics = train_phase(
        services.policy_learner, state.policy,
        policy_examples(groups, settings.signal, metrics, pack_turns=settings.pack_turns),
        seed=derive_seed(services.seed, "policy_data", step), metrics=metrics, prefix="policy")
    phase.done("policy update", f"{int(metrics['policy/updates'])} updates")
    reward_state, reward_metrics = state.reward, {}
    if settings.train_reward_model and settings.judge_steps:
        reward_state, reward_metrics = train_phase(
            services.reward_learner, state.reward, reward_model_examples(groups, settings.signal, metrics),
            seed=derive_seed(services.seed, "reward_data", step), metrics=metrics, prefix="reward")
        phase.done("reward-model update", f"{int(metrics['reward/updates'])} updates")
    services.policy_sampler.update_params(policy_state.params)
    services.reward_sampler.update_params(reward_state.params)

    played = [e for e in episodes if e.env_error is None and e.task.task_id not in rejected]
    report = dict(metrics)  # counts so far; the values below replace, never add
    report.update(policy_metrics)
    report.update(reward_metrics)
    report.update(episode_metrics(played, services.step_labeler, settings.judge_steps))
    if services.generator is not None and hasattr(services.generator, "metrics"):
        report.update({f"curriculum/generator/{k}": v for k, v in dict(services.generator.metrics).items()})
    report.update({"curriculum/accepted": len(accepted), "curriculum/rejected": len(rejected),
                   "curriculum/accepted_total": pool.accepted_count,
                   "curriculum/pending": sum(s.pending is not None for s in pool.slots),
                   "time/step_s": time.perf_counter() - started})
    for role, sampler in (("policy", services.policy_sampler), ("reward", services.reward_sampler)):
        report[f"sampler/{role}_compilations"] = sum(sampler.compilations.values())  # so far, in this process
    return SystemState(step=step, policy=policy_state, reward=reward_state, pool=pool), report


class EnvironmentFailure(RuntimeError):
    """Every episode of a step or an evaluation failed in the environment: nothing to learn from."""


def check_environment(episodes: Sequence[Episode], where: str) -> None:
    """Stops the run when no episode could be played (e.g. the environment workers cannot start), with
    the first episode's reason, instead of going on with empty steps."""
    if episodes and all(e.env_error is not None for e in episodes):
        raise EnvironmentFailure(f"{where}: all {len(episodes)} episodes failed in the environment; "
                                 f"the first: {episodes[0].env_error}")


class _PhaseClock:
    """Logs each phase of a step as it ends and records its seconds as `time/<phase>_s`."""

    def __init__(self, log: Callable[[str], None], step: int, metrics: Counter):
        self.log, self.step, self.metrics = log, step, metrics
        self.last = time.perf_counter()

    def done(self, name: str, detail: str) -> None:
        now = time.perf_counter()
        self.metrics[f"time/{name.replace(' ', '_').replace('-', '_')}_s"] += now - self.last
        self.log(f"  step {self.step} {name}: {detail} ({now - self.last:.1f} s)")
        self.last = now


def _adapt(pool: TaskPool, slot_indices: Sequence[int], groups, accuracy, generator: TaskGenerator,
           settings: LoopSettings, step: int, metrics: Counter) -> TaskPool:
    """Asks for a rewrite of every played active task whose accuracy left the band."""
    for index in slot_indices:
        slot = pool.slots[index]
        acc = accuracy.get(slot.active.task_id)
        if acc is None or slot.pending is not None:
            continue
        code = int(difficulty_direction(acc, settings.easier_at, settings.harder_at))
        if code == 0:
            continue
        direction = "harder" if code > 0 else "easier"
        candidate = generator.propose(slot.raw, slot.active, direction, acc, groups.get(slot.active.task_id, []),
                                      step)
        metrics[f"curriculum/proposals_{'made' if candidate else 'failed'}"] += 1
        if candidate is not None:
            pool = propose(pool, index, Candidate(task=candidate, goal=direction, prev_acc=float(acc),
                                                  proposed_at=step))
    return pool


def episode_metrics(episodes: Sequence[Episode], step_labeler: StepLabeler | None,
                    judged: bool) -> dict[str, float]:
    """Success rate, steps, and the reward model's agreement with expert step labels and outcomes."""
    out: dict[str, float] = {}
    if not episodes:
        return out
    out["rollout/success_rate"] = float(np.mean([e.won for e in episodes]))
    out["rollout/mean_steps"] = float(np.mean([len(e.steps) for e in episodes]))
    if not judged:
        return out
    step_hits, outcome_hits = [], []
    for episode in episodes:
        if episode.judgments is None or not len(episode.steps):
            continue
        votes = np.where(episode.judgment_valid, episode.judgments, 0).astype(np.float32)
        step_scores = votes.mean(axis=1)
        # Outcome accuracy: the sign of the mean step score predicts the outcome.
        outcome_hits.append((step_scores.mean() > 0) == episode.won)
        if step_labeler is not None:
            for t in range(len(episode.steps)):
                label = step_labeler(episode, t)
                if label is not None:
                    step_hits.extend(list(np.where(episode.judgment_valid[t], episode.judgments[t], 0) == label))
    if outcome_hits:
        out["reward_model/outcome_accuracy"] = float(np.mean(outcome_hits))
    if step_hits:
        out["reward_model/step_accuracy"] = float(np.mean(step_hits))
    return out


def evaluate(policy_sampler: Sampler, runner: Any, scenario: Any, tasks: Sequence[Task],
             rollout: RolloutConfig, tasks_per_call: int = 0) -> dict[str, float]:
    """Held-out success rate of the current policy, playing `tasks_per_call` tasks at a time (0: all):
    batches the size of a training step's reuse its compiled programs and bound the cache's memory."""
    metrics: Counter = Counter()
    chunk = tasks_per_call or max(len(tasks), 1)
    episodes = []
    for start in range(0, len(tasks), chunk):
        episodes += play_episodes(policy_sampler, runner, scenario, tasks[start:start + chunk], rollout,
                                  metrics=metrics)
    check_environment(episodes, "held-out evaluation")
    played = [e for e in episodes if e.env_error is None]
    return {"eval/success_rate": float(np.mean([e.won for e in played])) if played else float("nan"),
            "eval/episodes": len(played)}
