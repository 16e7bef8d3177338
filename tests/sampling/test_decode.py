"""Greedy KV-cache decoding equals transformers' generate; log-probabilities equal the full forward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig, window_buckets
from tests import hf_reference

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(20, 57)), [3]]
FAMILIES = {
    "llama": dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16, rope_theta=5e5),
    "qwen2": dict(tie_word_embeddings=True, rope_theta=1e6),
    "qwen3": dict(num_key_value_heads=4, head_dim=32, rope_theta=1e6),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def tiny(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    torch_model = hf_reference.build(request.param, path, **FAMILIES[request.param])
    model = load_pretrained(path)
    return torch_model, model, path, Sampler(model)  # one sampler per model: compiled programs are reused


def test_greedy_matches_transformers_generate(tiny):
    torch_model, model, _, sampler = tiny
    completions = sampler.generate(PROMPTS, 24, stop_token_ids=[])
    assert [c.token_ids for c in completions] == hf_reference.greedy_generate(torch_model, PROMPTS, 24)
    assert all(c.finish_reason == "length" for c in completions)


def test_multi_turn_continuation_equals_reprefilling_the_history(tiny):
    torch_model, model, _, sampler = tiny
    conversation = sampler.start(PROMPTS, max_new_tokens=16, cache_length=512)
    first = sampler.decode(conversation, 10, stop_token_ids=[])
    observations = [[40, 41], list(range(60, 90)), [7], [8, 9, 10, 11]]
    sampler.extend(conversation, observations)
    second = sampler.decode(conversation, 12, stop_token_ids=[])

    histories = [p + c.token_ids + o for p, c, o in zip(PROMPTS, first, observations)]
    expected = hf_reference.greedy_generate(torch_model, histories, 12)
    assert [c.token_ids for c in second] == expected
    fresh = sampler.generate(histories, 12, stop_token_ids=[])
    assert [c.token_ids for c in fresh] == expected


def test_rows_can_sit_a_turn_out(tiny):
    torch_model, model, _, sampler = tiny
    conversation = sampler.start(PROMPTS[:2], max_new_tokens=8)
    first = sampler.decode(conversation, 6, stop_token_ids=[])
    sampler.extend(conversation, [[50, 51, 52], []])
    second = sampler.decode(conversation, 6, stop_token_ids=[])
    assert second[1].token_ids == [] and second[1].finish_reason == "idle"
    history = PROMPTS[0] + first[0].token_ids + [50, 51, 52]
    assert second[0].token_ids == hf_reference.greedy_generate(torch_model, [history], 6)[0]


def test_logprobs_equal_the_full_forward(tiny):
    _, model, _, sampler = tiny
    completions = sampler.generate(PROMPTS, 16, stop_token_ids=[])
    hf_reference.assert_logprobs_match_full_forward(model, PROMPTS, completions)


def test_stop_token_ends_a_row_and_is_kept(tiny):
    torch_model, model, _, sampler = tiny
    free = hf_reference.greedy_generate(torch_model, PROMPTS[:2], 12)
    stop = free[0][4]  # the fifth token of row 0 becomes a stop token
    completions = sampler.generate(PROMPTS[:2], 12, stop_token_ids=[stop])
    assert completions[0].token_ids == free[0][:free[0].index(stop) + 1]
    assert completions[0].finish_reason == "stop"
    expected_second = free[1][:free[1].index(stop) + 1] if stop in free[1] else free[1]
    assert completions[1].token_ids == expected_second


def test_compiles_once_per_bucket_and_swaps_weights_without_recompiling(tiny):
    _, model, path, shared = tiny
    sampler = Sampler(model)
    for prompts in ([[1, 2, 3]], [[4, 5], [6, 7, 8, 9]], [[9] * 10, [8] * 7]):  # one batch and prompt bucket
        sampler.generate([p for p in prompts] + [[1]] * (2 - len(prompts)), 8, stop_token_ids=[])
    assert sampler.compilations == {"prefill": 1, "decode": 1}
    before = sampler.generate([[1, 2, 3], [4]], 8, stop_token_ids=[])

    _, params = nnx.split(load_pretrained(path))
    params = jax.tree.map(lambda p: p * 1.5, params)
    sampler.update_params(params)
    after = sampler.generate([[1, 2, 3], [4]], 8, stop_token_ids=[])
    assert sampler.compilations == {"prefill": 1, "decode": 1}
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    with pytest.raises(ValueError, match="structure, shapes and dtypes"):
        sampler.update_params(jax.tree.map(lambda p: p.astype(jnp.bfloat16), params))


def test_windowed_attention_ignores_the_allocated_cache_size(tiny):
    _, model, _, sampler = tiny
    assert window_buckets(2048, 128) == (128, 256, 512, 1024, 2048)
    small = sampler.generate(PROMPTS, 12, stop_token_ids=[])
    large_cache = Sampler(model, config=SamplerConfig(max_cache_length=2048))
    conversation = large_cache.start(PROMPTS, max_new_tokens=12, cache_length=2048)
    large = large_cache.decode(conversation, 12, stop_token_ids=[])
    assert [c.token_ids for c in large] == [c.token_ids for c in small]


def test_same_greedy_output_on_a_sharded_mesh(tiny):
    _, model, path, shared = tiny
    single = shared.generate(PROMPTS, 16, stop_token_ids=[])
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    sharded_model = load_pretrained(path, mesh=mesh)
    sampler = Sampler(sharded_model, mesh=mesh)
    conversation = sampler.start(PROMPTS, max_new_tokens=16)
    assert conversation.state.cache.k[0].sharding.mesh == mesh
    completions = sampler.decode(conversation, 16, stop_token_ids=[])
    assert [c.token_ids for c in completions] == [c.token_ids for c in single]
    np.testing.assert_allclose([c.logprobs for c in completions], [c.logprobs for c in single], atol=1e-5)
