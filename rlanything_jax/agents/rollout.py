"""Multi-turn rollouts: G episodes per task, one batched generation per turn, KV caches kept across turns.

All live episodes share one `Conversation` of the policy sampler: each turn appends
every live row's new user message (`Sampler.extend`) and decodes all rows at once;
finished rows sit the turn out. When the shared cache cannot hold the next turn, or
most rows have finished, the live rows are re-prefilled from their exact token
histories into a fresh, right-sized conversation (compaction). An episode whose
history no longer fits `max_context_tokens` ends with `context_full` (a failure).

The reward model then judges every step m times (`agents/judging.py`).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from typing import Any, Callable, Protocol, Sequence

from rlanything_jax.agents.chat_tokens import Message, first_prompt, turn_delta
from rlanything_jax.agents.trajectory import Episode, ParsedAction, StepRecord
from rlanything_jax.envs.base import Observation, Task
from rlanything_jax.sampling.sampler import Conversation, Sampler, bucket_length
from rlanything_jax.sampling.strategies import SamplingStrategy, make_strategy
from rlanything_jax.seeds import derive_seed

class Scenario(Protocol):
    """How a task family talks to the policy and the reward model."""

    name: str

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]: ...

    def turn_message(self, episode: Episode, observation: Observation) -> Message: ...

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction: ...


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 8               # G rollouts per task
    max_turns: int = 40
    max_new_tokens: int = 256         # per policy turn
    max_context_tokens: int = 4096    # per episode: history + next turn must fit
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 0
    stop_strings: tuple[str, ...] = ()
    seed: int = 0

    @property
    def strategy(self) -> SamplingStrategy:
        return make_strategy(self.temperature, self.top_k, self.top_p)


ActionOverride = Callable[[Episode, Observation], "str | None"]


@dataclasses.dataclass
class _Live:
    episode: Episode
    runner_id: int
    history: list[int]             # exactly this row's tokens in the policy cache
    observation: Observation
    pending: list[int]             # tokens to append before the next decode
    row: int = -1                  # row in the current conversation


def play_episodes(policy: Sampler, runner: Any, scenario: Scenario, tasks: Sequence[Task],
                  config: RolloutConfig, action_override: ActionOverride | None = None,
                  metrics: Counter | None = None, progress: Callable[[str], None] | None = None) -> list[Episode]:
    """Plays `config.group_size` episodes of every task to the end or the step limit.

    `runner` is an `envs.runner.EnvRunner` (reset/step over episode ids). With
    `action_override`, the environment receives its action instead of the parsed one
    (e.g. an expert's), while the policy's response is still recorded.
    """
    metrics = metrics if metrics is not None else Counter()
    tokenizer = policy.tokenizer
    episodes = [Episode(task=task, group_index=g) for task in tasks for g in range(config.group_size)]
    started = time.perf_counter()
    observations = runner.reset({i: e.task for i, e in enumerate(episodes)})
    metrics["time_env_s"] += time.perf_counter() - started
    live: list[_Live] = []
    for i, episode in enumerate(episodes):
        obs = observations[i]
        if not isinstance(obs, Observation):
            _end(episode, "env_error", metrics, error=str(getattr(obs, "reason", obs)))
            continue
        prompt = first_prompt(tokenizer, scenario.initial_messages(episode.task, obs))
        live.append(_Live(episode=episode, runner_id=i, history=[], observation=obs, pending=prompt))

    conversation: Conversation | None = None
    stop_texts = {t: tokenizer.decode([t]) for t in tokenizer.stop_token_ids}
    for turn in range(config.max_turns):
        live = [s for s in live if _fits(s, config, policy, metrics)]
        if not live:
            break
        conversation = _ensure_room(policy, conversation, live, config, metrics)
        started = time.perf_counter()
        completions = _generate_turn(policy, conversation, live, config, turn)
        metrics["time_policy_s"] += time.perf_counter() - started
        actions = {}
        for slot, completion in zip(live, completions):
            metrics["policy_tokens"] += len(completion.token_ids)
            parsed = scenario.parse_action(completion.text or "", slot.observation)
            metrics[f"parse/{scenario.name}_action/{parsed.status}"] += 1
            step = StepRecord(observation=slot.observation, prompt_tokens=list(slot.history),
                              response_tokens=list(completion.token_ids), logprobs=list(completion.logprobs),
                              response_text=completion.text or "", finish_reason=completion.finish_reason,
                              action=parsed.action, parse_status=parsed.status)
            slot.history.extend(completion.token_ids)
            slot.episode.steps.append(step)
            forced = action_override(slot.episode, slot.observation) if action_override else None
            actions[slot.runner_id] = forced if forced is not None else parsed.action
        started = time.perf_counter()
        results = runner.step(actions)
        metrics["time_env_s"] += time.perf_counter() - started
        metrics["env_steps"] += len(actions)
        still_live = []
        for slot, completion in zip(live, completions):
            result = results[slot.runner_id]
            step = slot.episode.steps[-1]
            if not hasattr(result, "observation"):
                _end(slot.episode, "env_error", metrics, error=str(getattr(result, "reason", result)))
                continue
            step.next_observation, step.won_after = result.observation, result.won
            if result.done or result.won:
                slot.episode.won = bool(result.won)
                _end(slot.episode, "won" if result.won else "done", metrics)
                continue
            slot.observation = result.observation
            stop_text = stop_texts.get(completion.token_ids[-1], "") if completion.token_ids else ""
            slot.pending = turn_delta(tokenizer, scenario.turn_message(slot.episode, result.observation),
                                      completion.finish_reason, stop_text)
            still_live.append(slot)
        live = still_live
        if progress:
            progress(f"turn {turn + 1}/{config.max_turns}: {len(live)} episodes live")
    for slot in live:
        _end(slot.episode, "max_steps", metrics)
    for i in range(len(episodes)):
        runner.close_episode(i)
    return episodes


def _end(episode: Episode, reason: str, metrics: Counter, error: str | None = None) -> None:
    episode.end_reason = reason
    episode.env_error = error
    metrics[f"episodes/{reason}"] += 1


def _fits(slot: _Live, config: RolloutConfig, policy: Sampler, metrics: Counter) -> bool:
    """The episode's history, next message and response fit its context (as a re-prefilled prompt)."""
    needed = bucket_length(len(slot.history) + len(slot.pending), 16) + config.max_new_tokens
    if needed <= min(config.max_context_tokens, policy.config.max_cache_length):
        return True
    _end(slot.episode, "context_full", metrics)
    return False


def _ensure_room(policy: Sampler, conversation: Conversation | None, live: list[_Live],
                 config: RolloutConfig, metrics: Counter) -> Conversation:
    """Keeps the shared conversation if it can take this turn; else re-prefills the live rows."""
    if conversation is not None and all(s.row >= 0 for s in live):
        needed = conversation.used_columns + bucket_length(max(len(s.pending) for s in live), 1) \
            + config.max_new_tokens
        batch = conversation.state.done.shape[0]
        if needed <= conversation.cache_length and len(live) > batch // 2:
            return conversation
    # Compaction: a fresh conversation holding only the live rows' histories.
    metrics["rollout/compactions"] += conversation is not None
    prompt_columns = bucket_length(max(len(s.history) + len(s.pending) for s in live), 16)
    # Room for a few more turns before the next compaction, within the sampler's limit.
    wanted = min(2 * (prompt_columns + config.max_new_tokens), policy.config.max_cache_length)
    wanted = max(wanted, prompt_columns + config.max_new_tokens)
    prompts = []
    for row, slot in enumerate(live):
        slot.row = row
        prompts.append(slot.history + slot.pending)
        slot.history = prompts[-1]
        slot.pending = []
    return policy.start(prompts, config.max_new_tokens, cache_length=_cache_bucket(wanted, policy))


def _cache_bucket(n: int, policy: Sampler) -> int:
    size = policy.config.min_window
    while size < n:
        size *= 2
    return min(size, policy.config.max_cache_length)


def _generate_turn(policy: Sampler, conversation: Conversation, live: list[_Live], config: RolloutConfig,
                   turn: int) -> list:
    rows = [[] for _ in range(conversation.num_rows)]
    appended = False
    for slot in live:
        if slot.pending:
            rows[slot.row] = slot.pending
            slot.history = slot.history + slot.pending
            slot.pending = []
            appended = True
    if appended:
        policy.extend(conversation, rows)
    completions = policy.decode(conversation, config.max_new_tokens, config.strategy,
                                seed=derive_seed(config.seed, "turn", turn), stop_strings=config.stop_strings)
    return [completions[slot.row] for slot in live]
