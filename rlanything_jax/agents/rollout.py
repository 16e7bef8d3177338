"""Multi-turn rollouts: G episodes per task, one batched generation per turn, KV caches kept across turns.

All live episodes share one `Conversation` of the policy sampler: each turn appends
every live row's new user message (`Sampler.extend`) and decodes all rows at once;
finished rows sit the turn out. When the shared cache cannot hold the next turn, or
most rows have finished, the live rows are re-prefilled from their exact token
histories into a fresh, right-sized conversation (compaction). An episode whose
history no longer fits `max_context_tokens` ends with `context_full` (a failure).

Prompts with images (screenshots) pass them to the sampler with their tokens. A scenario whose
prompts are rebuilt every turn (`rebuilds_history`, e.g. only the last 3 screenshots) extends the
cache when the new prompt starts with the row's history; when it does not (an old screenshot
dropped, an earlier message rewritten), the live rows are prefilled again, counted as
`rollout/reprefilled_rows` and `rollout/reprefills`.

The reward model then judges every step m times (`agents/judging.py`).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from typing import Any, Callable, Sequence

from rlanything_jax.agents.prompt_tokens import ImageCache, next_prompt
from rlanything_jax.agents.scenario import PolicyPrompts
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.envs.base import Observation, Task
from rlanything_jax.sampling.sampler import Conversation, Sampler, bucket_length
from rlanything_jax.sampling.strategies import SamplingStrategy, make_strategy
from rlanything_jax.seeds import derive_seed


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
    max_live_episodes: int = 0        # play at most this many episodes at once (whole tasks; 0: all)

    @property
    def strategy(self) -> SamplingStrategy:
        return make_strategy(self.temperature, self.top_k, self.top_p)


ActionOverride = Callable[[Episode, Observation], "str | None"]


@dataclasses.dataclass
class _Live:
    """An episode being played: mutable here, handed on as a frozen `Episode` when it ends."""

    task: Task
    group_index: int
    runner_id: int
    history: list[int]             # exactly this row's tokens in the policy cache
    observation: Observation
    pending: list[int]             # tokens to append before the next decode
    steps: list[StepRecord] = dataclasses.field(default_factory=list)
    row: int = -1                  # row in the current conversation
    images: list = dataclasses.field(default_factory=list)          # the images of `history`
    pending_images: list = dataclasses.field(default_factory=list)  # the images of `pending`
    reprefill: bool = False        # its next prompt does not extend its history: prefill it again
    image_cache: ImageCache = dataclasses.field(default_factory=ImageCache)

    def take_prompt(self, prompt, metrics: Counter) -> None:
        """Sets what to append before the next decode from `agents.prompt_tokens.next_prompt`."""
        if prompt.delta is None:
            self.history, self.images, self.reprefill = [], [], True
            self.pending, self.pending_images = list(prompt.tokens), list(prompt.images)
            metrics["rollout/reprefilled_rows"] += 1
        else:
            self.pending, self.pending_images = list(prompt.delta), list(prompt.delta_images)

    def so_far(self) -> Episode:
        return Episode(task=self.task, group_index=self.group_index, steps=tuple(self.steps))

    def end(self, reason: str, metrics: Counter, won: bool = False, error: str | None = None,
            score: float | None = None) -> Episode:
        metrics[f"episodes/{reason}"] += 1
        return Episode(task=self.task, group_index=self.group_index, steps=tuple(self.steps), won=won,
                       end_reason=reason, env_error=error, score=score)


def play_episodes(policy: Sampler, runner: Any, prompts: PolicyPrompts, tasks: Sequence[Task],
                  config: RolloutConfig, action_override: ActionOverride | None = None,
                  metrics: Counter | None = None, progress: Callable[[str], None] | None = None) -> list[Episode]:
    """Plays `config.group_size` episodes of every task to the end or the step limit.

    `runner` is an `envs.runner.EnvRunner` (reset/step over episode ids). With
    `action_override`, the environment receives its action instead of the parsed one
    (e.g. an expert's), while the policy's response is still recorded.
    """
    metrics = metrics if metrics is not None else Counter()
    tokenizer = policy.tokenizer
    slots = [_Live(task=task, group_index=g, runner_id=i, history=[], observation=None, pending=[])
             for i, (task, g) in enumerate((task, g) for task in tasks for g in range(config.group_size))]
    finished: dict[int, Episode] = {}
    started = time.perf_counter()
    observations = runner.reset({slot.runner_id: slot.task for slot in slots})
    metrics["time/rollout_env_s"] += time.perf_counter() - started
    live: list[_Live] = []
    for slot in slots:
        obs = observations[slot.runner_id]
        if not isinstance(obs, Observation):
            finished[slot.runner_id] = slot.end("env_error", metrics, error=str(getattr(obs, "reason", obs)))
            continue
        slot.observation = obs
        slot.take_prompt(next_prompt(tokenizer, prompts, slot.task, slot.so_far(), obs, [], [],
                                     cache=slot.image_cache), metrics)
        live.append(slot)

    conversation: Conversation | None = None
    stop_texts = {t: tokenizer.decode([t]) for t in tokenizer.stop_token_ids}
    for turn in range(config.max_turns):
        still_fitting = []
        for slot in live:
            if _fits(slot, config, policy):
                still_fitting.append(slot)
            else:
                finished[slot.runner_id] = slot.end("context_full", metrics)
        live = still_fitting
        if not live:
            break
        conversation = _ensure_room(policy, conversation, live, config, metrics)
        started = time.perf_counter()
        completions = _generate_turn(policy, conversation, live, config, turn)
        metrics["time/rollout_sampling_s"] += time.perf_counter() - started
        actions, records = {}, {}
        for slot, completion in zip(live, completions):
            metrics["policy_tokens"] += len(completion.token_ids)
            parsed = prompts.parse_action(completion.text or "", slot.observation)
            metrics[f"parse/{prompts.name}_action/{parsed.status}"] += 1
            records[slot.runner_id] = StepRecord(
                observation=slot.observation, prompt_tokens=tuple(slot.history),
                response_tokens=tuple(completion.token_ids), logprobs=tuple(completion.logprobs),
                response_text=completion.text or "", finish_reason=completion.finish_reason,
                action=parsed.action, parse_status=parsed.status, prompt_images=tuple(slot.images))
            slot.history.extend(completion.token_ids)
            forced = None
            if action_override is not None:
                view = dataclasses.replace(slot.so_far(), steps=tuple(slot.steps) + (records[slot.runner_id],))
                forced = action_override(view, slot.observation)
            actions[slot.runner_id] = forced if forced is not None else parsed.action
        started = time.perf_counter()
        results = runner.step(actions)
        metrics["time/rollout_env_s"] += time.perf_counter() - started
        metrics["env_steps"] += len(actions)
        still_live = []
        for slot, completion in zip(live, completions):
            result = results[slot.runner_id]
            record = records[slot.runner_id]
            if not hasattr(result, "observation"):
                slot.steps.append(record)
                finished[slot.runner_id] = slot.end("env_error", metrics,
                                                    error=str(getattr(result, "reason", result)))
                continue
            slot.steps.append(dataclasses.replace(record, next_observation=result.observation, won_after=result.won))
            if result.done or result.won:
                score = result.info.get("score") if isinstance(result.info, dict) else None
                finished[slot.runner_id] = slot.end("won" if result.won else "done", metrics, won=bool(result.won),
                                                    score=None if score is None else float(score))
                continue
            slot.observation = result.observation
            stop_text = stop_texts.get(completion.token_ids[-1], "") if completion.token_ids else ""
            slot.take_prompt(next_prompt(tokenizer, prompts, slot.task, slot.so_far(), result.observation,
                                         slot.history, slot.images, completion.finish_reason, stop_text,
                                         slot.image_cache), metrics)
            still_live.append(slot)
        live = still_live
        if progress:
            progress(f"turn {turn + 1}/{config.max_turns}: {len(live)} episodes live")
    for slot in live:
        finished[slot.runner_id] = slot.end("max_steps", metrics)
    for slot in slots:
        runner.close_episode(slot.runner_id)
    return [finished[slot.runner_id] for slot in slots]


@dataclasses.dataclass
class RolloutEngine:
    """The policy's rollouts as the loop uses them (`loop.Rollouts`): its sampler, the environments and the
    scenario's prompts. `action_override` (tests, expert play) replaces the action sent to the environment."""

    sampler: Sampler
    runner: Any
    prompts: PolicyPrompts
    action_override: ActionOverride | None = None

    def play(self, tasks: Sequence[Task], config: RolloutConfig, metrics: Counter) -> list[Episode]:
        # Whole tasks per call, so that at most `max_live_episodes` environments (desktops) live at once.
        per_call = max(1, config.max_live_episodes // config.group_size) if config.max_live_episodes else len(tasks)
        episodes: list[Episode] = []
        for start in range(0, len(tasks), max(per_call, 1)):
            episodes += play_episodes(self.sampler, self.runner, self.prompts, tasks[start:start + per_call], config,
                                      self.action_override, metrics)
        return episodes

    def update_params(self, params) -> None:
        self.sampler.update_params(params)


def _fits(slot: _Live, config: RolloutConfig, policy: Sampler) -> bool:
    """The episode's history, next message and response fit its context (as a re-prefilled prompt)."""
    needed = bucket_length(len(slot.history) + len(slot.pending), 16) + config.max_new_tokens
    return needed <= min(config.max_context_tokens, policy.config.max_cache_length)


def _ensure_room(policy: Sampler, conversation: Conversation | None, live: list[_Live],
                 config: RolloutConfig, metrics: Counter) -> Conversation:
    """Keeps the shared conversation if it can take this turn; else re-prefills the live rows."""
    reprefill = any(s.reprefill for s in live)   # one row's cache cannot be rewound alone: prefill them all
    if reprefill:
        metrics["rollout/reprefills"] += 1
    elif conversation is not None and all(s.row >= 0 for s in live):
        needed = conversation.used_columns + bucket_length(max(len(s.pending) for s in live), 1) \
            + config.max_new_tokens
        batch = conversation.state.done.shape[0]
        if needed <= conversation.cache_length and len(live) > batch // 2:
            return conversation
    # Compaction: a fresh conversation holding only the live rows' histories.
    metrics["rollout/compactions"] += conversation is not None and not reprefill
    prompt_columns = bucket_length(max(len(s.history) + len(s.pending) for s in live), 16)
    # Room for a few more turns before the next compaction, within the sampler's limit.
    wanted = min(2 * (prompt_columns + config.max_new_tokens), policy.config.max_cache_length)
    wanted = max(wanted, prompt_columns + config.max_new_tokens)
    prompts, images = [], []
    for row, slot in enumerate(live):
        slot.row = row
        prompts.append(slot.history + slot.pending)
        images.append(slot.images + slot.pending_images)
        slot.history, slot.images = prompts[-1], images[-1]
        slot.pending, slot.pending_images, slot.reprefill = [], [], False
    return policy.start(prompts, config.max_new_tokens, cache_length=_cache_bucket(wanted, policy),
                        images=images if any(images) else None)


def _cache_bucket(n: int, policy: Sampler) -> int:
    size = policy.config.min_window
    while size < n:
        size *= 2
    return min(size, policy.config.max_cache_length)


def _generate_turn(policy: Sampler, conversation: Conversation, live: list[_Live], config: RolloutConfig,
                   turn: int) -> list:
    rows = [[] for _ in range(conversation.num_rows)]
    row_images = [[] for _ in range(conversation.num_rows)]
    appended = False
    for slot in live:
        if slot.pending:
            rows[slot.row], row_images[slot.row] = slot.pending, slot.pending_images
            slot.history, slot.images = slot.history + slot.pending, slot.images + slot.pending_images
            slot.pending, slot.pending_images = [], []
            appended = True
    if appended:
        policy.extend(conversation, rows, images=row_images if any(row_images) else None)
    completions = policy.decode(conversation, config.max_new_tokens, config.strategy,
                                seed=derive_seed(config.seed, "turn", turn), stop_strings=config.stop_strings)
    return [completions[slot.row] for slot in live]
