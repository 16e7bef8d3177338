"""Training data: (prompt, response, advantage, old log-probs) examples -> padded train batches.

A grain pipeline shuffles the examples deterministically (by seed), groups them into
batches and pads each batch to a bucketed length, so the train step compiles for a
few shapes only. Responses get an EOS when they lack one (its old log-probability is
unknown, NaN, and the train step treats it as on-policy). Over-long prompts are
left-truncated or dropped, over-long responses cut; every such case is counted. The
iterator's position is JSON state, so it checkpoints with the rest of the system.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import grain
import numpy as np

from rlanything_jax.rl.train_step import TrainBatch

OVERLONG_PROMPT_POLICIES = ("truncate_left", "drop")


@dataclasses.dataclass(frozen=True)
class Example:
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    advantage: float
    old_logprobs: Sequence[float]   # one per response token, from the sampler
    ref_logprobs: Sequence[float] | None = None


@dataclasses.dataclass(frozen=True)
class DataConfig:
    batch_size: int
    max_prompt_tokens: int
    max_response_tokens: int
    eos_id: int
    pad_id: int = 0
    overlong_prompt: str = "truncate_left"
    append_eos: bool = True
    min_bucket: int = 32
    seed: int = 0


def _bucket(n: int, minimum: int) -> int:
    return max(minimum, 1 << (max(n, 1) - 1).bit_length())


def prepare_examples(examples: Sequence[Example], cfg: DataConfig) -> tuple[list[Example], dict[str, int]]:
    """Applies the length rules; returns the kept examples and counts of what was changed."""
    if cfg.overlong_prompt not in OVERLONG_PROMPT_POLICIES:
        raise ValueError(f"overlong_prompt must be one of {OVERLONG_PROMPT_POLICIES}, got {cfg.overlong_prompt!r}")
    counts = dict(examples=len(examples), prompts_dropped=0, prompts_truncated=0, responses_truncated=0,
                  eos_appended=0, zero_advantage_dropped=0)
    kept = []
    for ex in examples:
        if len(ex.old_logprobs) != len(ex.response_ids):
            raise ValueError("an example needs one old log-probability per response token")
        if ex.advantage == 0:
            counts["zero_advantage_dropped"] += 1  # no gradient; the reference drops them too
            continue
        prompt, response, old = list(ex.prompt_ids), list(ex.response_ids), list(ex.old_logprobs)
        ref = None if ex.ref_logprobs is None else list(ex.ref_logprobs)
        if len(prompt) > cfg.max_prompt_tokens:
            if cfg.overlong_prompt == "drop":
                counts["prompts_dropped"] += 1
                continue
            prompt = prompt[-cfg.max_prompt_tokens:]
            counts["prompts_truncated"] += 1
        if cfg.append_eos and (not response or response[-1] != cfg.eos_id):
            response, old = response + [cfg.eos_id], old + [float("nan")]
            ref = None if ref is None else ref + [float("nan")]
            counts["eos_appended"] += 1
        if len(response) > cfg.max_response_tokens:
            response, old = response[:cfg.max_response_tokens], old[:cfg.max_response_tokens]
            ref = None if ref is None else ref[:cfg.max_response_tokens]
            counts["responses_truncated"] += 1
        kept.append(Example(prompt, response, float(ex.advantage), old, ref))
    counts["kept"] = len(kept)
    return kept, counts


def collate(examples: Sequence[Example], cfg: DataConfig) -> TrainBatch:
    """Left-padded prompts + right-padded responses in one [batch_size, bucket] array set.

    A short final batch is filled with empty rows (all-zero loss mask).
    """
    width = _bucket(max(len(e.prompt_ids) + len(e.response_ids) for e in examples), cfg.min_bucket)
    prompt_width = max(len(e.prompt_ids) for e in examples)
    shape = (cfg.batch_size, width)
    ids = np.full(shape, cfg.pad_id, np.int32)
    attention = np.zeros(shape, np.int32)
    targets = np.full(shape, cfg.pad_id, np.int32)
    loss_mask = np.zeros(shape, np.float32)
    old = np.zeros(shape, np.float32)
    ref = np.zeros(shape, np.float32) if any(e.ref_logprobs is not None for e in examples) else None
    advantages = np.zeros((cfg.batch_size,), np.float32)
    for row, ex in enumerate(examples):
        start = prompt_width - len(ex.prompt_ids)
        sequence = list(ex.prompt_ids) + list(ex.response_ids)
        ids[row, start:start + len(sequence)] = sequence
        attention[row, start:start + len(sequence)] = 1
        targets[row, start:start + len(sequence) - 1] = sequence[1:]
        # Position p predicts token p + 1: the response tokens are predicted from prompt_width - 1 on.
        first, n = prompt_width - 1, len(ex.response_ids)
        loss_mask[row, first:first + n] = 1.0
        old[row, first:first + n] = ex.old_logprobs
        if ref is not None:
            ref[row, first:first + n] = ex.ref_logprobs if ex.ref_logprobs is not None else ex.old_logprobs
        advantages[row] = ex.advantage
    return TrainBatch(input_ids=ids, attention_mask=attention, targets=targets, loss_mask=loss_mask, old_logp=old,
                      advantages=advantages, ref_logp=ref)


class BatchIterator:
    """Deterministically shuffled batches over one epoch of examples, with checkpointable position."""

    def __init__(self, examples: Sequence[Example], cfg: DataConfig):
        self.cfg = cfg
        self.examples, self.counts = prepare_examples(examples, cfg)
        dataset = grain.MapDataset.source(self.examples)
        if self.examples:
            dataset = dataset.shuffle(seed=cfg.seed)
        dataset = dataset.batch(cfg.batch_size, drop_remainder=False, batch_fn=lambda rows: collate(rows, cfg))
        self._dataset = dataset
        self._iterator = iter(dataset.to_iter_dataset())

    def __len__(self) -> int:
        return len(self._dataset)

    def __iter__(self) -> Iterator[TrainBatch]:
        return self

    def __next__(self) -> TrainBatch:
        return next(self._iterator)

    def state_dict(self) -> dict:
        return {"iterator": self._iterator.get_state(), "seed": self.cfg.seed}

    def load_state_dict(self, state: dict) -> None:
        if state.get("seed") != self.cfg.seed:
            raise ValueError(f"data iterator state was saved with seed {state.get('seed')}, not {self.cfg.seed}")
        self._iterator.set_state(state["iterator"])
