"""ALFWorld task generators (ALGORITHM.md 4.3): difficulty knobs, and the environment model's goal rewrite.

- `procedural_maker`: the raw game's knobs one notch harder or easier (`knobs.harder_knobs` /
  `easier_knobs`), a fresh game of the same task type, kept only when the expert wins it.
- `GoalRewriteGenerator`: the reference's environment-model move. One batched call summarises
  every failed rollout (<= 2 sentences, high-risk steps marked), one batched call asks for
  `num_tries` two-token goal rewrites of the raw game; the lowest-numbered attempt whose rewrite
  the expert wins becomes the candidate (`goal_rewrite.goal_candidate_from_outputs`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Generator, Sequence
from pathlib import Path

from rlanything_jax.agents.curriculum.generators import (
    Ask,
    EnvironmentModel,
    Proposal,
    Proposes,
    VariantMaker,
    annotate,
    check_direction,
)
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.trajectory import JudgedEpisode
from rlanything_jax.core.counts import Counts
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld import goal_rewrite
from rlanything_jax.scenarios.text_games.parsers import parse_failure_summary

log = logging.getLogger(__name__)


def procedural_maker(out_dir: str | Path, verify: bool = True) -> VariantMaker:
    """Builders of games with the raw game's knobs moved one notch (None at the knobs' limit)."""

    def maker(raw: Task, direction: str):
        if "knobs" not in raw.payload:  # an official game: no knobs to move
            return None
        knobs = alfworld.knobs_of(raw)
        moved = (alfworld.harder_knobs if direction == "harder" else alfworld.easier_knobs)(knobs)
        if moved == knobs:
            log.debug("%s: ALFWorld knobs %s cannot get %s", raw.task_id, knobs, direction)
            return None

        def make(seed: int) -> Task | None:
            task = alfworld.make_task(seed, raw.payload["task_type"], moved, str(out_dir))
            if verify and not alfworld.expert_trajectory(task).won:
                log.debug("%s: the expert does not win generated game %s", raw.task_id, task.task_id)
                return None
            return task
        return make

    return maker


class GoalRewriteGenerator(Proposes):
    """The environment model rewrites the raw game's goal types (ALFWorld's env-model move)."""

    def __init__(self, model: EnvironmentModel, out_dir: str | Path, num_tries: int = 8,
                 max_new_tokens: int = 4096, summary_max_new_tokens: int = 512):
        self.model = model
        self.out_dir = str(out_dir)
        self.num_tries = num_tries
        self.max_new_tokens = max_new_tokens
        self.summary_max_new_tokens = summary_max_new_tokens

    def proposal(self, raw: Task, active: Task, direction: str, accuracy: float,
                 episodes: Sequence[JudgedEpisode], step: int) -> Proposal:
        check_direction(direction)
        summaries, counted = yield from self._failure_summaries(raw, episodes, step)
        metrics: Counter = Counter(counted)
        prompts = goal_rewrite.goal_rewrite_prompts(raw, direction, accuracy, summaries, self.num_tries)
        if summaries and not self.model.fits(prompts[-1], self.max_new_tokens):
            metrics["alfworld/goal/summaries_dropped_for_length"] += 1
            prompts = goal_rewrite.goal_rewrite_prompts(raw, direction, accuracy, (), self.num_tries)
        texts = yield Ask(self.model, tuple(prompts), self.max_new_tokens,
                          self.model.sampling_seed(raw, step, "goal"), "alfworld/goal")
        candidate, counts = goal_rewrite.goal_candidate_from_outputs(raw, texts, self.out_dir,
                                                                     exclude_ids={active.task_id})
        metrics.update({f"alfworld/goal/{k}": v for k, v in counts.items()})
        metrics[f"env_model/{raw.kind}/{'proposed' if candidate else 'none'}"] += 1
        return None if candidate is None else annotate(candidate, raw, "env_model", direction, step), metrics

    def _failure_summaries(self, raw: Task, episodes: Sequence[JudgedEpisode],
                           step: int) -> Generator[Ask, list, tuple[list[tuple[int, str]], Counts]]:
        failed = goal_rewrite.failed_episodes(episodes)
        if not failed:
            return [], {}
        prompts = tuple(goal_rewrite.failure_summary_prompt(e) for e in failed)
        texts = yield Ask(self.model, prompts, self.summary_max_new_tokens,
                          self.model.sampling_seed(raw, step, "summary"), "alfworld/summary")
        summaries, metrics = [], Counter()
        for episode, text in zip(failed, texts):
            if text is None:
                continue
            parsed = parse_failure_summary(text)
            metrics[f"alfworld/summary/{parsed.status}"] += 1
            if parsed.ok:
                summaries.append((episode.episode.group_index, parsed.summary))
        return summaries, metrics
