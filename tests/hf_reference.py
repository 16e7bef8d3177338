"""Tiny random transformers models (PyTorch) used as the numerical reference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import transformers

FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
}


def tiny_config(family: str, **overrides):
    config_cls, _ = FAMILIES[family]
    kwargs = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rope_theta=1e4, tie_word_embeddings=False, rms_norm_eps=1e-6)
    kwargs.update(overrides)
    return config_cls(**kwargs)


def randomize_(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Weights of unit-scale activations, norms and biases away from 1 and 0.

    transformers' default init (std 0.02, norms = 1, biases = 0) gives logits so
    small that a wrong norm, bias or rotation could hide under a 1e-4 tolerance.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                param.copy_(0.2 * noise)
            else:
                param.copy_(noise / math.sqrt(param.shape[-1]))
    return model


def build(family: str, out_dir: Path, seed: int = 0, **overrides):
    """Saves a randomized tiny model to out_dir and returns the eager PyTorch model."""
    _, model_cls = FAMILIES[family]
    torch.manual_seed(seed)
    model = model_cls(tiny_config(family, **overrides)).eval()
    randomize_(model, seed)
    model.save_pretrained(out_dir)
    model.config._attn_implementation = "eager"
    return model


def left_padded_batch(lengths: list[int], vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask [batch, max(lengths)] with each row left-padded (pad id 0)."""
    rng = np.random.RandomState(seed)
    width = max(lengths)
    ids = np.zeros((len(lengths), width), np.int32)
    mask = np.zeros((len(lengths), width), np.int32)
    for row, length in enumerate(lengths):
        ids[row, width - length:] = rng.randint(1, vocab, length)
        mask[row, width - length:] = 1
    return ids, mask


def reference_logits(model, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """PyTorch logits with the same position ids our decoder derives from the mask."""
    mask_t = torch.tensor(mask, dtype=torch.long)
    positions = (mask_t.cumsum(-1) - 1).clamp(min=0) * mask_t
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=mask_t, position_ids=positions)
    return out.logits.float().numpy()


def greedy_generate(model, prompts: list[list[int]], new_tokens: int, pad_id: int = 0,
                    eos_id: int | None = None) -> list[list[int]]:
    """transformers' greedy continuations of left-padded prompts.

    Without `eos_id` every row runs the full `new_tokens`; with it, each row is cut
    after its first EOS.
    """
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    length = dict(min_new_tokens=new_tokens) if eos_id is None else {}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                             pad_token_id=pad_id, eos_token_id=eos_id, **length)
    rows = out[:, width:].tolist()
    return [row[:row.index(eos_id) + 1] if eos_id in row else row for row in rows]


def assert_logprobs_match_full_forward(model, prompts: list[list[int]], completions, vocab: int = 256) -> None:
    """Each completion's log-probabilities equal our model's full forward over prompt + completion (1e-4)."""
    import jax
    import jax.numpy as jnp

    sequences = [list(p) + list(c.token_ids) for p, c in zip(prompts, completions)]
    ids, mask = left_padded_batch([len(s) for s in sequences], vocab=vocab)
    for row, sequence in enumerate(sequences):
        ids[row, ids.shape[1] - len(sequence):] = sequence
    log_probs = np.asarray(jax.nn.log_softmax(model(jnp.asarray(ids), jnp.asarray(mask)), axis=-1))
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        start = ids.shape[1] - len(sequences[row]) + len(prompt) - 1  # the column predicting token 0
        expected = [log_probs[row, start + i, t] for i, t in enumerate(completion.token_ids)]
        np.testing.assert_allclose(completion.logprobs, expected, atol=1e-4, rtol=0)

