"""Turning a finished decode state into per-row completions, cut at stop tokens or stop strings."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from rlanything_jax.core import multihost
from rlanything_jax.core.sampling.decode import DecodeState


@dataclasses.dataclass
class Completion:
    token_ids: list[int]   # generated tokens, up to and including a stop token / the stop string's last token
    logprobs: list[float]  # log-probability of each token under the model at temperature 1
    text: str | None       # decoded tokens without the stop token or stop string (None without a tokenizer)
    finish_reason: str     # "stop", "stop_string", "length", "cache_full" or "idle" (the row had no input)


def _first_stop(text: str, stop_strings: Sequence[str]) -> tuple[int, str] | None:
    hits = [(text.find(s), s) for s in stop_strings if s and s in text]
    return min(hits) if hits else None


def _tokens_through_stop(tokenizer: Any, tokens: list[int], stop: str) -> int:
    """Fewest leading tokens whose text contains `stop` (binary search: containment is monotone)."""
    low, high = 1, len(tokens)
    while low < high:
        mid = (low + high) // 2
        if stop in tokenizer.decode(tokens[:mid]):
            high = mid
        else:
            low = mid + 1
    return low


def finish_rows(state: DecodeState, num_rows: int, tokenizer: Any, stop_token_ids: Sequence[int],
                stop_strings: Sequence[str], max_new_tokens: int) -> tuple[list[Completion], np.ndarray | None]:
    """Completions for the first `num_rows` rows, and per-row token counts to keep when a stop
    string cut a row short (None when nothing was cut)."""
    counts, tokens, logprobs = (a[:num_rows] for a in multihost.to_host(
        (state.num_generated, state.tokens, state.logprobs)))
    stops = set(int(t) for t in stop_token_ids)
    completions, keep, cut_any = [], counts.copy(), False
    for row in range(num_rows):
        completion = completion_of(tokens[row, :counts[row]].tolist(), logprobs[row, :counts[row]].tolist(),
                                   tokenizer, stops, stop_strings, max_new_tokens)
        if completion.finish_reason == "stop_string":
            keep[row], cut_any = len(completion.token_ids), cut_any or len(completion.token_ids) < counts[row]
        completions.append(completion)
    return completions, (keep if cut_any else None)


def completion_of(ids: list[int], lps: list[float], tokenizer: Any, stops: set[int], stop_strings: Sequence[str],
                  max_new_tokens: int) -> Completion:
    """One row's generated tokens as a Completion, cut after the first stop string."""
    if not ids:
        return Completion([], [], "" if tokenizer is not None else None, "idle")
    reason = "stop" if ids[-1] in stops else "length" if len(ids) >= max_new_tokens else "cache_full"
    body = ids[:-1] if reason == "stop" else ids
    text = tokenizer.decode(body) if tokenizer is not None else None
    hit = _first_stop(text, stop_strings) if text is not None else None
    if hit is not None and text is not None:
        index, stop = hit
        kept = _tokens_through_stop(tokenizer, body, stop)
        return Completion(ids[:kept], lps[:kept], text[:index], "stop_string")
    return Completion(ids, lps, text, reason)
