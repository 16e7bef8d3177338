"""The converted SmolLM2-135M-Instruct (real weights) decodes exactly like transformers."""

import numpy as np
import pytest
import torch
import transformers

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.tokenizer import Tokenizer
from rlanything_jax.core.sampling.full_forward import greedy_generate
from tests import hf_reference

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea, then explain it in two sentences."]
NEW_TOKENS = 24


def _reference_greedy(model_dir, prompt_ids: list[list[int]], pad_id: int, eos_id: int) -> list[list[int]]:
    """transformers' greedy continuations, each cut after its first EOS."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return hf_reference.greedy_generate(model, prompt_ids, NEW_TOKENS, pad_id, eos_id)


@pytest.mark.slow
def test_greedy_chat_continuation_matches_transformers(smollm2_dir):
    tokenizer = Tokenizer.from_dir(smollm2_dir)
    prompt_ids = [tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]
    assert len(prompt_ids[0]) != len(prompt_ids[1])  # a left-padded batch

    expected = _reference_greedy(smollm2_dir, prompt_ids, tokenizer.pad_id, tokenizer.eos_id)
    model = load_pretrained(smollm2_dir, dtype="float32")
    ours = greedy_generate(model, prompt_ids, NEW_TOKENS, stop_token_ids=[tokenizer.eos_id])

    assert ours == expected
    assert len(ours[1]) == NEW_TOKENS  # the long answer runs the whole budget
    assert "Paris" in tokenizer.decode(ours[0])


@pytest.mark.slow
def test_real_model_logits_match_transformers(smollm2_dir):
    tokenizer = Tokenizer.from_dir(smollm2_dir)
    ids = np.asarray([tokenizer.encode_chat([{"role": "user", "content": PROMPTS[1]}])], np.int32)
    reference = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = reference(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    logits = np.asarray(load_pretrained(smollm2_dir)(ids))
    np.testing.assert_allclose(logits, expected, atol=1e-3, rtol=0)


@pytest.mark.slow
def test_kv_sampler_matches_transformers_including_a_second_turn(smollm2_dir):
    from rlanything_jax.core.sampling.sampler import Sampler

    tokenizer = Tokenizer.from_dir(smollm2_dir)
    prompt_ids = [tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]
    sampler = Sampler(load_pretrained(smollm2_dir), tokenizer)
    conversation = sampler.start(prompt_ids, max_new_tokens=NEW_TOKENS, cache_length=512)
    first = sampler.decode(conversation, NEW_TOKENS)
    expected = _reference_greedy(smollm2_dir, prompt_ids, tokenizer.pad_id, tokenizer.eos_id)
    assert [c.token_ids for c in first] == expected
    assert first[0].finish_reason == "stop" and first[0].text == "The capital of France is Paris."

    follow_up = tokenizer.encode("\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n")
    sampler.extend(conversation, [follow_up, follow_up])
    second = sampler.decode(conversation, NEW_TOKENS)
    histories = [p + c.token_ids + follow_up for p, c in zip(prompt_ids, first)]
    assert [c.token_ids for c in second] == _reference_greedy(smollm2_dir, histories, tokenizer.pad_id,
                                                              tokenizer.eos_id)
