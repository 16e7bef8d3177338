"""The reward model judges every policy step m times, from (step prompt, response, next observation).

Judgments are independent single-turn generations, batched across all steps of all
episodes, longest prompts together (less padding), in chunks that bound memory. A
step's m judgments share one prompt, prefilled once and sampled m times.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from typing import Protocol, Sequence

import numpy as np

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.trajectory import Episode, ParsedJudgment, StepRecord
from rlanything_jax.envs.base import Task
from rlanything_jax.sampling.sampler import Sampler
from rlanything_jax.sampling.strategies import make_strategy
from rlanything_jax.seeds import derive_seed

class JudgeScenario(Protocol):
    name: str

    def judge_messages(self, task: Task, episode: Episode, step_index: int) -> list[Message]: ...

    def parse_judgment(self, text: str) -> ParsedJudgment: ...


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
    num_judgments: int = 3        # m
    max_new_tokens: int = 512
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 0
    batch_size: int = 64          # generations per sampler call (batch_size // m prompts, at least one)
    max_prompt_tokens: int = 4096  # longer judge prompts are left-truncated (counted)
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Judgment:
    parsed: ParsedJudgment
    text: str
    token_ids: list[int]
    logprobs: list[float]


def judge_prompts(reward_model: Sampler, scenario: JudgeScenario, prompts: Sequence[Sequence[int]],
                  config: JudgeConfig, metrics: Counter | None = None) -> list[list[Judgment]]:
    """m judgments of each prompt (in the given order), longest prompts batched together; each prompt is
    prefilled once and sampled m times."""
    metrics = metrics if metrics is not None else Counter()
    m = config.num_judgments
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
    strategy = make_strategy(config.temperature, config.top_k, config.top_p)
    prompts_per_call = max(1, config.batch_size // m)
    out: list[list[Judgment]] = [[] for _ in prompts]
    started = time.perf_counter()
    for chunk_index, start in enumerate(range(0, len(order), prompts_per_call)):
        chunk = order[start:start + prompts_per_call]
        completions = reward_model.generate([list(prompts[i]) for i in chunk], config.max_new_tokens, strategy,
                                            seed=derive_seed(config.seed, "chunk", chunk_index), num_samples=m)
        for index, completion in enumerate(completions):  # prompt-major: m samples of chunk[0], then chunk[1]...
            parsed = scenario.parse_judgment(completion.text or "")
            metrics[f"parse/{scenario.name}_judgment/{parsed.status}"] += 1
            metrics["judge_tokens"] += len(completion.token_ids)
            out[chunk[index // m]].append(Judgment(parsed, completion.text or "", list(completion.token_ids),
                                                   list(completion.logprobs)))
    metrics["time_judge_s"] += time.perf_counter() - started
    return out


def judge_episodes(reward_model: Sampler, scenario: JudgeScenario, episodes: Sequence[Episode],
                   config: JudgeConfig, metrics: Counter | None = None) -> None:
    """Fills each trainable episode's `judgments`, `judgment_valid` [num_steps, m], the judge prompts'
    tokens and each judgment's (tokens, log-probabilities) for the reward model's training."""
    metrics = metrics if metrics is not None else Counter()
    tokenizer = reward_model.tokenizer
    m = config.num_judgments
    where, prompts = [], []
    for e, episode in enumerate(episodes):
        if not episode.trainable:
            continue
        steps = len(episode.steps)
        episode.judgments = np.zeros((steps, m), np.int8)
        episode.judgment_valid = np.zeros((steps, m), bool)
        episode.judge_texts = [[""] * m for _ in range(steps)]
        episode.judge_prompts = []
        episode.judge_samples = [[None] * m for _ in range(steps)]
        for t in range(steps):
            tokens = tokenizer.encode_chat(scenario.judge_messages(episode.task, episode, t))
            if len(tokens) > config.max_prompt_tokens:
                metrics["judge/prompts_truncated"] += 1
                tokens = tokens[-config.max_prompt_tokens:]
            episode.judge_prompts.append(tokens)
            where.append((e, t))
            prompts.append(tokens)
    for (e, t), judgments in zip(where, judge_prompts(reward_model, scenario, prompts, config, metrics)):
        episode = episodes[e]
        for sample, judgment in enumerate(judgments):
            episode.judgments[t, sample] = judgment.parsed.score
            episode.judgment_valid[t, sample] = judgment.parsed.valid
            episode.judge_texts[t][sample] = judgment.text
            episode.judge_samples[t][sample] = (judgment.token_ids, judgment.logprobs)


def step_context(episode: Episode, step_index: int) -> tuple[StepRecord, list[StepRecord]]:
    """The judged step and the steps before it (for prompts that show the trajectory)."""
    return episode.steps[step_index], episode.steps[:step_index]
