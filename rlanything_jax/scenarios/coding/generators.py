"""The environment model's coding move (ALGORITHM.md 4.3): a harder or easier problem with its tests,
anchored on the slot's root problem, from `num_samples` answers of one prompt. The root may be a stdio
or a function (HumanEval) problem; the new problem is a stdio one."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from rlanything_jax.agents.curriculum.generators import (
    Ask,
    EnvironmentModel,
    Proposal,
    Proposes,
    annotate,
    check_direction,
)
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.trajectory import JudgedEpisode
from rlanything_jax.scenarios.coding import problems

log = logging.getLogger(__name__)


class ProblemRewriteGenerator(Proposes):
    def __init__(self, model: EnvironmentModel, max_new_tokens: int = 4096, num_samples: int = 3,
                 min_tests: int = 4, max_tests: int | None = 16, sandbox_workers: int | None = None):
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.num_samples = num_samples
        self.min_tests = min_tests
        self.max_tests = max_tests
        self.sandbox_workers = sandbox_workers

    def proposal(self, raw: Task, active: Task, direction: str, accuracy: float,
                 episodes: Sequence[JudgedEpisode], step: int) -> Proposal:
        del accuracy  # the prompt shows per-test pass rates instead
        check_direction(direction)
        metrics: Counter = Counter()
        if not all(problems.is_stdio_task(t) or problems.is_function_task(t) for t in (raw, active)):
            metrics[f"env_model/unsupported/{raw.payload.get('format')}"] += 1
            return None, metrics
        try:
            rates = problems.measured_pass_rates(active, [j.episode for j in episodes], self.sandbox_workers)
        except Exception as error:  # noqa: BLE001 -- the prompt can go without pass rates
            metrics["coding/pass_rates_failed"] += 1
            log.warning("%s: could not measure pass rates: %r", active.task_id, error)
            rates = ()
        prompt = problems.problem_prompt(raw, active, direction, rates, num_tests=self.min_tests)
        texts = yield Ask(self.model, (prompt,) * self.num_samples, self.max_new_tokens,
                          self.model.sampling_seed(raw, step, "problem"), "coding/problem")
        candidate, counts = problems.problem_candidate_from_outputs(raw, texts, self.min_tests, self.max_tests,
                                                                    exclude_ids={active.task_id})
        metrics.update({f"coding/problem/{k}": v for k, v in counts.items()})
        metrics[f"env_model/{raw.kind}/{'proposed' if candidate else 'none'}"] += 1
        return None if candidate is None else annotate(candidate, raw, "env_model", direction, step), metrics
