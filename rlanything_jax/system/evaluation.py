"""Evaluating a policy, and its reward model, on a split of tasks: the one code path behind the training
loop's held-out evaluation (`system/run.py`, `eval/success_rate`) and `python -m rlanything_jax.evaluate`.

- `play_split` plays G rollouts of every task with the policy's `Rollouts` (the loop's rollout engine, or
  `ExpertRollouts`), a bounded number of tasks per call, with progress lines on long work.
- `success_report` turns the episodes into success figures: pass@1 (`success_rate`) and pass@k for
  k = 1..G with the unbiased estimator, overall and per task type, with counts.
- `reward_model_report` judges the played episodes with the reward model, as its role does, and scores
  it where labels exist: step accuracy against the expert's labels and outcome accuracy of per-step
  judgments (`loop.episode_metrics`), and the role's own figures (e.g. unit-test accuracy and detection).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from rlanything_jax.agents.envs.base import TASK_GROUP, Task, make_env
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models import RewardModel
from rlanything_jax.agents.rollout import RolloutConfig
from rlanything_jax.agents.scenario import Scenario
from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, StepRecord
from rlanything_jax.core.counts import Counts
from rlanything_jax.system.loop import Rollouts, StepLabeler, check_environment, episode_metrics

PROGRESS_EVERY_S = 30.0


# ---------------------------------------------------------------- success figures


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n rollouts of which c succeeded: 1 - C(n-c, k) / C(n, k)
    (Chen et al., 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def task_type(task: Task) -> str:
    """The task's type for the per-type breakdown: its payload's `task_type` where it has one, else its kind."""
    return str(task.payload.get("task_type") or task.kind)


def _figures(counts: Sequence[tuple[int, int]]) -> dict:
    """Success given (rollouts played, rollouts won) per task; tasks with no played rollout are left out.
    `success_rate`: the fraction of played rollouts won; `pass_at_k`: the mean over tasks of the unbiased
    estimator, for every k up to the fewest rollouts a task has (pass@1 = success_rate when every task has
    as many played rollouts)."""
    played = [(n, c) for n, c in counts if n]
    if not played:
        return {"num_tasks": 0, "episodes": 0, "success_rate": float("nan"), "pass_at_k": {}}
    top = min(n for n, _ in played)
    episodes = sum(n for n, _ in played)
    return {"num_tasks": len(played), "episodes": episodes, "success_rate": sum(c for _, c in played) / episodes,
            "pass_at_k": {str(k): float(np.mean([pass_at_k(n, c, k) for n, c in played]))
                          for k in range(1, top + 1)}}


def _task_group(task: Task) -> str:
    """The benchmark subset a task names (`envs.base.TASK_GROUP`, e.g. OSWorld's domain), or ""."""
    group = task.payload.get(TASK_GROUP)
    return group if isinstance(group, str) else ""


def success_report(episodes: Sequence[Episode]) -> dict:
    """Success and pass@k over all tasks, per task type and per task group (`envs.base.TASK_GROUP`, for tasks
    that name one), with counts (`_figures`); episodes that failed in the environment are not counted."""
    per_task: dict[str, list[int]] = {}
    tasks: dict[str, Task] = {}
    for episode in episodes:
        counts = per_task.setdefault(episode.task.task_id, [0, 0])
        tasks[episode.task.task_id] = episode.task
        if episode.env_error is None:
            counts[0] += 1
            counts[1] += int(episode.won)

    def by(name_of: Callable[[Task], str]) -> dict:
        parts: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for task_id, (n, c) in per_task.items():
            if name := name_of(tasks[task_id]):
                parts[name].append((n, c))
        return {name: _figures(counts) for name, counts in sorted(parts.items())}

    report = _figures([tuple(v) for v in per_task.values()])
    report["env_failures"] = sum(e.env_error is not None for e in episodes)
    report["per_type"] = by(task_type)
    report["per_group"] = by(_task_group)
    return report


def loop_metrics(report: dict) -> dict[str, float]:
    """The training loop's held-out figures (`eval/...`) from a `success_report`: success, episodes, and
    success per task group (`eval/success_rate/<group>`)."""
    return {"eval/success_rate": report["success_rate"], "eval/episodes": report["episodes"],
            **{f"eval/success_rate/{name}": figures["success_rate"]
               for name, figures in report.get("per_group", {}).items()}}


# ---------------------------------------------------------------- playing


class _Progress:
    """Prints `done/total, elapsed, ETA` at least every `every_s` seconds while work goes on."""

    def __init__(self, log: Callable[[str], None] | None, label: str, total: int, every_s: float):
        self.log, self.label, self.total, self.every_s = log, label, total, every_s
        self.done, self.started = 0, time.perf_counter()
        self._stop = threading.Event()
        self._thread = None
        if log is not None:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        eta = f"{elapsed / self.done * (self.total - self.done):.0f} s" if self.done else "unknown"
        return f"{self.label}: {self.done}/{self.total} tasks, {elapsed:.0f} s elapsed, ETA {eta}"

    def advance(self, count: int) -> None:
        self.done += count
        if self.log is not None:
            self.log(self.line())

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            self.log(self.line())

    def close(self) -> None:
        self._stop.set()


def play_split(policy: Rollouts, tasks: Sequence[Task], rollout: RolloutConfig, seed: int, tasks_per_call: int = 0,
               log: Callable[[str], None] | None = None, label: str = "evaluation",
               every_s: float = PROGRESS_EVERY_S) -> list[Episode]:
    """`rollout.group_size` episodes of every task, `tasks_per_call` tasks at a time (0: all): batches the
    size of a training step's reuse its compiled programs and bound the cache's memory."""
    chunk = tasks_per_call or max(len(tasks), 1)
    progress = _Progress(log, label, len(tasks), every_s)
    episodes: list[Episode] = []
    try:
        for start in range(0, len(tasks), chunk):
            part = tasks[start:start + chunk]
            played, _ = policy.play(part, rollout, seed)   # an evaluation reports success, not rollout counts
            episodes += played
            progress.advance(len(part))
    finally:
        progress.close()
    check_environment(episodes, label)
    return episodes


def held_out(policy: Rollouts, tasks: Sequence[Task], rollout: RolloutConfig, seed: int, tasks_per_call: int = 0,
             log: Callable[[str], None] | None = None) -> tuple[list[Episode], dict]:
    """The episodes and the `success_report` of the policy on `tasks`: what the loop and `evaluate` run."""
    episodes = play_split(policy, tasks, rollout, seed, tasks_per_call, log)
    return episodes, success_report(episodes)


@dataclasses.dataclass(frozen=True)
class ExpertRollouts:
    """The scenario's expert as a policy (`loop.Rollouts`): every rollout plays the expert's whole plan in
    the task's environment (no turn limit: a check of the data and the evaluators, whose success is 1.0),
    each step recorded with the answer the policy would write to take its action."""

    scenario: Scenario

    def play(self, tasks: Sequence[Task], config: RolloutConfig, seed: int) -> tuple[list[Episode], Counts]:
        return [expert_episode(self.scenario, task, g) for task in tasks for g in range(config.group_size)], {}

    def update_params(self, params) -> None:
        del params


def expert_episode(scenario: Scenario, task: Task, group_index: int = 0) -> Episode:
    """The expert's play of `task`; an environment that fails makes an episode with `env_error` (a task
    the expert cannot plan raises its error)."""
    plan = scenario.expert.plan(task)
    env = make_env(task.kind)
    steps: list[StepRecord] = []
    won, reason, error = False, "done", None
    try:
        observation = env.reset(task)
        for action in plan:
            result = env.step(action)
            steps.append(StepRecord(observation=observation, prompt_tokens=(), response_tokens=(), logprobs=(),
                                    response_text=scenario.prompts.answer_text(observation, action),
                                    finish_reason="stop", action=action, parse_status="ok",
                                    next_observation=result.observation, won_after=result.won))
            observation, won = result.observation, result.won
            if result.done:
                break
        reason = "won" if won else "done"
    except Exception as failure:  # noqa: BLE001 - reported as the episode's environment error, as the runner does
        reason, error = "env_error", f"{type(failure).__name__}: {failure}"
    finally:
        env.close()
    return Episode(task=task, group_index=group_index, steps=tuple(steps), won=won, end_reason=reason,
                   env_error=error)


# ---------------------------------------------------------------- the reward model


def reward_model_report(episodes: Sequence[Episode], reward_model: RewardModel, config: JudgeConfig, seed: int,
                        step_labeler: StepLabeler | None) -> tuple[list[JudgedEpisode], dict[str, float]]:
    """The reward model on the played episodes (`reward_model/...`): the outcome accuracy of its per-step
    judgments and their step accuracy against the expert's labels, where it judges steps; its role's own
    figures (e.g. a unit-test writer's test accuracy and detection rate)."""
    played = [e for e in episodes if e.trainable]
    judgments, _ = reward_model.role.judge(reward_model.sampler, played, config, seed)
    judged = [JudgedEpisode(e, j) for e, j in zip(played, judgments.steps, strict=True)]
    figures = {k: v for k, v in episode_metrics(judged, step_labeler).items() if k.startswith("reward_model/")}
    return judged, {**figures, **reward_model.role.metrics(judgments)}
