"""Task generators: how a slot's raw task becomes a harder or easier candidate (ALGORITHM.md 4.3).

A generator implements `TaskGenerator.proposal(raw, active, direction, accuracy, episodes, step)`: a
`Proposal`, a Python generator that yields `Ask`s (prompts for a model) and receives their answers
before it returns the candidate with its counts. `run_proposals` drives a step's proposals for all tasks side by side,
so that each round's prompts of every task go to the environment model as one continuous-batching call
(`sampling.slots`); `propose` runs one. Scenarios build theirs (`Scenario.task_generator`) from the
generic pieces here:
- `ProceduralGenerator`: moves the raw task's difficulty knobs one notch (a scenario gives the
  maker) and tries a few derived seeds (no model);
- `EnvironmentModel`: the reference's frozen environment-model LLM as a batched text sampler
  that drops prompts too long for its cache (counted), for scenario-specific rewrites;
- `GeneratorChain`: the first generator that proposes something.

A candidate's id is unique and stable (the same inputs give the same id), never the active
task's id, and `annotate` records `raw_task_id`, `proposed_by`, `direction` and `proposed_at`
in its payload. Generators never raise on model output; they return None and count why in the
counts they return with it. A call's counts are what that call did: a generator keeps no totals.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.curriculum.adaptation import DIRECTIONS
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.trajectory import JudgedEpisode
from rlanything_jax.core.counts import Counts, add_counts
from rlanything_jax.core.progress import Progress
from rlanything_jax.core.sampling.sampler import Sampler, bucket_length
from rlanything_jax.core.sampling.slots import generate_in_slots
from rlanything_jax.core.sampling.strategies import make_strategy
from rlanything_jax.core.seeds import derive_seed

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Ask:
    """A proposal's request: one completion of each chat prompt from `model` (an `EnvironmentModel`), under
    its sampling seed; `tag` names the counts (`<tag>/prompt_too_long`, `<tag>/generated_tokens`)."""

    model: Any
    prompts: tuple[list[Message], ...]
    max_new_tokens: int
    seed: int
    tag: str


# A proposal in progress: yields Asks, is sent each Ask's texts (None for a prompt too long for the model's
# cache), and returns the candidate (or None) with what it counted (the model's own counts come from `answer`).
Proposal = Generator[Ask, list, "tuple[Task | None, Counts]"]


class TaskGenerator(Protocol):
    """Proposes a rewrite of a slot's raw task in a direction ("harder"/"easier"), or None, from the active
    task's accuracy and its judged rollouts of this step.

    A generator that asks a model should also implement `proposal(...) -> Proposal` with the same
    arguments (`Proposes` then gives it `propose`): the loop then drives every task's proposal side by
    side (`proposal_of`, `run_proposals`), and the model answers all tasks' prompts at once instead of task by task."""

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> tuple[Task | None, Counts]: ...


def finished(candidate: Task | None, counts: Counts | None = None) -> Proposal:
    """A proposal that asks nothing: what a generator without a model returns."""
    return candidate, counts or {}
    yield  # unreachable: makes this function a generator


def proposal_of(generator: TaskGenerator, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> Proposal:
    """The generator's `proposal`, or its `propose` answered at once when it has none."""
    if hasattr(generator, "proposal"):
        return generator.proposal(raw, active, direction, accuracy, episodes, step)
    return finished(*generator.propose(raw, active, direction, accuracy, episodes, step))


def run_proposals(proposals: Sequence[Proposal]) -> tuple[list[Task | None], Counts]:
    """Every proposal's candidate, the proposals driven side by side: each round, the Asks of all proposals
    waiting on one model go to it together (`EnvironmentModel.answer`), so rows freed by one task's short
    answers are refilled with another's prompts. With the counts of the proposals and of the models' answers."""
    results: list[Task | None] = [None] * len(proposals)
    counted: list[Counts] = []
    waiting: dict[int, Ask] = {}

    def advance(index: int, answer: list | None) -> None:
        try:
            waiting[index] = proposals[index].send(answer)
        except StopIteration as stop:
            results[index], counts = stop.value
            counted.append(counts)

    for index in range(len(proposals)):
        advance(index, None)
    lines = Progress("environment adaptation", len(proposals), "tasks")
    while waiting:
        by_model: dict[int, list[int]] = {}
        for index, ask in waiting.items():
            by_model.setdefault(id(ask.model), []).append(index)
        for indices in by_model.values():
            asks = [waiting.pop(index) for index in indices]
            answers, counts = asks[0].model.answer(asks)
            counted.append(counts)
            for index, answer in zip(indices, answers):
                advance(index, answer)
        lines.update(len(proposals) - len(waiting))
    return results, add_counts(*counted)


class Proposes:
    """`propose` (one task's candidate) for a generator that implements `proposal`."""

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> tuple[Task | None, Counts]:
        candidates, counts = run_proposals([self.proposal(raw, active, direction, accuracy, episodes, step)])
        return candidates[0], counts


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

    def proposal(self, raw: Task, active: Task, direction: str, accuracy: float,
                 episodes: Sequence[JudgedEpisode], step: int) -> Proposal:
        return finished(*self.propose(raw, active, direction, accuracy, episodes, step))

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> tuple[Task | None, Counts]:
        del accuracy, episodes  # the knobs alone decide
        check_direction(direction)
        make = self.maker(raw, direction)
        counts: Counter = Counter()
        if make is None:
            counts[f"procedural/{raw.kind}/knobs_at_limit"] += 1
            return None, counts
        for attempt in range(self.max_tries):
            seed = derived_seed(raw, step, attempt)
            try:
                task = make(seed)
            except Exception as error:  # noqa: BLE001 -- e.g. no room supports the knobs: next seed
                counts[f"procedural/{raw.kind}/generation_failed"] += 1
                log.debug("%s: generation with seed %d failed: %r", raw.task_id, seed, error)
                continue
            if task is None or task.task_id in (raw.task_id, active.task_id):
                counts[f"procedural/{raw.kind}/rejected"] += 1
                continue
            counts[f"procedural/{raw.kind}/accepted"] += 1
            return annotate(task, raw, "procedural", direction, step), counts
        log.debug("%s: no %s task in %d tries", raw.task_id, direction, self.max_tries)
        return None, counts


# ---------------------------------------------------------------- environment model


class EnvironmentModel:
    """The frozen environment-model LLM as a batched sampler of chat prompts.

    Prompts too long for the sampler's cache are dropped, not truncated, and counted under
    `<tag>/prompt_too_long`; a dropped prompt's answer is None. With `continuous_batching` (a real
    `Sampler`), at most `batch_size` generations run at once and rows are refilled as answers end
    (`env_model/busy_slot_steps`, `slot_steps`, `joined_rows`, `repacks` in the counts `answer` returns).
    """

    def __init__(self, sampler: Sampler, temperature: float = 0.8, top_p: float = 1.0, seed: int = 0,
                 batch_size: int = 64, continuous_batching: bool = True):
        self.sampler = sampler
        self.strategy = make_strategy(temperature, top_p=top_p)
        self.seed = seed
        self.batch_size = batch_size
        self.continuous_batching = continuous_batching

    @classmethod
    def from_context(cls, context: Any) -> EnvironmentModel:
        """The model a scenario's generator uses, from its `agents.scenario.GeneratorContext`."""
        return cls(context.environment_sampler, temperature=context.temperature, seed=context.seed,
                   continuous_batching=context.continuous_batching)

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
                 tag: str) -> tuple[list[str | None], Counts]:
        """One batched call over the prompts that fit; None in the place of each prompt that does not."""
        texts, counts = self.answer([Ask(self, tuple(prompts), max_new_tokens, seed, tag)])
        return texts[0], counts

    def answer(self, asks: Sequence[Ask]) -> tuple[list[list[str | None]], Counts]:
        """Each Ask's texts, the prompts of all of them (per token budget) sampled in one call under one seed
        (an Ask's own when it is alone, else one derived from all of theirs); with the call's counts."""
        counts: Counter = Counter()
        texts: list[list[str | None]] = [[None] * len(ask.prompts) for ask in asks]
        fitting: dict[int, list[tuple[int, int, list[int]]]] = {}   # max_new_tokens -> (ask, prompt, tokens)
        for a, ask in enumerate(asks):
            for p, prompt in enumerate(ask.prompts):
                tokens = self.sampler.tokenizer.encode_chat(prompt)
                if self._fits_tokens(len(tokens), ask.max_new_tokens):
                    fitting.setdefault(ask.max_new_tokens, []).append((a, p, tokens))
                else:
                    counts[f"{ask.tag}/prompt_too_long"] += 1
        seed = asks[0].seed if len(asks) == 1 else derive_seed(self.seed, "answer", *(ask.seed for ask in asks))
        for max_new_tokens, items in fitting.items():
            completions, sampled = self._sample([tokens for _, _, tokens in items], max_new_tokens, seed)
            counts.update(sampled)
            for (a, p, _), completion in zip(items, completions):
                texts[a][p] = completion.text or ""
                counts[f"{asks[a].tag}/generated_tokens"] += len(completion.token_ids)
        return texts, counts

    def _sample(self, token_lists: list[list[int]], max_new_tokens: int, seed: int) -> tuple[list, Counts]:
        """One completion per prompt, and the slots' counts. Repeated prompts (a rewrite asked for several
        times) are prefilled once and sampled that many times when every distinct prompt repeats equally often."""
        distinct: dict[tuple[int, ...], list[int]] = {}
        for index, tokens in enumerate(token_lists):
            distinct.setdefault(tuple(tokens), []).append(index)
        repeats = {len(indices) for indices in distinct.values()}
        k = repeats.pop() if len(repeats) == 1 else 1
        groups = list(distinct.values()) if k > 1 else [[index] for index in range(len(token_lists))]
        prompts = [list(token_lists[group[0]]) for group in groups]
        if self.continuous_batching and hasattr(self.sampler, "join"):
            completions, counts = generate_in_slots(self.sampler, prompts, max_new_tokens, self.strategy,
                                                    slots=self.batch_size, num_samples=k, seed=seed, tag="env_model")
        else:
            completions, counts = self.sampler.generate(prompts, max_new_tokens, self.strategy, seed=seed,
                                                        num_samples=k), {}
        out: list = [None] * len(token_lists)
        for g, indices in enumerate(groups):   # prompt-major: k samples of each distinct prompt
            for j, index in enumerate(indices):
                out[index] = completions[g * k + j]
        return out, counts


# ---------------------------------------------------------------- chain


class GeneratorChain(Proposes):
    """Asks each generator in turn; the first candidate wins (e.g. the env model, then the knobs)."""

    def __init__(self, generators: Sequence[TaskGenerator]):
        self.generators = tuple(generators)

    def proposal(self, raw: Task, active: Task, direction: str, accuracy: float,
                 episodes: Sequence[JudgedEpisode], step: int) -> Proposal:
        counted = []
        for generator in self.generators:
            candidate, counts = yield from proposal_of(generator, raw, active, direction, accuracy, episodes, step)
            counted.append(counts)
            if candidate is not None:
                return candidate, add_counts(*counted)
        return None, add_counts(*counted)
