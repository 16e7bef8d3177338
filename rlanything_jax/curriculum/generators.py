"""Task generators: how a slot's raw task becomes a harder or easier candidate (ALGORITHM.md 4.3).

A generator implements `TaskGenerator.propose(raw, active, direction, accuracy, episodes, step)`.
Scenarios build theirs (`Scenario.task_generator`) from the generic pieces here:
- `ProceduralGenerator`: moves the raw task's difficulty knobs one notch (a scenario gives the
  maker) and tries a few derived seeds (no model);
- `EnvironmentModel`: the reference's frozen environment-model LLM as a batched text sampler
  that drops prompts too long for its cache (counted), for scenario-specific rewrites;
- `GeneratorChain`: the first generator that proposes something.

A candidate's id is unique and stable (the same inputs give the same id), never the active
task's id, and `annotate` records `raw_task_id`, `proposed_by`, `direction` and `proposed_at`
in its payload. Generators never raise on model output; they return None and count why in
their `metrics`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.trajectory import JudgedEpisode
from rlanything_jax.curriculum.adaptation import DIRECTIONS
from rlanything_jax.envs.base import Task
from rlanything_jax.sampling.sampler import Sampler, bucket_length
from rlanything_jax.sampling.strategies import make_strategy
from rlanything_jax.seeds import derive_seed

log = logging.getLogger(__name__)


class TaskGenerator(Protocol):
    """Proposes a rewrite of a slot's raw task in a direction ("harder"/"easier"), or None, from the active
    task's accuracy and its judged rollouts of this step."""

    metrics: Counter

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> Task | None: ...


def derived_seed(raw: Task, step: int, attempt: int, salt: str = "") -> int:
    """A 31-bit seed from the raw task (id and seed), the RL step and the try (`seeds.derive_seed`): reruns
    reproduce it, and no two (task, step, try) share one."""
    return derive_seed(0, "task_generator", raw.task_id, str(raw.payload.get("seed")), step, attempt, salt)


def check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def annotate(task: Task, raw: Task, by: str, direction: str, step: int) -> Task:
    payload = {**task.payload, "raw_task_id": raw.task_id, "proposed_by": by, "direction": direction,
               "proposed_at": step}
    return dataclasses.replace(task, payload=payload)


# ---------------------------------------------------------------- procedural

# maker(raw, direction) -> make(seed) -> Task | None, or None when the knobs cannot move that way.
VariantMaker = Callable[[Task, str], "Callable[[int], Task | None] | None"]


class ProceduralGenerator:
    """Moves the raw task's difficulty knobs one notch and generates a fresh task with them.

    `maker` (the scenario's) returns a task builder for the moved knobs, or None when they are at
    their limit; a builder returns None for a task it rejects (e.g. one its expert cannot win) and
    may raise when generation fails: the next derived seed is tried, up to `max_tries`.
    """

    def __init__(self, maker: VariantMaker, max_tries: int = 4):
        self.maker = maker
        self.max_tries = max_tries
        self.metrics: Counter = Counter()

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> Task | None:
        del accuracy, episodes  # the knobs alone decide
        check_direction(direction)
        make = self.maker(raw, direction)
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
            return annotate(task, raw, "procedural", direction, step)
        log.debug("%s: no %s task in %d tries", raw.task_id, direction, self.max_tries)
        return None


# ---------------------------------------------------------------- environment model


class EnvironmentModel:
    """The frozen environment-model LLM as a batched sampler of chat prompts.

    Prompts too long for the sampler's cache are dropped, not truncated, and counted under
    `<tag>/prompt_too_long`; a dropped prompt's answer is None.
    """

    def __init__(self, sampler: Sampler, temperature: float = 0.8, top_p: float = 1.0, seed: int = 0):
        self.sampler = sampler
        self.strategy = make_strategy(temperature, top_p=top_p)
        self.seed = seed
        self.metrics: Counter = Counter()

    def sampling_seed(self, raw: Task, step: int, phase: str) -> int:
        return derived_seed(raw, step, 0, f"{phase}|{self.seed}")

    def fits(self, messages: list[Message], max_new_tokens: int) -> bool:
        return self._fits_tokens(len(self.sampler.tokenizer.encode_chat(messages)), max_new_tokens)

    def _fits_tokens(self, num_tokens: int, max_new_tokens: int) -> bool:
        """Whether `Sampler.start` can hold the prompt plus the new tokens (its own bucketing rule)."""
        config = self.sampler.config
        needed = bucket_length(num_tokens, 16) + max_new_tokens
        return bucket_length(needed, config.min_window) <= config.max_cache_length

    def generate(self, prompts: Sequence[list[Message]], max_new_tokens: int, seed: int,
                 tag: str) -> list[str | None]:
        """One batched call over the prompts that fit; None in the place of each prompt that does not."""
        token_lists = [self.sampler.tokenizer.encode_chat(p) for p in prompts]
        fitting = [i for i, tokens in enumerate(token_lists) if self._fits_tokens(len(tokens), max_new_tokens)]
        if len(fitting) < len(prompts):
            self.metrics[f"{tag}/prompt_too_long"] += len(prompts) - len(fitting)
        texts: list[str | None] = [None] * len(prompts)
        if fitting:
            for i, completion in zip(fitting, self._sample([token_lists[i] for i in fitting], max_new_tokens, seed)):
                texts[i] = completion.text or ""
                self.metrics[f"{tag}/generated_tokens"] += len(completion.token_ids)
        return texts

    def _sample(self, token_lists: list[list[int]], max_new_tokens: int, seed: int) -> list:
        """One completion per prompt. Repeated prompts (a rewrite asked for several times) are prefilled once
        and sampled that many times when every distinct prompt repeats equally often."""
        distinct: dict[tuple[int, ...], list[int]] = {}
        for index, tokens in enumerate(token_lists):
            distinct.setdefault(tuple(tokens), []).append(index)
        repeats = {len(indices) for indices in distinct.values()}
        if len(repeats) != 1 or repeats == {1}:
            return self.sampler.generate(token_lists, max_new_tokens, self.strategy, seed=seed)
        k = repeats.pop()
        completions = self.sampler.generate([list(tokens) for tokens in distinct], max_new_tokens, self.strategy,
                                            seed=seed, num_samples=k)
        out: list = [None] * len(token_lists)
        for group, indices in enumerate(distinct.values()):   # prompt-major: k samples of each distinct prompt
            for j, index in enumerate(indices):
                out[index] = completions[group * k + j]
        return out


# ---------------------------------------------------------------- chain


class GeneratorChain:
    """Asks each generator in turn; the first candidate wins (e.g. the env model, then the knobs)."""

    def __init__(self, generators: Sequence[TaskGenerator]):
        self.generators = tuple(generators)

    @property
    def metrics(self) -> Counter:
        total: Counter = Counter()
        for generator in self.generators:
            total.update(getattr(generator, "metrics", {}))
        return total

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> Task | None:
        for generator in self.generators:
            candidate = generator.propose(raw, active, direction, accuracy, episodes, step)
            if candidate is not None:
                return candidate
        return None
