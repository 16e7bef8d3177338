"""Shared prompts (`TrainConfig.share_prompts`): an update's examples with one prompt train it as one shared prefix.

`core/rl/phase.train_phase` hands `collate_update` to its `BatchIterator`, which still decides which examples go into
which update (the same shuffle and even split as without sharing). Within an update, the examples are grouped by
prompt token ids, in order of first appearance. If no two of them share a prompt, or one has images, or one has an
empty prompt, the update is collated as without sharing (`data.collate`). Otherwise every example becomes a row that
continues a prefix (`TrainBatch.prefix_ids/prefix_mask/prefix_index`, see `train_step.share_prompt_prefixes`): the
prefix is its prompt but the last token, whose position predicts the first response token, and the row is that
last token and the response (collated as `collate` would a one-token prompt: the same targets, loss weights,
advantages and log-probabilities). Examples with one prompt continue one prefix, whose forward and backward run
once for them all; an example alone with its prompt continues a prefix of its own (about its plain row's cost).

Micro-batches: the groups in order, each added to the current micro-batch while that holds fewer than
`micro_batch_size` prefixes and at most `row_cap` rows, the rows' tokens that `micro_batch_size` plain rows hold
(`micro_batch_size * plain width // row width`, at least 1); a group larger than that is split, each part with its
own copy of the prefix. Shapes are bucketed as `collate` and `phase.update_plan` bucket them: micro-batches per update
and rows per micro-batch rounded up to powers of two, `micro_batch_size` prefix slots per micro-batch, prefix and
row widths by `data._bucket`. Filler prefixes are all padding (mask 0); filler rows have no attention and no loss
and continue a prefix of their own micro-batch; a micro-batch of filler rows only is skipped by the step.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

import numpy as np

from rlanything_jax.core.rl.data import DataConfig, Example, _bucket, collate
from rlanything_jax.core.rl.train_step import TrainBatch


def prompt_groups(examples: Sequence[Example]) -> list[list[int]]:
    """Indices of the examples grouped by identical prompt token ids, groups in order of first appearance."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, ex in enumerate(examples):
        by_prompt.setdefault(tuple(int(t) for t in ex.prompt_ids), []).append(i)
    return list(by_prompt.values())


def _power_of_two(n: int) -> int:
    return 1 << (max(n, 1) - 1).bit_length()


def micro_batch_layout(groups: Sequence[Sequence[int]], prefixes: int, row_cap: int) -> list[list[list[int]]]:
    """The micro-batches (each a list of parts, a part the rows of one prefix) of `groups` in order: at most
    `prefixes` parts and `row_cap` rows a micro-batch; a group of more than `row_cap` rows is split."""
    micros: list[list[list[int]]] = [[]]
    for group in groups:
        for start in range(0, len(group), row_cap):
            part = list(group[start:start + row_cap])
            current = micros[-1]
            if len(current) == prefixes or sum(map(len, current)) + len(part) > row_cap:
                current = []
                micros.append(current)
            current.append(part)
    return micros


def collate_update(examples: Sequence[Example], cfg: DataConfig, micro_batch_size: int) -> TrainBatch:
    """One update's batch: with shared prompt prefixes when two of its examples share a prompt (see the module
    docstring), else `collate(examples, cfg)`. The number of micro-batches of a batch with prefixes is
    `prefix_ids.shape[0] // micro_batch_size`."""
    groups = prompt_groups(examples)
    if len(groups) == len(examples) or any(ex.images for ex in examples) or any(
            not ex.prompt_ids for ex in examples):
        return collate(examples, cfg)
    rows = [dataclasses.replace(ex, prompt_ids=list(ex.prompt_ids)[-1:]) for ex in examples]
    row_batch = collate(rows, dataclasses.replace(cfg, batch_size=len(rows), images=None))
    row_width = row_batch.input_ids.shape[1]
    plain_width = _bucket(max(len(ex.prompt_ids) + len(ex.response_ids) for ex in examples), cfg.min_bucket)
    row_cap = max(1, micro_batch_size * plain_width // row_width)
    micros = micro_batch_layout(groups, micro_batch_size, row_cap)
    num_micro = _power_of_two(len(micros))
    rows_per_micro = _power_of_two(max(sum(map(len, parts)) for parts in micros))
    prefix_width = _bucket(max(len(ex.prompt_ids) - 1 for ex in examples), cfg.min_bucket)

    prefix_ids = np.full((num_micro * micro_batch_size, prefix_width), cfg.pad_id, np.int32)
    prefix_mask = np.zeros(prefix_ids.shape, np.int32)
    # Row r of the batch is row_batch's row source[r] (-1: a filler row), continuing prefix index[r]; a filler row
    # continues its micro-batch's first prefix (the step indexes each micro-batch's own prefixes).
    source = np.full(num_micro * rows_per_micro, -1, np.int64)
    index = np.repeat(np.arange(num_micro, dtype=np.int32) * micro_batch_size, rows_per_micro)
    for m, parts in enumerate(micros):
        row = m * rows_per_micro
        for s, part in enumerate(parts):
            slot = m * micro_batch_size + s
            head = list(examples[part[0]].prompt_ids)[:-1]
            if head:
                prefix_ids[slot, prefix_width - len(head):] = head
                prefix_mask[slot, prefix_width - len(head):] = 1
            source[row:row + len(part)] = part
            index[row:row + len(part)] = slot
            row += len(part)
    filled = source >= 0

    def place(x, fill):
        if x is None:
            return None
        x = np.asarray(x)
        out = np.full((len(source),) + x.shape[1:], fill, x.dtype)
        out[filled] = x[source[filled]]
        return out

    # A host batch: numpy arrays in the jax.Array fields until `Learner.place` puts them on the devices.
    return TrainBatch(input_ids=place(row_batch.input_ids, cfg.pad_id),
                      attention_mask=place(row_batch.attention_mask, 0),
                      targets=place(row_batch.targets, cfg.pad_id), loss_mask=place(row_batch.loss_mask, 0),
                      old_logp=place(row_batch.old_logp, 0), advantages=place(row_batch.advantages, 0),
                      ref_logp=place(row_batch.ref_logp, 0),
                      prefix_ids=prefix_ids, prefix_mask=prefix_mask, prefix_index=index)   # type: ignore[arg-type]


def sharing_counts(batch: TrainBatch) -> dict[str, int]:
    """How many of a host batch's rows continue a prefix that another of its rows continues
    (`shared_prompt_rows`), and how many such prefixes it has (`shared_prompts`); 0 for a batch without prefixes."""
    if batch.prefix_index is None:
        return {"shared_prompt_rows": 0, "shared_prompts": 0}
    live = np.asarray(batch.attention_mask).sum(axis=1) > 0
    per_prefix = Counter(np.asarray(batch.prefix_index)[live].tolist())
    shared = [n for n in per_prefix.values() if n > 1]
    return {"shared_prompt_rows": sum(shared), "shared_prompts": len(shared)}
