"""Multi-turn rollouts: G episodes per task, one batched generation per turn, KV caches kept across turns.

All live episodes share one `Conversation` of the policy sampler: each turn appends
every live row's new user message (`Sampler.extend`) and decodes all rows at once;
finished rows sit the turn out. When the shared cache cannot hold the next turn, most
rows have finished, or the write column runs far past the longest row, the live rows'
caches are moved, packed, into a right-sized conversation (`Sampler.repack`: no model
runs). A fresh prefill of the exact token histories (compaction) is left for the rows
whose next prompt does not extend their history and for newcomers whose prompt does not
fit. An episode whose history no longer fits `max_context_tokens` ends with
`context_full` (a failure).

With a slot budget (`max_live_episodes`) smaller than the step's episodes, the rest wait in
a queue; with `continuous_batching`, an episode that ends frees its environment and its
cache row at once, and the next queued episode takes them: its environment is reset and
its first prompt prefilled on its own and placed in the freed row (`Sampler.join`) while
the other rows keep their caches. Without it, whole tasks are played in waves of the
budget and every wave runs until its longest episode ends. `rollout/slot_occupancy` is
the mean fraction of the budget's slots busy over the decoding turns.

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
from collections import Counter, deque
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
    max_live_episodes: int = 0        # play at most this many episodes at once (0: all)
    continuous_batching: bool = True  # refill an ended episode's slot at once (else: waves of whole tasks)

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
    joining: bool = False          # given a freed row of the conversation; its prompt is prefilled into it
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
                  metrics: Counter | None = None, progress: Callable[[str], None] | None = None,
                  slots: int = 0) -> list[Episode]:
    """Plays `config.group_size` episodes of every task to the end or the step limit, at most `slots` (0: all)
    at a time: an episode that ends hands its slot to the next one in task order (continuous batching).

    `runner` is an `envs.runner.EnvRunner` (reset/step over episode ids). With
    `action_override`, the environment receives its action instead of the parsed one
    (e.g. an expert's), while the policy's response is still recorded.
    """
    metrics = metrics if metrics is not None else Counter()
    tokenizer = policy.tokenizer
    everyone = [_Live(task=task, group_index=g, runner_id=i, history=[], observation=None, pending=[])
                for i, (task, g) in enumerate((task, g) for task in tasks for g in range(config.group_size))]
    capacity = min(slots or len(everyone), len(everyone))
    queue = deque(everyone)
    finished: dict[int, Episode] = {}

    def end(slot: _Live, episode: Episode) -> None:
        finished[slot.runner_id] = episode
        runner.close_episode(slot.runner_id)   # its environment (a desktop, a sandbox) goes at once

    live: list[_Live] = []
    conversation: Conversation | None = None
    stop_texts = {t: tokenizer.decode([t]) for t in tokenizer.stop_token_ids}
    turn = 0
    while live or queue:
        live = _admit(live, queue, capacity, runner, prompts, tokenizer, end, config, policy, metrics)
        if not live:
            continue
        conversation = _ensure_room(policy, conversation, live, config, metrics)
        metrics["rollout/slot_turns"] += capacity
        metrics["rollout/busy_slot_turns"] += len(live)
        started = time.perf_counter()
        completions = _generate_turn(policy, conversation, live, config, turn)
        metrics["time/rollout_sampling_s"] += time.perf_counter() - started
        turn += 1
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
                end(slot, slot.end("env_error", metrics, error=str(getattr(result, "reason", result))))
                continue
            slot.steps.append(dataclasses.replace(record, next_observation=result.observation, won_after=result.won))
            if result.done or result.won:
                score = result.info.get("score") if isinstance(result.info, dict) else None
                end(slot, slot.end("won" if result.won else "done", metrics, won=bool(result.won),
                                   score=None if score is None else float(score)))
                continue
            if len(slot.steps) >= config.max_turns:
                end(slot, slot.end("max_steps", metrics))
                continue
            slot.observation = result.observation
            stop_text = stop_texts.get(completion.token_ids[-1], "") if completion.token_ids else ""
            slot.take_prompt(next_prompt(tokenizer, prompts, slot.task, slot.so_far(), result.observation,
                                         slot.history, slot.images, completion.finish_reason, stop_text,
                                         slot.image_cache), metrics)
            still_live.append(slot)
        live = still_live
        if progress:
            progress(f"turn {turn}: {len(live)} episodes live, {len(queue)} waiting")
    return [finished[slot.runner_id] for slot in everyone]


def _admit(live: list[_Live], queue: deque, capacity: int, runner: Any, prompts: PolicyPrompts,
           tokenizer: Any, end: Callable, config: RolloutConfig, policy: Sampler, metrics: Counter) -> list[_Live]:
    """Fills free slots from the queue (their environments reset together) and ends the episodes whose next
    turn no longer fits their context; returns the live episodes, busy slots first in the old order."""
    while True:
        joining = [queue.popleft() for _ in range(min(capacity - len(live), len(queue)))]
        if joining:
            started = time.perf_counter()
            observations = runner.reset({slot.runner_id: slot.task for slot in joining})
            metrics["time/rollout_env_s"] += time.perf_counter() - started
        for slot in joining:
            obs = observations[slot.runner_id]
            if not isinstance(obs, Observation):
                end(slot, slot.end("env_error", metrics, error=str(getattr(obs, "reason", obs))))
                continue
            slot.observation = obs
            slot.take_prompt(next_prompt(tokenizer, prompts, slot.task, slot.so_far(), obs, [], [],
                                         cache=slot.image_cache), metrics)
            live.append(slot)
        fitting = []
        for slot in live:
            if _fits(slot, config, policy):
                fitting.append(slot)
            else:
                end(slot, slot.end("context_full", metrics))
        live = fitting
        if len(live) == capacity or not queue:
            return live


@dataclasses.dataclass
class RolloutEngine:
    """The policy's rollouts as the loop uses them (`loop.Rollouts`): its sampler, the environments and the
    scenario's prompts. `action_override` (tests, expert play) replaces the action sent to the environment."""

    sampler: Sampler
    runner: Any
    prompts: PolicyPrompts
    action_override: ActionOverride | None = None

    def play(self, tasks: Sequence[Task], config: RolloutConfig, metrics: Counter) -> list[Episode]:
        # At most `max_live_episodes` environments (desktops) live at once: refilled slots, or waves of whole tasks.
        if config.continuous_batching or not config.max_live_episodes:
            episodes = play_episodes(self.sampler, self.runner, self.prompts, tasks, config, self.action_override,
                                     metrics, slots=config.max_live_episodes)
        else:
            per_call = max(1, config.max_live_episodes // config.group_size)
            episodes = []
            for start in range(0, len(tasks), per_call):
                episodes += play_episodes(self.sampler, self.runner, self.prompts, tasks[start:start + per_call],
                                          config, self.action_override, metrics)
        metrics["rollout/slot_occupancy"] = metrics["rollout/busy_slot_turns"] / max(metrics["rollout/slot_turns"], 1)
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
    elif conversation is not None:
        if _worth_repacking(conversation, live, config):
            conversation = _repack(policy, conversation, live, config, metrics)
        if _room_for_turn(conversation, live, config):
            metrics["rollout/joined_rows"] += _place_joining(conversation, live)
            return conversation
    # Compaction: a fresh conversation holding only the live rows' histories, prefilled again.
    metrics["rollout/compactions"] += conversation is not None and not reprefill
    prompts, images = [], []
    for row, slot in enumerate(live):
        slot.row = row
        prompts.append(slot.history + slot.pending)
        images.append(slot.images + slot.pending_images)
        slot.history, slot.images = prompts[-1], images[-1]
        slot.pending, slot.pending_images, slot.reprefill = [], [], False
    return policy.start(prompts, config.max_new_tokens, cache_length=_cache_length(live, config, policy),
                        images=images if any(images) else None)


def _cache_length(live: list[_Live], config: RolloutConfig, policy: Sampler) -> int:
    """Room for the longest row and its next turn, and for a few more turns before the next repack, within
    the sampler's limit."""
    longest = bucket_length(max(len(s.history) + len(s.pending) for s in live), 16) + config.max_new_tokens
    return _cache_bucket(max(min(2 * longest, policy.config.max_cache_length), longest), policy)


def _room_for_turn(conversation: Conversation, live: list[_Live], config: RolloutConfig) -> bool:
    """The conversation can take this turn: the continuing rows' messages and responses fit its cache, and
    the episodes that joined since (row -1) find free rows and their prompts fit before the write column."""
    batch = conversation.state.done.shape[0]
    continuing = [s for s in live if s.row >= 0]
    joining = [s for s in live if s.row < 0]
    extend = bucket_length(max(len(s.pending) for s in continuing), 1) if continuing else 0
    if conversation.used_columns + extend + config.max_new_tokens > conversation.cache_length:
        return False
    return not joining or (batch - len(continuing) >= len(joining) and bucket_length(
        max(len(s.pending) for s in joining), 16) <= conversation.used_columns + extend)


def _worth_repacking(conversation: Conversation, live: list[_Live], config: RolloutConfig) -> bool:
    """Most rows have left (a smaller batch), the write column has run past twice the longest row (rows
    joined and left at different columns: every decode step reads the whole window), or the turn does not
    fit the cache as it is."""
    continuing = [s for s in live if s.row >= 0]
    if not continuing:
        return False
    batch = conversation.state.done.shape[0]
    return (len(live) <= batch // 2 or conversation.used_columns > 2 * max(len(s.history) for s in continuing)
            or not _room_for_turn(conversation, live, config))


def _repack(policy: Sampler, conversation: Conversation, live: list[_Live], config: RolloutConfig,
            metrics: Counter) -> Conversation:
    """The continuing rows, their caches moved to the front of a right-sized cache (`Sampler.repack`: no
    prefill), with empty rows for the joining episodes."""
    continuing = [s for s in live if s.row >= 0]
    rows = [s.row for s in continuing] + [-1] * (len(live) - len(continuing))
    repacked = policy.repack(conversation, rows, _cache_length(live, config, policy))
    for row, slot in enumerate(continuing):
        slot.row = row
    metrics["rollout/repacks"] += 1
    return repacked


def _place_joining(conversation: Conversation, live: list[_Live]) -> int:
    """Gives each joining episode a row no live episode holds (`_generate_turn` prefills it there)."""
    taken = {s.row for s in live if s.row >= 0}
    free = iter(r for r in range(conversation.state.done.shape[0]) if r not in taken)
    joining = [slot for slot in live if slot.row < 0]
    for slot in joining:
        slot.row, slot.joining = next(free), True
    return len(joining)


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
    joining = [slot for slot in live if slot.joining]
    for slot in live:
        if slot.pending and not slot.joining:
            rows[slot.row], row_images[slot.row] = slot.pending, slot.pending_images
            slot.history, slot.images = slot.history + slot.pending, slot.images + slot.pending_images
            slot.pending, slot.pending_images = [], []
            appended = True
    if appended:
        policy.extend(conversation, rows, images=row_images if any(row_images) else None)
    if joining:   # after the extend, which would mark rows without new tokens done
        images = [slot.pending_images for slot in joining]
        policy.join(conversation, [slot.row for slot in joining], [slot.pending for slot in joining],
                    images=images if any(images) else None)
        for slot in joining:
            slot.history, slot.images, slot.pending, slot.pending_images = slot.pending, slot.pending_images, [], []
            slot.joining = False
    completions = policy.decode(conversation, config.max_new_tokens, config.strategy,
                                seed=derive_seed(config.seed, "turn", turn), stop_strings=config.stop_strings)
    return [completions[slot.row] for slot in live]
