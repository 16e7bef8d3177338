"""Greedy decoding by re-running the whole sequence at every step (no KV cache).

Slow by design: it is the simplest correct decoder, used by the demo in `main`
and as an independent reference for faster samplers.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlanything_jax.core.interfaces import CausalLM


@nnx.jit
def _next_token_logits(model: CausalLM, tokens: jax.Array, valid: jax.Array, last_index: jax.Array) -> jax.Array:
    logits = model.logits(model.hidden_states(tokens, valid))
    return jnp.take_along_axis(logits, last_index[:, None, None], axis=1)[:, 0, :]


def greedy_generate(model: CausalLM, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                    stop_token_ids: Sequence[int] = ()) -> list[list[int]]:
    """Greedy continuations (without the prompt) of left-padded token-id prompts.

    One buffer of fixed length (longest prompt + max_new_tokens) keeps shapes static,
    so the forward compiles once per call shape.
    """
    batch = len(prompts)
    prompt_len = max(len(p) for p in prompts)
    total = prompt_len + max_new_tokens
    tokens = np.zeros((batch, total), np.int32)
    valid = np.zeros((batch, total), np.int32)
    for row, prompt in enumerate(prompts):
        tokens[row, prompt_len - len(prompt):prompt_len] = prompt
        valid[row, prompt_len - len(prompt):prompt_len] = 1
    outputs: list[list[int]] = [[] for _ in range(batch)]
    done = np.zeros(batch, bool)
    stops = set(stop_token_ids)
    for step in range(max_new_tokens):
        position = prompt_len + step
        last = np.full(batch, position - 1, np.int32)
        logits = _next_token_logits(model, jnp.asarray(tokens), jnp.asarray(valid), jnp.asarray(last))
        next_tokens = np.asarray(jnp.argmax(logits, axis=-1))
        for row in np.flatnonzero(~done).tolist():
            outputs[row].append(int(next_tokens[row]))
            done[row] = int(next_tokens[row]) in stops
        tokens[:, position] = next_tokens
        valid[:, position] = 1
        if done.all():
            break
    return outputs
