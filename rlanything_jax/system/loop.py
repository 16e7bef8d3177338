"""One RLAnything step over declared collaborators (held-out evaluation: system/evaluation.py).

One step: sample tasks (active + pending candidates) -> policy rollouts (`Episode`s) ->
the reward model's judgments, as its role makes them (`reward_models.Judgments`: e.g. every
step judged m times, or m unit tests per task) -> accept/reject last step's candidates ->
propose rewrites for tasks out of the band -> policy update on integrated step rewards (plus
the role's bonus) -> reward-model update on its role's examples -> new weights into both
samplers, in memory. Every constant comes from `LoopSettings`.

`rl_step` reaches the models and the environments only through the protocols below, so a
test can run a step with fakes; stages hand each other immutable records. The math lives
in `core/rl/`, `agents/examples.py`, `agents/reward_models/` and `agents/curriculum/`.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rlanything_jax.agents.curriculum.adaptation import difficulty_direction
from rlanything_jax.agents.curriculum.generators import TaskGenerator, proposal_of, run_proposals
from rlanything_jax.agents.curriculum.task_pool import (
    Candidate,
    TaskPool,
    propose,
    resolve_candidates,
    sample_step_tasks,
)
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.examples import SignalConfig, policy_examples
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models.role import Judgments, RewardModel
from rlanything_jax.agents.rollout_config import RolloutConfig
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, group_by_task, task_accuracy
from rlanything_jax.core.counts import Counts, add_counts
from rlanything_jax.core.rl.data import Example
from rlanything_jax.core.rl.train_state import TrainState, sampler_weights
from rlanything_jax.core.sampling.slots import occupancy
from rlanything_jax.core.seeds import derive_rng, derive_seed
from rlanything_jax.system.metrics import release_host_memory

# ---------------------------------------------------------------- collaborators


class Rollouts(Protocol):
    """Plays episodes with the current policy (agents.rollout.RolloutEngine)."""

    def play(self, tasks: Sequence[Task], config: RolloutConfig, seed: int) -> tuple[list[Episode], Counts]:
        """The tasks' episodes, and what playing them counted (`rollout/...`, `episodes/...`, `time/rollout_*`)."""

    def update_params(self, params: Any) -> None: ...


class Trainer(Protocol):
    """One training phase of a model (rl.phase.Learner): examples -> a new train state and the phase's metrics
    (its counts, `<prefix>/updates` and `<prefix>_data/...`, among them)."""

    def train(self, state: TrainState, examples: Sequence[Example], seed: int,
              prefix: str) -> tuple[TrainState, dict[str, float]]: ...


StepLabeler = Callable[[Episode, int], "int | None"]  # expert label of step t: +1 good, -1 bad, None unknown


@dataclasses.dataclass(frozen=True)
class Services:
    """The resident collaborators of a run; built once by `run.build_system`."""

    policy: Rollouts
    policy_trainer: Trainer
    reward_trainer: Trainer
    reward_model: RewardModel | None = None     # its role (how it judges) and its sampler
    generator: TaskGenerator | None = None
    step_labeler: StepLabeler | None = None
    seed: int = 0
    log: Callable[[str], None] = print
    # Writes a few of each step's judged episodes for people to look at (`traces.write_step_traces`).
    write_traces: Callable[[int, Sequence[JudgedEpisode]], None] | None = None


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    tasks_per_step: int
    rollout: RolloutConfig
    judge: JudgeConfig
    signal: SignalConfig
    use_reward_model: bool = True      # False: nothing is judged (the outcome-only ablation)
    pack_turns: bool = True            # one policy example per episode (core/rl/data.pack_turns), not per step
    train_reward_model: bool = True
    adapt_environment: bool = True
    harder_at: float = 0.8
    easier_at: float = 0.2
    easier_inclusive: bool = True      # accuracy <= easier_at asks for an easier task (False: <)
    accept_low: float = 0.2
    accept_high: float = 0.8


@dataclasses.dataclass(frozen=True)
class SystemState:
    """Everything a checkpoint holds (the samplers are rebuilt from the params)."""

    step: int
    policy: TrainState
    reward: TrainState
    pool: TaskPool


# ---------------------------------------------------------------- the step


def rl_step(state: SystemState, services: Services, settings: LoopSettings) -> tuple[SystemState, dict[str, float]]:
    started = time.perf_counter()
    step, seed = state.step + 1, services.seed
    phase = _PhaseClock(services.log, step)
    picked = sample_step_tasks(state.pool, settings.tasks_per_step, derive_rng(seed, "tasks", step))
    active = [state.pool.slots[i].active for i in picked.active]
    pending = [state.pool.slots[i].pending.task for i in picked.pending]
    episodes, rollout_counts = services.policy.play(active + pending, settings.rollout,
                                                    derive_seed(seed, "rollout", step))
    check_environment(episodes, f"step {step}")
    failed = sum(e.env_error is not None for e in episodes)
    env_failures = f", {failed} failed in the environment" if failed else ""
    phase.done("rollout", f"{len(episodes)} episodes of {len(active)} tasks + {len(pending)} candidates, "
                          f"{sum(e.won for e in episodes)} won{env_failures}")

    reward_model = services.reward_model if settings.use_reward_model else None
    judgments, judge_counts = Judgments.none(len(episodes)), {}
    if reward_model is not None:
        judgments, judge_counts = reward_model.role.judge(reward_model.sampler, episodes, settings.judge,
                                                            derive_seed(seed, "judge", step))
        phase.done(reward_model.role.phase, judgments.summary)
    judged_episodes = [JudgedEpisode(e, j) for e, j in zip(episodes, judgments.steps, strict=True)]
    if services.write_traces is not None:
        services.write_traces(step, judged_episodes)
    groups = group_by_task(judged_episodes)
    accuracy = {task_id: task_accuracy(judged) for task_id, judged in groups.items()}

    pool, accepted, rejected = resolve_candidates(
        state.pool, {t.task_id: accuracy.get(t.task_id) for t in pending}, step,
        settings.accept_low, settings.accept_high)
    for task_id in rejected:  # a rejected candidate's rollouts are not trained on
        groups.pop(task_id, None)
    judgments = judgments.without(rejected)
    adapt_counts: Counts = {}
    if settings.adapt_environment and services.generator is not None:
        pool, adapt_counts = _adapt(pool, picked.active, groups, accuracy, services.generator, settings, step)
        proposed = sum(s.pending is not None and s.pending.proposed_at == step for s in pool.slots)
        phase.done("adaptation", f"{proposed} rewrites proposed")

    bonus = reward_model.role.policy_bonus(judgments, settings.signal) if reward_model is not None else None
    examples, policy_data_counts = policy_examples(groups, settings.signal, settings.pack_turns, bonus)
    policy_state, policy_metrics = services.policy_trainer.train(
        state.policy, examples, derive_seed(seed, "policy_data", step), "policy")
    phase.done("policy update", f"{int(policy_metrics['policy/updates'])} updates")
    reward_state, reward_metrics, reward_data_counts = state.reward, {}, {}
    if settings.train_reward_model and reward_model is not None:
        examples, reward_data_counts = reward_model.role.training_examples(judgments, groups, settings.signal)
        reward_state, reward_metrics = services.reward_trainer.train(
            state.reward, examples, derive_seed(seed, "reward_data", step), "reward_model")
        phase.done("reward-model update", f"{int(reward_metrics['reward_model/updates'])} updates")
    services.policy.update_params(sampler_weights(policy_state))
    if services.reward_model is not None and services.reward_model.sampler is not None:
        services.reward_model.sampler.update_params(sampler_weights(reward_state))

    played = [j for judged in groups.values() for j in judged if j.episode.env_error is None]
    # The stages' counts add up; the values below replace, never add.
    report: dict[str, float] = add_counts(rollout_counts, judge_counts, adapt_counts, policy_data_counts,
                                          reward_data_counts, phase.counts)
    report.update(policy_metrics)
    report.update(reward_metrics)
    report.update(episode_metrics(played, services.step_labeler))
    if reward_model is not None:
        report.update(reward_model.role.metrics(judgments))
    report.update({"curriculum/accepted": len(accepted), "curriculum/rejected": len(rejected),
                   "curriculum/accepted_total": pool.accepted_count,
                   "curriculum/pending": sum(s.pending is not None for s in pool.slots),
                   "time/step_s": time.perf_counter() - started})
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
    """Logs each phase of a step as it ends and counts its seconds (`time/<phase>_s`) and the host memory handed
    back after it (`memory/host_released_gib`)."""

    def __init__(self, log: Callable[[str], None], step: int):
        self.log, self.step = log, step
        self.counts: dict[str, float] = {}
        self.last = time.perf_counter()

    def done(self, name: str, detail: str) -> None:
        now = time.perf_counter()
        key = f"time/{name.replace(' ', '_').replace('-', '_')}_s"
        self.counts[key] = self.counts.get(key, 0.0) + now - self.last
        released = self.counts.get("memory/host_released_gib", 0.0) + release_host_memory()  # the phase's freed buffers
        self.counts["memory/host_released_gib"] = released
        self.log(f"  step {self.step} {name}: {detail} ({now - self.last:.1f} s)")
        self.last = now


def _adapt(pool: TaskPool, slot_indices: Sequence[int], groups: Mapping[str, Sequence[JudgedEpisode]],
           accuracy: Mapping[str, float | None], generator: TaskGenerator, settings: LoopSettings,
           step: int) -> tuple[TaskPool, Counts]:
    """Asks for a rewrite of every played active task whose accuracy left the band, all tasks' proposals
    side by side (`run_proposals`: the environment model answers every task's prompts of a round at once);
    the pool with the candidates, and the counts of the proposals (`agents/curriculum/...`) and of the generator's
    work (`curriculum/generator/...`)."""
    asked: list[tuple[int, str, float]] = []
    proposals = []
    for index in slot_indices:
        slot = pool.slots[index]
        acc = accuracy.get(slot.active.task_id)
        if acc is None or slot.pending is not None:
            continue
        code = int(difficulty_direction(acc, settings.easier_at, settings.harder_at, settings.easier_inclusive))
        if code == 0:
            continue
        direction = "harder" if code > 0 else "easier"
        asked.append((index, direction, acc))
        proposals.append(proposal_of(generator, slot.raw, slot.active, direction, acc,
                                     groups.get(slot.active.task_id, []), step))
    candidates, made = run_proposals(proposals)
    counts: Counter = Counter({f"curriculum/generator/{k}": v for k, v in made.items() if v})
    if made.get("env_model/slot_steps"):   # the environment model's rows refilled across tasks' rewrites
        counts["curriculum/generator/env_model/slot_occupancy"] = occupancy(made, "env_model")
    for (index, direction, acc), candidate in zip(asked, candidates):
        counts[f"curriculum/proposals_{'made' if candidate else 'failed'}"] += 1
        if candidate is not None:
            pool = propose(pool, index, Candidate(task=candidate, goal=direction, prev_acc=float(acc),
                                                  proposed_at=step))
    return pool, counts


# ---------------------------------------------------------------- metrics (held-out evaluation: system/evaluation.py)


def episode_metrics(judged: Sequence[JudgedEpisode], step_labeler: StepLabeler | None) -> dict[str, float]:
    """Success rate, steps, and the reward model's agreement with expert step labels and outcomes."""
    out: dict[str, float] = {}
    if not judged:
        return out
    out["rollout/success_rate"] = float(np.mean([j.episode.won for j in judged]))
    out["rollout/mean_steps"] = float(np.mean([len(j.episode.steps) for j in judged]))
    step_hits, outcome_hits = [], []
    for item in judged:
        episode, judgments = item.episode, item.judgments
        if judgments is None or not episode.steps:
            continue
        votes = np.where(judgments.valid, judgments.scores, 0).astype(np.float32)
        # Outcome accuracy: the sign of the mean step score predicts the outcome.
        outcome_hits.append((votes.mean(axis=1).mean() > 0) == episode.won)
        if step_labeler is not None:
            for t in range(len(episode.steps)):
                label = step_labeler(episode, t)
                if label is not None:
                    step_hits.extend(list(np.where(judgments.valid[t], judgments.scores[t], 0) == label))
    if outcome_hits:
        out["reward_model/outcome_accuracy"] = float(np.mean(outcome_hits))
    if step_hits:
        out["reward_model/step_accuracy"] = float(np.mean(step_hits))
    return out
