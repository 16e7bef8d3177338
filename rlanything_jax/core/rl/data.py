"""Training data: (prompt, response, advantage, old log-probs) examples -> padded train batches.

A grain pipeline shuffles the examples deterministically (by seed), groups them into
batches and pads each batch to a bucketed length, so the train step compiles for a
few shapes only. Responses get an EOS when they lack one (its old log-probability is
unknown, NaN, and the train step treats it as on-policy). Over-long prompts are
left-truncated or dropped, over-long responses cut; every such case is counted. The
iterator's position is JSON state, so it checkpoints with the rest of the system.

Turn packing: in a multi-turn episode step t + 1's prompt extends step t's prompt +
response, so one sequence (the last prompt + its response) holds every step's
response with exactly the context it was sampled with. `pack_turns` builds that
example: its `segments` mark each step's response inside `response_ids` with the
step's advantage; the tokens between them (environment messages) get no loss. It
trains at O(T) tokens what the per-step examples train at O(T^2), with the same loss.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import grain
import numpy as np

from rlanything_jax.core.interfaces import ImageInputs
from rlanything_jax.core.rl.losses import AGGREGATIONS
from rlanything_jax.core.rl.train_config import OVERLONG_PROMPT_POLICIES
from rlanything_jax.core.rl.train_step import TrainBatch


class Segment(NamedTuple):
    """A trained span [start, end) of an example's response_ids, with its advantage."""
    start: int
    end: int
    advantage: float


@dataclasses.dataclass(frozen=True)
class Example:
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    advantage: float                # a packed example's advantages are in `segments`; this one is unused
    old_logprobs: Sequence[float]   # one per response token, from the sampler (any value on context tokens)
    ref_logprobs: Sequence[float] | None = None
    segments: Sequence[Segment] | None = None  # None: the whole response is one segment (a plain example)
    # A vision-language example's images as its model encodes them (`interfaces.ImageInputs.encode`), in
    # order, one per run of image pads in prompt_ids (whose pads are expanded: `ImageInputs.expand`).
    images: Sequence[Any] | None = None
    # The sampler ended the response on a stop string (no stop token): it is trained as sampled, with no
    # EOS appended (the template closes the turn after it, and the model never wrote an EOS there).
    stop_string: bool = False


@dataclasses.dataclass(frozen=True)
class DataConfig:
    batch_size: int
    max_prompt_tokens: int
    max_response_tokens: int
    eos_id: int
    pad_id: int = 0
    # Other tokens that end a response as the sampler stops on them (e.g. <|endoftext|> beside <|im_end|>): a
    # response ending in one of them or in eos_id ended itself and gets no EOS appended.
    stop_ids: tuple[int, ...] = ()
    overlong_prompt: str = "truncate_left"
    append_eos: bool = True
    min_bucket: int = 32
    seed: int = 0
    # None: a 0/1 loss mask and one advantage per row (plain examples only; the loss aggregates).
    # "sequence_mean" / "token_mean": per-token advantages [N, L] and a weighted loss mask with which the
    # loss's "token_mean" equals this aggregation over the per-step segments (see `collate`).
    aggregation: str | None = None
    # Targets, loss mask, log-probs and per-token advantages for the last W columns only (W: the columns
    # from the earliest response on, rounded up to a bucket): the train step then computes logits there.
    loss_window: bool = True
    # Vision-language examples: how the model reads their images (its pad token, token counts, batch inputs).
    images: ImageInputs | None = None


def _bucket(n: int, minimum: int) -> int:
    return max(minimum, 1 << (max(n, 1) - 1).bit_length())


def pack_turns(steps: Sequence[Example]) -> Example | None:
    """One example holding an episode's plain per-step examples, or None when some step's prompt does
    not start with the previous step's prompt + response (e.g. a left-truncated history)."""
    if not steps or any(s.segments is not None for s in steps):
        raise ValueError("pack_turns takes the plain examples of one episode's steps")
    if any(s.stop_string for s in steps[:-1]):   # the close after it is not a trainable EOS: train per step
        return None
    with_ref = steps[0].ref_logprobs is not None
    if any((s.ref_logprobs is not None) != with_ref for s in steps):
        return None
    prompt = list(steps[0].prompt_ids)
    sequence, response, old, ref, segments = list(prompt), [], [], [], []
    for step in steps:
        step_prompt = list(step.prompt_ids)
        if step_prompt[:len(sequence)] != sequence:
            return None
        context = step_prompt[len(sequence):]
        response += context
        old += [0.0] * len(context)
        ref += [0.0] * len(context)
        segments.append(Segment(len(response), len(response) + len(step.response_ids), float(step.advantage)))
        response += list(step.response_ids)
        old += list(step.old_logprobs)
        ref += list(step.ref_logprobs) if step.ref_logprobs is not None else []   # all steps or none (above)
        sequence = step_prompt + list(step.response_ids)
    # Each step's prompt holds the previous steps' images and perhaps a new one: the last step's are all.
    return Example(prompt, response, 0.0, old, ref if with_ref else None, tuple(segments), steps[-1].images,
                   stop_string=steps[-1].stop_string)


def _images_within(images: Sequence[Any] | None, prompt: Sequence[int],
                   image_inputs: ImageInputs | None) -> Sequence[Any] | None:
    """The leading images whose pads a prefix of the packed sequence holds."""
    if not images:
        return images
    if image_inputs is None:
        raise ValueError("unpacking an example with images needs the model's ImageInputs")
    pads = sum(1 for t in prompt if t == image_inputs.image_token_id)
    kept, used = [], 0
    for image in images:
        if used >= pads:
            break
        used += image_inputs.token_count(image)
        kept.append(image)
    return kept


def unpack(example: Example, images: ImageInputs | None = None) -> list[Example]:
    """The plain per-step examples of a packed example (inverse of `pack_turns`; with images, each step
    keeps those its prompt holds, which needs the model's `ImageInputs`)."""
    prompt, response = list(example.prompt_ids), list(example.response_ids)
    ref = example.ref_logprobs
    assert example.segments is not None   # a packed example
    last = len(example.segments) - 1
    return [Example(prompt + response[:s], response[s:e], a, list(example.old_logprobs[s:e]),
                    None if ref is None else list(ref[s:e]),
                    images=_images_within(example.images, prompt + response[:s], images),
                    stop_string=example.stop_string and i == last)
            for i, (s, e, a) in enumerate(example.segments)]


def _ends_itself(response: Sequence[int], cfg: DataConfig) -> bool:
    """The response ends with a token the sampler stops on (EOS or another stop token)."""
    return bool(response) and (response[-1] == cfg.eos_id or response[-1] in cfg.stop_ids)


def _prepare_plain(ex: Example, cfg: DataConfig, counts: dict[str, int]) -> Example | None:
    if ex.advantage == 0:
        counts["zero_advantage_dropped"] += 1  # no gradient; the reference drops them too
        return None
    prompt, response, old = list(ex.prompt_ids), list(ex.response_ids), list(ex.old_logprobs)
    ref = None if ex.ref_logprobs is None else list(ex.ref_logprobs)
    if len(prompt) > cfg.max_prompt_tokens:
        if ex.images:   # cutting the left of the prompt could cut an image's pads apart
            counts["image_prompts_dropped"] += 1
            return None
        if cfg.overlong_prompt == "drop":
            counts["prompts_dropped"] += 1
            return None
        prompt = prompt[-cfg.max_prompt_tokens:]
        counts["prompts_truncated"] += 1
    if cfg.append_eos and not ex.stop_string and not _ends_itself(response, cfg):
        response, old = response + [cfg.eos_id], old + [float("nan")]
        ref = None if ref is None else ref + [float("nan")]
        counts["eos_appended"] += 1
    if len(response) > cfg.max_response_tokens:
        response, old = response[:cfg.max_response_tokens], old[:cfg.max_response_tokens]
        ref = None if ref is None else ref[:cfg.max_response_tokens]
        counts["responses_truncated"] += 1
    return Example(prompt, response, float(ex.advantage), old, ref, images=ex.images, stop_string=ex.stop_string)


def _prepare_packed(ex: Example, cfg: DataConfig, counts: dict[str, int]) -> list[Example]:
    """The plain rules per segment. A segment without EOS gets the sequence's next token trained when that
    is the EOS (what its plain example appends); the last one gets an EOS appended. Too long: per step."""
    counts["packed"] += 1
    assert ex.segments is not None   # a packed example
    bounds = [0] + [x for seg in ex.segments for x in seg[:2]] + [len(ex.response_ids)]
    if any(x > y for x, y in zip(bounds, bounds[1:])):
        raise ValueError("a packed example's segments must be ordered, disjoint spans of its response")
    # A zero-advantage step has no gradient and the plain path drops it: here its tokens become context.
    segments = [seg for seg in ex.segments if seg.advantage != 0]
    local = Counter(zero_advantage_segments=len(ex.segments) - len(segments))  # counted if the example is kept
    if not segments:
        counts["zero_advantage_dropped"] += 1
        return []
    end_of_training = segments[-1].end  # nothing after the last trained segment is needed
    response, old = list(ex.response_ids[:end_of_training]), list(ex.old_logprobs[:end_of_training])
    ref = None if ex.ref_logprobs is None else list(ex.ref_logprobs[:end_of_training])
    kept = []
    for i, (start, end, advantage) in enumerate(segments):
        if cfg.append_eos and not _ends_itself(response[start:end], cfg):
            following = segments[i + 1].start if i + 1 < len(segments) else None
            if following is None and ex.stop_string:   # ended on a stop string: nothing to append
                pass
            elif following is None:
                response, old = response + [cfg.eos_id], old + [float("nan")]
                ref = None if ref is None else ref + [float("nan")]
                end += 1
                local["eos_appended"] += 1
            elif end < following and response[end] == cfg.eos_id:
                old[end] = float("nan")  # never sampled here: on-policy, as an appended EOS
                if ref is not None:
                    ref[end] = float("nan")
                end += 1
                local["eos_appended"] += 1
            else:  # the sequence goes on with another token: no EOS can be trained here
                local["packed_eos_skipped"] += 1
        if end - start > cfg.max_response_tokens:
            end = start + cfg.max_response_tokens  # the rest stays as context
            local["responses_truncated"] += 1
        kept.append(Segment(start, end, float(advantage)))
    response, old = response[:kept[-1].end], old[:kept[-1].end]
    ref = None if ref is None else ref[:kept[-1].end]
    if len(ex.prompt_ids) + len(response) > cfg.max_prompt_tokens + cfg.max_response_tokens:
        counts["packed_fallback"] += 1
        steps = unpack(ex, cfg.images)
        return [p for p in (_prepare_plain(step, cfg, counts) for step in steps) if p is not None]
    for name, count in local.items():
        counts[name] += count
    counts["packed_segments"] += len(kept)
    return [Example(list(ex.prompt_ids), response, 0.0, old, ref, tuple(kept), ex.images, ex.stop_string)]


def prepare_examples(examples: Sequence[Example], cfg: DataConfig) -> tuple[list[Example], dict[str, int]]:
    """Applies the length rules; returns the kept examples and counts of what was changed."""
    if cfg.overlong_prompt not in OVERLONG_PROMPT_POLICIES:
        raise ValueError(f"overlong_prompt must be one of {OVERLONG_PROMPT_POLICIES}, got {cfg.overlong_prompt!r}")
    counts = dict(examples=len(examples), prompts_dropped=0, prompts_truncated=0, responses_truncated=0,
                  eos_appended=0, zero_advantage_dropped=0)
    if any(ex.images for ex in examples):
        if cfg.images is None:
            raise ValueError("examples with images need DataConfig.images (the model's image_inputs)")
        counts.update(image_prompts_dropped=0)
    if any(ex.segments is not None for ex in examples):  # plain-only runs keep their exact counts
        counts.update(packed=0, packed_segments=0, packed_fallback=0, packed_eos_skipped=0,
                      zero_advantage_segments=0)
    kept = []
    for ex in examples:
        if len(ex.old_logprobs) != len(ex.response_ids):
            raise ValueError("an example needs one old log-probability per response token")
        if ex.segments is None:
            prepared = _prepare_plain(ex, cfg, counts)
            kept += [] if prepared is None else [prepared]
        else:
            kept += _prepare_packed(ex, cfg, counts)
    counts["kept"] = len(kept)
    return kept, counts


def _segments(ex: Example) -> Sequence[Segment]:
    return ex.segments if ex.segments is not None else (Segment(0, len(ex.response_ids), ex.advantage),)


def collate(examples: Sequence[Example], cfg: DataConfig) -> TrainBatch:
    """Left-padded prompts + right-padded responses in one [batch_size, bucket] array set.

    With `cfg.aggregation`, each segment's tokens get its advantage and a loss weight:
    1 / its length for "sequence_mean", 1 for "token_mean". The loss's token mean
    sum(l * w) / sum(w) is then the mean over segments of their token means (each
    segment's weights sum to 1), resp. the mean over tokens, as if every segment were
    its own row. A short final batch is filled with empty rows (all-zero loss mask).
    With `cfg.loss_window`, the per-token arrays keep the last W columns (see TrainBatch).
    """
    if cfg.aggregation is not None and cfg.aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be None or one of {AGGREGATIONS}, got {cfg.aggregation!r}")
    if cfg.aggregation is None and any(e.segments is not None for e in examples):
        raise ValueError("packed examples need DataConfig.aggregation (per-token advantages and weights)")
    width = _bucket(max(len(e.prompt_ids) + len(e.response_ids) for e in examples), cfg.min_bucket)
    prompt_width = max(len(e.prompt_ids) for e in examples)
    shape = (cfg.batch_size, width)
    ids = np.full(shape, cfg.pad_id, np.int32)
    attention = np.zeros(shape, np.int32)
    targets = np.full(shape, cfg.pad_id, np.int32)
    loss_mask = np.zeros(shape, np.float32)
    old = np.zeros(shape, np.float32)
    ref = np.zeros(shape, np.float32) if any(e.ref_logprobs is not None for e in examples) else None
    advantages = np.zeros((cfg.batch_size,) if cfg.aggregation is None else shape, np.float32)
    earliest = width  # the first column whose target is a response token, over the rows
    for row, ex in enumerate(examples):
        sequence = list(ex.prompt_ids) + list(ex.response_ids)
        # Prompts end at one column when they can; a long packed response may need the row shifted left
        # (positions come from the attention mask, so any left padding is equivalent).
        start = min(prompt_width - len(ex.prompt_ids), width - len(sequence))
        ids[row, start:start + len(sequence)] = sequence
        attention[row, start:start + len(sequence)] = 1
        targets[row, start:start + len(sequence) - 1] = sequence[1:]
        # Position p predicts token p + 1: response token i is predicted from column first + i.
        first, n = start + len(ex.prompt_ids) - 1, len(ex.response_ids)
        earliest = min(earliest, first)
        old[row, first:first + n] = ex.old_logprobs
        if ref is not None:
            ref[row, first:first + n] = ex.ref_logprobs if ex.ref_logprobs is not None else ex.old_logprobs
        if cfg.aggregation is None:
            loss_mask[row, first:first + n] = 1.0
            advantages[row] = ex.advantage
            continue
        for s, e, advantage in _segments(ex):
            if e > s:
                loss_mask[row, first + s:first + e] = 1.0 / (e - s) if cfg.aggregation == "sequence_mean" else 1.0
                advantages[row, first + s:first + e] = advantage
    window = min(width, _bucket(width - earliest, cfg.min_bucket)) if cfg.loss_window else width

    def cut(x):  # the last `window` columns
        return None if x is None else x[:, width - window:]

    # A host batch: numpy arrays in the jax.Array fields until `Learner.place` puts them on the devices.
    batch = TrainBatch(input_ids=ids, attention_mask=attention, targets=cut(targets),  # type: ignore[arg-type]
                       loss_mask=cut(loss_mask), old_logp=cut(old),
                       advantages=advantages if advantages.ndim == 1 else cut(advantages),  # type: ignore[arg-type]
                       ref_logp=cut(ref))
    if any(e.images for e in examples):
        rows = [list(e.images or ()) for e in examples]
        assert cfg.images is not None   # prepare_examples requires it for examples with images
        batch = batch.replace(model_inputs=cfg.images.batch_inputs(ids, attention, rows))
    return batch


def even_split(count: int, parts: int) -> list[int]:
    """`count` items in `parts` runs whose sizes differ by at most one, larger ones first: 33 in 4 ->
    [9, 8, 8, 8]."""
    base, extra = divmod(count, parts)
    return [base + (i < extra) for i in range(parts)]


class BatchIterator:
    """Deterministically shuffled batches over one epoch of examples, with checkpointable position.

    By default, batches of `cfg.batch_size` examples (the last one short). With `num_batches`, the
    examples are split evenly into that many batches (sizes differ by at most one), each filled with
    empty rows to `cfg.batch_size` rows: an optimizer update never gets a lone leftover example.
    `collate_fn` makes each batch from its examples (`collate`; `shared_prompts.collate_update` shares prompts).
    """

    def __init__(self, examples: Sequence[Example], cfg: DataConfig, num_batches: int | None = None,
                 collate_fn: Callable[[Sequence[Example], DataConfig], TrainBatch] = collate):
        self.cfg = cfg
        self.examples, self.counts = prepare_examples(examples, cfg)
        dataset = grain.MapDataset.source(self.examples)
        if self.examples:
            dataset = dataset.shuffle(seed=cfg.seed)
        if num_batches is None:
            dataset = dataset.batch(cfg.batch_size, drop_remainder=False, batch_fn=lambda rows: collate_fn(rows, cfg))
        else:
            sizes = even_split(len(self.examples), num_batches)
            if max(sizes, default=0) > cfg.batch_size:
                raise ValueError(f"{len(self.examples)} examples in {num_batches} batches do not fit "
                                 f"{cfg.batch_size} rows each")
            starts = np.cumsum([0] + sizes)
            shuffled = dataset
            dataset = grain.MapDataset.range(num_batches).map(
                lambda j: collate_fn([shuffled[i] for i in range(starts[j], starts[j + 1])], cfg))
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
