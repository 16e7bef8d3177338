"""Task generators: how a slot's raw task becomes a harder or easier candidate (ALGORITHM.md 4.3).

All implement `loop.TaskGenerator.propose(raw, active, direction, accuracy, episodes, step)`:
- `ProceduralGenerator`: ALFWorld / TextWorld difficulty knobs one notch from the raw task's,
  and a new game of the same task type (no model).
- `EnvModelGenerator`: the reference's frozen environment-model LLM: ALFWorld goal rewrites
  informed by failure summaries, and new coding problems anchored on the root problem.
- `GeneratorChain`: the first generator that proposes something.

A candidate's id is unique and stable (the same inputs give the same id), never the active
task's id, and its payload records `raw_task_id`, `proposed_by`, `direction` and `proposed_at`.
Generators never raise on model output; they return None and count why in `metrics`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import Counter
from collections.abc import Sequence

from rlanything_jax.agents.parsers import parse_failure_summary
from rlanything_jax.agents.prompts import DIRECTIONS, Message
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.curriculum import alfworld_goals, coding_problems
from rlanything_jax.envs import alfworld
from rlanything_jax.envs.base import Task
from rlanything_jax.sampling.sampler import Sampler, bucket_length
from rlanything_jax.sampling.strategies import make_strategy

log = logging.getLogger(__name__)


def derived_seed(raw: Task, step: int, attempt: int, salt: str = "") -> int:
    """A 31-bit seed from the raw task (id and seed), the RL step and the try: reruns reproduce it."""
    key = f"{raw.task_id}|{raw.payload.get('seed')}|{step}|{attempt}|{salt}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def _annotate(task: Task, raw: Task, by: str, direction: str, step: int) -> Task:
    payload = {**task.payload, "raw_task_id": raw.task_id, "proposed_by": by, "direction": direction,
               "proposed_at": step}
    return dataclasses.replace(task, payload=payload)


# ---------------------------------------------------------------- procedural


class ProceduralGenerator:
    """Moves the raw task's difficulty knobs one notch and generates a fresh game of the same type.

    ALFWorld: `harder_knobs`/`easier_knobs`, same task type, checked winnable by the expert in
    the engine (`verify`). TextWorld: `textworld.harder`/`easier`, same game kind (its games
    are winnable by construction). A try whose generation fails moves on to the next seed, up to
    `max_tries`. Coding tasks have no knobs: no procedural generator, always None.
    """

    def __init__(self, out_dir: str, max_tries: int = 4, verify: bool = True):
        self.out_dir = str(out_dir)
        self.max_tries = max_tries
        self.verify = verify
        self.metrics: Counter = Counter()

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[Episode], step: int) -> Task | None:
        del accuracy, episodes  # the knobs alone decide
        _check_direction(direction)
        makers = {"alfworld": self._alfworld_maker, "textworld": self._textworld_maker}
        if raw.kind not in makers:
            self.metrics[f"procedural/unsupported_kind/{raw.kind}"] += 1
            log.debug("%s: no procedural generator for %s tasks", raw.task_id, raw.kind)
            return None
        make = makers[raw.kind](raw, direction)
        if make is None:
            self.metrics[f"procedural/{raw.kind}/knobs_at_limit"] += 1
            return None
        for attempt in range(self.max_tries):
            seed = derived_seed(raw, step, attempt)
            try:
                task = make(seed)
            except Exception as error:  # noqa: BLE001 -- e.g. no room supports the knobs: next seed
                self.metrics[f"procedural/{raw.kind}/generation_failed"] += 1
                log.debug("%s: generation with seed %d failed: %r", raw.task_id, seed, error)
                continue
            if task is None or task.task_id in (raw.task_id, active.task_id):
                self.metrics[f"procedural/{raw.kind}/rejected"] += 1
                continue
            self.metrics[f"procedural/{raw.kind}/accepted"] += 1
            return _annotate(task, raw, "procedural", direction, step)
        log.debug("%s: no %s game in %d tries", raw.task_id, direction, self.max_tries)
        return None

    def _alfworld_maker(self, raw: Task, direction: str):
        knobs = alfworld.knobs_of(raw)
        moved = (alfworld.harder_knobs if direction == "harder" else alfworld.easier_knobs)(knobs)
        if moved == knobs:
            log.debug("%s: ALFWorld knobs %s cannot get %s", raw.task_id, knobs, direction)
            return None

        def make(seed: int) -> Task | None:
            task = alfworld.make_task(seed, raw.payload["task_type"], moved, self.out_dir)
            if self.verify and not alfworld.expert_trajectory(task).won:
                log.debug("%s: the expert does not win generated game %s", raw.task_id, task.task_id)
                return None
            return task
        return make

    def _textworld_maker(self, raw: Task, direction: str):
        from rlanything_jax.envs import textworld  # deferred: slow import

        knobs = textworld.knobs_of(raw)
        moved = (textworld.harder if direction == "harder" else textworld.easier)(knobs)
        if moved == knobs:
            log.debug("%s: TextWorld knobs %s cannot get %s", raw.task_id, knobs, direction)
            return None
        return lambda seed: textworld.make_task(seed, moved, self.out_dir)


# ---------------------------------------------------------------- environment model


class EnvModelGenerator:
    """The reference's frozen environment-model LLM as a task generator.

    ALFWorld: one batched call summarises every failed rollout (<= 2 sentences), one batched call
    asks for `num_tries` goal rewrites; the lowest-numbered attempt whose rewrite the expert wins
    becomes the candidate. Coding (stdio tasks): one batched call of `num_problem_samples`; the
    first answer that parses with >= `min_tests` tests becomes a new stdio task. Other kinds:
    None (chain with `ProceduralGenerator` for TextWorld). Prompts too long for the sampler's
    cache are dropped, not truncated (failure summaries first), and counted.
    """

    def __init__(self, sampler: Sampler, out_dir: str, num_tries: int = 8, temperature: float = 0.8,
                 top_p: float = 1.0, max_new_tokens: int = 4096, summary_max_new_tokens: int = 512,
                 num_problem_samples: int = 3, min_tests: int = 4, max_tests: int | None = 16, seed: int = 0,
                 sandbox_workers: int | None = None):
        self.sampler = sampler
        self.out_dir = str(out_dir)
        self.num_tries = num_tries
        self.strategy = make_strategy(temperature, top_p=top_p)
        self.max_new_tokens = max_new_tokens
        self.summary_max_new_tokens = summary_max_new_tokens
        self.num_problem_samples = num_problem_samples
        self.min_tests = min_tests
        self.max_tests = max_tests
        self.seed = seed
        self.sandbox_workers = sandbox_workers
        self.metrics: Counter = Counter()

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[Episode], step: int) -> Task | None:
        _check_direction(direction)
        if raw.kind == "alfworld":
            candidate = self._propose_alfworld(raw, active, direction, accuracy, episodes, step)
        elif coding_problems.is_stdio_task(raw) and coding_problems.is_stdio_task(active):
            candidate = self._propose_coding(raw, active, direction, episodes, step)
        else:
            self.metrics[f"env_model/unsupported/{raw.kind}"] += 1
            return None
        self.metrics[f"env_model/{raw.kind}/{'proposed' if candidate else 'none'}"] += 1
        return None if candidate is None else _annotate(candidate, raw, "env_model", direction, step)

    # -------------------------------------------------------------- ALFWorld

    def _propose_alfworld(self, raw: Task, active: Task, direction: str, accuracy: float,
                          episodes: Sequence[Episode], step: int) -> Task | None:
        summaries = self._failure_summaries(raw, episodes, step)
        prompts = alfworld_goals.goal_rewrite_prompts(raw, direction, accuracy, summaries, self.num_tries)
        if summaries and not self._fits(prompts[-1], self.max_new_tokens):
            self.metrics["alfworld/goal/summaries_dropped_for_length"] += 1
            prompts = alfworld_goals.goal_rewrite_prompts(raw, direction, accuracy, (), self.num_tries)
        texts = self._generate(prompts, self.max_new_tokens, self._sampling_seed(raw, step, "goal"), "alfworld/goal")
        candidate, counts = alfworld_goals.goal_candidate_from_outputs(raw, texts, self.out_dir,
                                                                       exclude_ids={active.task_id})
        self.metrics.update({f"alfworld/goal/{k}": v for k, v in counts.items()})
        return candidate

    def _failure_summaries(self, raw: Task, episodes: Sequence[Episode], step: int) -> list[tuple[int, str]]:
        failed = alfworld_goals.failed_episodes(episodes)
        if not failed:
            return []
        prompts = [alfworld_goals.failure_summary_prompt(e) for e in failed]
        texts = self._generate(prompts, self.summary_max_new_tokens, self._sampling_seed(raw, step, "summary"),
                               "alfworld/summary")
        summaries = []
        for episode, text in zip(failed, texts):
            if text is None:
                continue
            parsed = parse_failure_summary(text)
            self.metrics[f"alfworld/summary/{parsed.status}"] += 1
            if parsed.ok:
                summaries.append((episode.group_index, parsed.summary))
        return summaries

    # -------------------------------------------------------------- coding

    def _propose_coding(self, raw: Task, active: Task, direction: str, episodes: Sequence[Episode],
                        step: int) -> Task | None:
        try:
            rates = coding_problems.measured_pass_rates(active, episodes, self.sandbox_workers)
        except Exception as error:  # noqa: BLE001 -- the prompt can go without pass rates
            self.metrics["coding/pass_rates_failed"] += 1
            log.warning("%s: could not measure pass rates: %r", active.task_id, error)
            rates = ()
        prompt = coding_problems.problem_prompt(raw, active, direction, rates, num_tests=self.min_tests)
        texts = self._generate([prompt] * self.num_problem_samples, self.max_new_tokens,
                               self._sampling_seed(raw, step, "problem"), "coding/problem")
        candidate, counts = coding_problems.problem_candidate_from_outputs(
            raw, texts, self.min_tests, self.max_tests, exclude_ids={active.task_id})
        self.metrics.update({f"coding/problem/{k}": v for k, v in counts.items()})
        return candidate

    # -------------------------------------------------------------- sampling

    def _sampling_seed(self, raw: Task, step: int, phase: str) -> int:
        return derived_seed(raw, step, 0, f"{phase}|{self.seed}")

    def _fits(self, messages: list[Message], max_new_tokens: int) -> bool:
        return self._fits_tokens(len(self.sampler.tokenizer.encode_chat(messages)), max_new_tokens)

    def _fits_tokens(self, num_tokens: int, max_new_tokens: int) -> bool:
        """Whether `Sampler.start` can hold the prompt plus the new tokens (its own bucketing rule)."""
        config = self.sampler.config
        needed = bucket_length(num_tokens, 16) + max_new_tokens
        return bucket_length(needed, config.min_window) <= config.max_cache_length

    def _generate(self, prompts: Sequence[list[Message]], max_new_tokens: int, seed: int,
                  tag: str) -> list[str | None]:
        """One batched call over the prompts that fit; None in the place of each prompt that does not."""
        token_lists = [self.sampler.tokenizer.encode_chat(p) for p in prompts]
        fitting = [i for i, tokens in enumerate(token_lists) if self._fits_tokens(len(tokens), max_new_tokens)]
        if len(fitting) < len(prompts):
            self.metrics[f"{tag}/prompt_too_long"] += len(prompts) - len(fitting)
        texts: list[str | None] = [None] * len(prompts)
        if fitting:
            completions = self.sampler.generate([token_lists[i] for i in fitting], max_new_tokens, self.strategy,
                                                seed=seed)
            for i, completion in zip(fitting, completions):
                texts[i] = completion.text or ""
                self.metrics[f"{tag}/generated_tokens"] += len(completion.token_ids)
        return texts


# ---------------------------------------------------------------- chain


class GeneratorChain:
    """Asks each generator in turn; the first candidate wins (e.g. the env model, then the knobs)."""

    def __init__(self, generators: Sequence[object]):
        self.generators = tuple(generators)

    @property
    def metrics(self) -> Counter:
        total: Counter = Counter()
        for generator in self.generators:
            total.update(getattr(generator, "metrics", {}))
        return total

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[Episode], step: int) -> Task | None:
        for generator in self.generators:
            candidate = generator.propose(raw, active, direction, accuracy, episodes, step)
            if candidate is not None:
                return candidate
        return None
