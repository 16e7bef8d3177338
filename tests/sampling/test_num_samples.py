"""num_samples: each prompt is prefilled once, its cache rows copied, and every copy sampled on its own."""

import numpy as np
import pytest

from rlanything_jax.core import sharding
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.sampling.strategies import Sampling
from tests import hf_reference

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(20, 57))]  # 3 prompts x 3 samples: 9 of 16 rows real


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    hf_reference.build("llama", path, num_attention_heads=8, num_key_value_heads=2, head_dim=16)
    model = load_pretrained(path)
    return model, path, Sampler(model)


def _rows(completions):
    return [c.token_ids for c in completions]


def test_greedy_samples_are_copies_of_the_plain_greedy_output(tiny):
    _, _, sampler = tiny
    plain = sampler.generate(PROMPTS, 12, stop_token_ids=[])
    repeated = sampler.generate(PROMPTS, 12, stop_token_ids=[], num_samples=3)
    assert len(repeated) == 9
    assert _rows(repeated) == [c.token_ids for c in plain for _ in range(3)]  # prompt-major
    np.testing.assert_allclose([c.logprobs for c in repeated], [c.logprobs for c in plain for _ in range(3)],
                               atol=1e-5)
    assert all(c.finish_reason == "length" for c in repeated)


def test_samples_of_one_prompt_differ_and_repeat_with_the_seed(tiny):
    _, _, sampler = tiny
    strategy = Sampling(temperature=1.0)
    first = _rows(sampler.generate([PROMPTS[0]], 10, strategy, seed=7, stop_token_ids=[], num_samples=8))
    assert len(first) == 8 and len({tuple(r) for r in first}) == 8
    assert len({r[0] for r in first}) > 1  # the first token too is drawn per copy
    assert _rows(sampler.generate([PROMPTS[0]], 10, strategy, seed=7, stop_token_ids=[], num_samples=8)) == first
    assert _rows(sampler.generate([PROMPTS[0]], 10, strategy, seed=8, stop_token_ids=[], num_samples=8)) != first


def test_sampled_logprobs_equal_the_full_forward(tiny):
    model, _, sampler = tiny
    completions = sampler.generate(PROMPTS, 12, Sampling(temperature=1.0), seed=3, stop_token_ids=[],
                                   num_samples=3)
    prompts = [p for p in PROMPTS for _ in range(3)]
    hf_reference.assert_logprobs_match_full_forward(model, prompts, completions)


def test_each_prompt_is_prefilled_once_and_programs_compile_once(tiny):
    model, _, _ = tiny
    sampler = Sampler(model)
    sampler.generate(PROMPTS, 8, stop_token_ids=[], num_samples=3)
    assert sampler.prefilled == {"rows": 3, "tokens": sum(len(p) for p in PROMPTS)}
    assert sampler.compilations == {"prefill": 1, "replicate": 1, "decode": 1}
    sampler.generate([[1, 2], [3] * 40, [4]], 8, stop_token_ids=[], num_samples=3)  # the same buckets
    assert sampler.compilations == {"prefill": 1, "replicate": 1, "decode": 1}
    assert sampler.prefilled["rows"] == 6


def test_replicated_rows_continue_like_fresh_conversations(tiny):
    _, _, sampler = tiny
    conversation = sampler.start(PROMPTS[:2], max_new_tokens=8, cache_length=256, num_samples=2)
    assert conversation.num_rows == 4
    first = sampler.decode(conversation, 6, stop_token_ids=[])
    observations = [[40, 41], [42], [43, 44, 45], []]
    sampler.extend(conversation, observations)
    second = sampler.decode(conversation, 6, stop_token_ids=[])
    prompts = [PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[1]]
    histories = [p + c.token_ids + o for p, c, o in zip(prompts, first, observations)]
    expected = sampler.generate(histories[:3], 6, stop_token_ids=[])
    assert _rows(second[:3]) == _rows(expected)
    assert second[3].finish_reason == "idle"


def test_same_samples_on_a_sharded_mesh(tiny):
    _, path, single = tiny
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    sampler = Sampler(load_pretrained(path, mesh=mesh), mesh=mesh)
    strategy = Sampling(temperature=1.0)
    expected = single.generate(PROMPTS, 8, strategy, seed=5, stop_token_ids=[], num_samples=3)
    completions = sampler.generate(PROMPTS, 8, strategy, seed=5, stop_token_ids=[], num_samples=3)
    assert _rows(completions) == _rows(expected)
