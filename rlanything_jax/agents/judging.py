"""The reward model judges every policy step m times, from (step prompt, response, next observation).

Judgments are independent single-turn generations, batched across all steps of all
episodes, longest prompts first (less padding), in `batch_size` rows that bound memory: refilled as
judgments end (`sampling.slots`, continuous batching), or in fixed chunks. A
step's m judgments share one prompt, prefilled once and sampled m times. Judge prompts may hold
images (a vision-language reward model sees screenshots, `agents.prompt_tokens`).

A judge prompt is never cut: its rubric, system prompt and task come first, so cutting from the left
would lose them. As in the reference, the reward model judges the whole prompt, and training keeps
over-long examples out (`train.reward.max_prompt_tokens`, counted there). A prompt that the reward
model's sampler cannot hold with its response is not judged: its m judgments are empty and invalid
(S = 0, as an unparseable judgment; no training example), counted in `<tag>/prompts_over_limit`.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from typing import Sequence

import numpy as np

from rlanything_jax.agents.prompt_tokens import encode_prompt
from rlanything_jax.agents.scenario import StepJudgePrompts
from rlanything_jax.agents.trajectory import Episode, ParsedJudgment, StepJudgments, StepRecord
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.progress import Progress
from rlanything_jax.core.sampling.sampler import Sampler, bucket_length
from rlanything_jax.core.sampling.slots import generate_in_slots, occupancy
from rlanything_jax.core.sampling.stops import Completion
from rlanything_jax.core.sampling.strategies import make_strategy
from rlanything_jax.core.seeds import derive_seed

BATCH_SIZE = 64   # generations at once (batch_size // m prompts, at least one)


# The config's `reward` keys that judging reads, under their names in the config file and with its defaults
# (`config_sections.RewardConfig`, a test holds them equal), and judging's own: `assemble.judge_config` builds
# one from a run's config. Its own record, so that the agents import nothing of the config.
@dataclasses.dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    num_judgments: int = 3        # m
    max_new_tokens: int = 4000
    temperature: float = 0.8
    top_p: float = 0.95
    # Rows refilled as judgments end (else: chunks of batch_size). No default: `rollout.continuous_batching`,
    # resolved (`RolloutSection.refills_rows`).
    continuous_batching: bool
    top_k: int = 0                # not a config key: the reward model samples without a top-k cut
    batch_size: int = BATCH_SIZE  # not a config key


@dataclasses.dataclass(frozen=True)
class Judgment:
    parsed: ParsedJudgment
    text: str
    token_ids: list[int]
    logprobs: list[float]


def judge_prompts(reward_model: Sampler, prompts: StepJudgePrompts, prompt_tokens: Sequence[Sequence[int]],
                  config: JudgeConfig, seed: int,
                  prompt_images: Sequence[Sequence] | None = None) -> tuple[list[list[Judgment]], Counts]:
    """m judgments of each prompt (in the given order), longest prompts batched together; each prompt is
    prefilled once and sampled m times. `prompt_images[i]` are prompt i's images, if any. With the call's
    counts (parse statuses, tokens, `judge/...` slots, `time/judge_sampling_s`)."""
    started = time.perf_counter()
    samples, sampled = sample_each(reward_model, prompt_tokens, config, seed, "judge", prompt_images=prompt_images)
    metrics: Counter = Counter(sampled)
    out: list[list[Judgment]] = []
    for completions in samples:
        out.append([])
        for completion in completions:
            parsed = prompts.parse_judgment(completion.text or "")
            metrics[f"parse/{prompts.name}_judgment/{parsed.status}"] += 1
            metrics["judge/tokens"] += len(completion.token_ids)
            out[-1].append(Judgment(parsed, completion.text or "", list(completion.token_ids),
                                    list(completion.logprobs)))
    metrics["time/judge_sampling_s"] += time.perf_counter() - started
    return out, dict(metrics)


def sample_each(reward_model: Sampler, prompt_tokens: Sequence[Sequence[int]], config: JudgeConfig, seed: int,
                tag: str, prompt_images: Sequence[Sequence] | None = None) -> tuple[list[list[Completion]], Counts]:
    """`config.num_judgments` completions of each prompt (in the given order), at most `config.batch_size`
    generations at once, longest prompts first; each prompt is prefilled once and sampled m times. With
    continuous batching, rows are refilled as generations end (`<tag>/slot_occupancy` and the other slot
    counts, returned with the completions); a stand-in model with only `generate` (tests, probes) samples
    in chunks. A prompt the sampler cannot hold with `config.max_new_tokens` more gets m empty completions
    (finish reason "prompt_over_limit"), counted in `<tag>/prompts_over_limit`."""
    m = config.num_judgments
    metrics: Counter = Counter()
    out: list[list[Completion]] = [[] for _ in prompt_tokens]
    fitting = []
    for i, tokens in enumerate(prompt_tokens):
        if fits_sampler(reward_model, len(tokens), config.max_new_tokens):
            fitting.append(i)
        else:
            out[i] = [Completion([], [], "", PROMPT_OVER_LIMIT) for _ in range(m)]
            metrics[f"{tag}/prompts_over_limit"] += 1
    order = sorted(fitting, key=lambda i: len(prompt_tokens[i]), reverse=True)
    strategy = make_strategy(config.temperature, config.top_k, config.top_p)
    if config.continuous_batching and hasattr(reward_model, "join") and order:
        images = [list(prompt_images[i]) for i in order] if prompt_images is not None else None
        completions, slot_counts = generate_in_slots(
            reward_model, [list(prompt_tokens[i]) for i in order], config.max_new_tokens, strategy,
            slots=config.batch_size, num_samples=m, seed=derive_seed(seed, tag, "slots"), images=images, tag=tag)
        metrics.update(slot_counts)
        metrics[f"{tag}/slot_occupancy"] = occupancy(metrics, tag)
        chunks = [(order, completions)]
    else:
        prompts_per_call = max(1, config.batch_size // m)
        chunks = []
        lines = Progress(tag, len(order), "prompts")
        for chunk_index, start in enumerate(range(0, len(order), prompts_per_call)):
            chunk = order[start:start + prompts_per_call]
            images = [list(prompt_images[i]) for i in chunk] if prompt_images is not None else []
            # Text-only calls keep the plain signature (any object with `generate` can sample them).
            with_images = {"images": images} if any(images) else {}
            chunks.append((chunk, reward_model.generate(
                [list(prompt_tokens[i]) for i in chunk], config.max_new_tokens, strategy,
                seed=derive_seed(seed, tag, chunk_index), num_samples=m, **with_images)))
            lines.update(start + len(chunk))
    for chunk, completions in chunks:
        for index, completion in enumerate(completions):  # prompt-major: m samples of chunk[0], then chunk[1]...
            out[chunk[index // m]].append(completion)
    return out, dict(metrics)


PROMPT_OVER_LIMIT = "prompt_over_limit"


def fits_sampler(sampler, prompt_length: int, max_new_tokens: int) -> bool:
    """The prompt and its response fit the sampler's cache (a stand-in without a cache limit: always)."""
    config = getattr(sampler, "config", None)
    limit = getattr(config, "max_cache_length", None)
    return limit is None or bucket_length(prompt_length, 16) + max_new_tokens <= limit


def judge_episodes(reward_model: Sampler, prompts: StepJudgePrompts, episodes: Sequence[Episode],
                   config: JudgeConfig, seed: int) -> tuple[list[StepJudgments | None], Counts]:
    """The reward model's m judgments of every step of each trainable episode (None for the others), with
    the judge prompts' tokens and each judgment's tokens and log-probabilities for its training; and the
    judging's counts (`judge_prompts`)."""
    tokenizer = reward_model.tokenizer
    judge_inputs, judge_images = [], []
    per_episode: list[list[tuple[int, ...]] | None] = []
    for episode in episodes:
        if not episode.trainable:
            per_episode.append(None)
            continue
        step_prompts = []
        for t in range(len(episode.steps)):
            tokens, images = encode_prompt(tokenizer, prompts.judge_messages(episode.task, episode, t),
                                           image_inputs=reward_model.image_inputs)
            step_prompts.append((tuple(tokens), tuple(images)))
            judge_inputs.append(tokens)
            judge_images.append(images)
        per_episode.append(step_prompts)
    judgments, counts = judge_prompts(reward_model, prompts, judge_inputs, config, seed,
                                      judge_images if any(judge_images) else None)
    judged = iter(judgments)
    out: list[StepJudgments | None] = []
    for step_prompts in per_episode:
        if step_prompts is None:
            out.append(None)
            continue
        steps = [next(judged) for _ in step_prompts]
        out.append(StepJudgments(
            scores=np.array([[j.parsed.score for j in js] for js in steps], np.int8).reshape(len(steps), -1),
            valid=np.array([[j.parsed.valid for j in js] for js in steps], bool).reshape(len(steps), -1),
            texts=tuple(tuple(j.text for j in js) for js in steps),
            prompts=tuple(tokens for tokens, _ in step_prompts),
            samples=tuple(tuple((tuple(j.token_ids), tuple(j.logprobs)) for j in js) for js in steps),
            prompt_images=tuple(images for _, images in step_prompts) if any(i for _, i in step_prompts) else ()))
    return out, counts


def step_context(episode: Episode, step_index: int) -> tuple[StepRecord, list[StepRecord]]:
    """The judged step and the steps before it (for prompts that show the trajectory)."""
    return episode.steps[step_index], episode.steps[:step_index]
