"""How the live episodes of a rollout sit in the rows of one shared `Conversation` of the policy sampler.

Each turn appends every live row's new user message (`Sampler.extend`) and decodes all rows at once;
finished rows sit the turn out. When the shared cache cannot hold the next turn, most rows have finished,
or the write column runs far past the longest row, the live rows' caches are moved, packed, into a
right-sized conversation (`Sampler.repack`: no model runs). A fresh prefill of the exact token histories
(compaction) is left for the rows whose next prompt does not extend their history and for newcomers whose
prompt does not fit. An episode that joins a running conversation gets a freed row and its first prompt is
prefilled into it (`Sampler.join`) while the other rows keep their caches.
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.prompt_tokens import ImageCache
from rlanything_jax.agents.rollout_config import RolloutConfig
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.sampling.sampler import Conversation, Sampler, bucket_length
from rlanything_jax.core.seeds import derive_seed


@dataclasses.dataclass
class LiveEpisode:
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

    def take_prompt(self, prompt) -> bool:
        """Sets what to append before the next decode from `agents.prompt_tokens.next_prompt`; True when the
        prompt does not extend the history (the row is prefilled again)."""
        if prompt.delta is None:
            self.history, self.images, self.reprefill = [], [], True
            self.pending, self.pending_images = list(prompt.tokens), list(prompt.images)
            return True
        self.pending, self.pending_images = list(prompt.delta), list(prompt.delta_images)
        return False

    def so_far(self) -> Episode:
        return Episode(task=self.task, group_index=self.group_index, steps=tuple(self.steps))

    def end(self, reason: str, won: bool = False, error: str | None = None,
            graded_outcome: float | None = None) -> Episode:
        return Episode(task=self.task, group_index=self.group_index, steps=tuple(self.steps), won=won,
                       end_reason=reason, env_error=error, graded_outcome=graded_outcome)



def fits(slot: LiveEpisode, config: RolloutConfig, policy: Sampler) -> bool:
    """The episode's history, next message and response fit its context (as a re-prefilled prompt)."""
    needed = bucket_length(len(slot.history) + len(slot.pending), 16) + config.max_new_tokens
    return needed <= min(config.max_prompt_tokens + config.max_new_tokens, policy.config.max_cache_length)


def ensure_room(policy: Sampler, conversation: Conversation | None, live: list[LiveEpisode],
                config: RolloutConfig) -> tuple[Conversation, Counts]:
    """Keeps the shared conversation if it can take this turn; else re-prefills the live rows. With what it
    did: `rollout/reprefills`, `repacks`, `joined_rows`, `compactions`."""
    reprefill = any(s.reprefill for s in live)   # one row's cache cannot be rewound alone: prefill them all
    counts = {"rollout/reprefills": 1} if reprefill else {}
    if not reprefill and conversation is not None:
        if _worth_repacking(conversation, live, config):
            conversation = _repack(policy, conversation, live, config)
            counts["rollout/repacks"] = 1
        if _room_for_turn(conversation, live, config):
            return conversation, {**counts, "rollout/joined_rows": _place_joining(conversation, live)}
    # Compaction: a fresh conversation holding only the live rows' histories, prefilled again.
    counts["rollout/compactions"] = int(conversation is not None and not reprefill)
    prompts, images = [], []
    for row, slot in enumerate(live):
        slot.row = row
        prompts.append(slot.history + slot.pending)
        images.append(slot.images + slot.pending_images)
        slot.history, slot.images = prompts[-1], images[-1]
        slot.pending, slot.pending_images, slot.reprefill = [], [], False
    return policy.start(prompts, config.max_new_tokens, cache_length=_cache_length(live, config, policy),
                        images=images if any(images) else None), counts


def _cache_length(live: list[LiveEpisode], config: RolloutConfig, policy: Sampler) -> int:
    """Room for the longest row and its next turn, and for a few more turns before the next repack, within
    the sampler's limit."""
    longest = bucket_length(max(len(s.history) + len(s.pending) for s in live), 16) + config.max_new_tokens
    return _cache_bucket(max(min(2 * longest, policy.config.max_cache_length), longest), policy)


def _room_for_turn(conversation: Conversation, live: list[LiveEpisode], config: RolloutConfig) -> bool:
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


def _worth_repacking(conversation: Conversation, live: list[LiveEpisode], config: RolloutConfig) -> bool:
    """Most rows have left (a smaller batch), the write column has run past twice the longest row (rows
    joined and left at different columns: every decode step reads the whole window), or the turn does not
    fit the cache as it is."""
    continuing = [s for s in live if s.row >= 0]
    if not continuing:
        return False
    batch = conversation.state.done.shape[0]
    return (len(live) <= batch // 2 or conversation.used_columns > 2 * max(len(s.history) for s in continuing)
            or not _room_for_turn(conversation, live, config))


def _repack(policy: Sampler, conversation: Conversation, live: list[LiveEpisode],
            config: RolloutConfig) -> Conversation:
    """The continuing rows, their caches moved to the front of a right-sized cache (`Sampler.repack`: no
    prefill), with empty rows for the joining episodes."""
    continuing = [s for s in live if s.row >= 0]
    rows = [s.row for s in continuing] + [-1] * (len(live) - len(continuing))
    repacked = policy.repack(conversation, rows, _cache_length(live, config, policy))
    for row, slot in enumerate(continuing):
        slot.row = row
    return repacked


def _place_joining(conversation: Conversation, live: list[LiveEpisode]) -> int:
    """Gives each joining episode a row no live episode holds (`generate_turn` prefills it there)."""
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


def generate_turn(policy: Sampler, conversation: Conversation, live: list[LiveEpisode], config: RolloutConfig,
                   seed: int, turn: int) -> list:
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
                                seed=derive_seed(seed, "turn", turn), stop_strings=config.stop_strings)
    return [completions[slot.row] for slot in live]
