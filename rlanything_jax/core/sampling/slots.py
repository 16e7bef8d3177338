"""Continuous batching for single-turn generations (the reward model's judgments, the environment model's
rewrites, unit tests): a fixed budget of rows over one KV cache, refilled as generations end.

Generations pause every `refill_every` decode steps (`Sampler.advance`). Then the rows that ended are
read out, and the next queued prompts take them (`Sampler.join`: each prompt is prefilled once, on its
own, and its k samples placed in k free rows, ending at the shared write column). Nothing recompiles
beyond the usual shape buckets. Because rows join at different columns, the write column runs past every
row; the live rows are then moved, packed, to the front of a right-sized cache (`Sampler.repack`, no
prefill). The same happens when a refill would not fit, and when the queue is empty and most rows have
ended (a smaller batch for the tail).

Greedy outputs equal one batched `Sampler.generate` of the same prompts: a row's tokens depend only
on its own cache. With sampling, each pause draws from a new key, so samples differ from `generate`'s
for the same seed (but are reproducible).
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, Sequence, cast

import numpy as np

from rlanything_jax.core import multihost
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.progress import Progress
from rlanything_jax.core.sampling.sampler import Conversation, Sampler, bucket_length
from rlanything_jax.core.sampling.stops import Completion, completion_of
from rlanything_jax.core.sampling.strategies import Greedy, SamplingStrategy
from rlanything_jax.core.seeds import derive_seed

REFILL_EVERY = 16   # decode steps between refills: a host round trip per pause, rows idle at most this long


def generate_in_slots(sampler: Sampler, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                      strategy: SamplingStrategy = Greedy(), *, slots: int, num_samples: int = 1, seed: int = 0,
                      images: Sequence[Sequence[Any]] | None = None,
                      stop_token_ids: Sequence[int] | None = None, refill_every: int = REFILL_EVERY,
                      tag: str = "slots") -> tuple[list[Completion], Counts]:
    """num_samples completions of each token-id prompt, prompt-major (as `Sampler.generate` returns them),
    generated in at most `slots` rows at once (at least one prompt's samples), prompts admitted in order.

    Counts `<tag>/busy_slot_steps` (tokens generated), `<tag>/slot_steps` (decode steps x slots),
    `<tag>/joined_rows`, `<tag>/repacks` and `<tag>/deferred_refills` (free rows left waiting: the next
    prompt and the live rows would not fit max_cache_length together): the call's own, returned with the
    completions.
    """
    metrics: Counter = Counter()
    if num_samples < 1 or refill_every < 1:
        raise ValueError(f"num_samples and refill_every must be >= 1, got {num_samples} and {refill_every}")
    for prompt in prompts:
        if not prompt or bucket_length(len(prompt), 16) + max_new_tokens > sampler.config.max_cache_length:
            raise ValueError(f"a prompt of {len(prompt)} tokens plus {max_new_tokens} new tokens does not fit "
                             f"max_cache_length {sampler.config.max_cache_length}")
    if stop_token_ids is None:
        stop_token_ids = sampler.tokenizer.stop_token_ids if sampler.tokenizer is not None else ()
    stops = set(int(t) for t in stop_token_ids)
    run = _Slots(sampler, prompts, max_new_tokens, num_samples, max(slots // num_samples, 1) * num_samples,
                 images, metrics, tag)
    call = 0
    lines = Progress(tag, len(run.out), "completions")
    while run.queue or run.live_rows():
        run.fill()
        before = run.generated()
        columns = run.conversation.used_columns
        sampler.advance(run.conversation, max_new_tokens, refill_every, strategy,
                        derive_seed(seed, "slots", call), stop_token_ids)
        call += 1
        metrics[f"{tag}/slot_steps"] += (run.conversation.used_columns - columns) * run.capacity
        run.read_out(before, stops)
        lines.update(sum(out is not None for out in run.out))
    return cast(list[Completion], run.out), dict(metrics)   # every output is filled by now


class _Slots:
    """One call's rows: `owner[row]` is the output index a row generates (None: free)."""

    def __init__(self, sampler: Sampler, prompts: Sequence[Sequence[int]], max_new_tokens: int, num_samples: int,
                 capacity: int, images: Sequence[Sequence[Any]] | None, metrics: Counter, tag: str):
        self.sampler, self.prompts, self.images = sampler, prompts, images
        self.max_new_tokens, self.num_samples, self.capacity = max_new_tokens, num_samples, capacity
        self.metrics, self.tag = metrics, tag
        self.queue = deque(range(len(prompts)))
        self.out: list[Completion | None] = [None] * (len(prompts) * num_samples)
        self.owner: list[int | None] = []
        self.conversation: Conversation   # the first fill() starts it

    def live_rows(self) -> list[int]:
        return [row for row, index in enumerate(self.owner) if index is not None]

    def generated(self) -> np.ndarray:
        return multihost.to_host(self.conversation.state.num_generated)

    def _images_of(self, indices: Sequence[int]) -> list | None:
        return [list(self.images[i]) for i in indices] if self.images is not None and any(self.images) else None

    def _take(self, count: int) -> list[int]:
        return [self.queue.popleft() for _ in range(count)]

    def _outputs(self, indices: Sequence[int]) -> list[int]:
        return [i * self.num_samples + j for i in indices for j in range(self.num_samples)]

    def fill(self) -> None:
        """Free rows to the next prompts: a fresh conversation when none is running, else joins (after a
        repack when they would not fit, or when the window or the batch has outgrown the live rows)."""
        m = self.num_samples
        live = self.live_rows()
        if not live:
            taken = self._take(min(self.capacity // m, len(self.queue)))
            self.conversation = self.sampler.start([self.prompts[i] for i in taken], self.max_new_tokens,
                                                   num_samples=m, images=self._images_of(taken))
            self.owner = list(self._outputs(taken))
            return
        joining = list(self.queue)[:min((self.capacity - len(live)) // m, len(self.queue))]
        prompt_columns = bucket_length(max(len(self.prompts[i]) for i in joining), 16) if joining else 0
        counts = multihost.to_host(self.conversation.state.cache.valid.sum(axis=1))
        longest = int(max(counts[row] for row in live))
        remaining = self.max_new_tokens - int(min(self.generated()[row] for row in live))
        room = max(remaining, self.max_new_tokens if joining else 0)
        write = max(longest, prompt_columns)
        if joining and write + room > self.sampler.config.max_cache_length:
            joining, prompt_columns, room, write = [], 0, remaining, longest   # wait for live rows to end
            self.metrics[f"{self.tag}/deferred_refills"] += 1
        used, length = self.conversation.used_columns, self.conversation.cache_length
        fits = prompt_columns <= used and used + room <= length
        shrink = not self.queue and len(live) <= self.conversation.state.done.shape[0] // 2
        if not fits or used > 2 * write or shrink:
            self._repack(live, write, room, keep_batch=bool(self.queue))
        if joining:
            taken = self._take(len(joining))
            free = [row for row, index in enumerate(self.owner) if index is None][:len(taken) * m]
            self.sampler.join(self.conversation, free, [self.prompts[i] for i in taken],
                              images=self._images_of(taken), num_samples=m)
            for row, index in zip(free, self._outputs(taken)):
                self.owner[row] = index
            self.metrics[f"{self.tag}/joined_rows"] += len(free)

    def _repack(self, live: list[int], write: int, room: int, keep_batch: bool) -> None:
        """The live rows first, packed; empty rows after them up to the slots while prompts wait."""
        config = self.sampler.config
        length = min(max(bucket_length(write + room, config.min_window), self.conversation.cache_length),
                     config.max_cache_length)
        rows = live + [-1] * ((self.capacity - len(live)) if keep_batch else 0)
        self.conversation = self.sampler.repack(self.conversation, rows, length, write_column=write)
        self.owner = [self.owner[row] for row in live] + [None] * (len(rows) - len(live))
        self.metrics[f"{self.tag}/repacks"] += 1

    def read_out(self, before: np.ndarray, stops: set[int]) -> None:
        """Completions of the rows that ended; their rows become free."""
        state = self.conversation.state
        counts, tokens, logprobs, done = multihost.to_host(
            (state.num_generated, state.tokens, state.logprobs, state.done))
        for row in self.live_rows():
            self.metrics[f"{self.tag}/busy_slot_steps"] += int(counts[row] - before[row])
            if done[row]:
                self.out[cast(int, self.owner[row])] = completion_of(   # a live row's output
                    tokens[row, :counts[row]].tolist(), logprobs[row, :counts[row]].tolist(),
                    self.sampler.tokenizer, stops, (), self.max_new_tokens)
                self.owner[row] = None


def occupancy(counts: Counts, tag: str) -> float:
    """Mean fraction of the slots busy over the decode steps counted under `tag`."""
    return counts.get(f"{tag}/busy_slot_steps", 0) / max(counts.get(f"{tag}/slot_steps", 0), 1)
