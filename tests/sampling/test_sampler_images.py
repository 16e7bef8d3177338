"""The KV-cache sampler with a Qwen3-VL: greedy tokens equal transformers' generate on image prompts,
also after a multi-turn `extend` with a new screenshot; log-probabilities equal transformers' full
forward; one vision program per patch bucket (several
image grids); weight swaps without recompiling."""

import jax
import numpy as np
import pytest
import torch
from flax import nnx

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.qwen3_vl import processor
from rlanything_jax.core.sampling.sampler import Sampler
from tests.models.qwen3_vl import vl_reference
from tests.models.qwen3_vl.vl_reference import END, IMAGE, START

pytestmark = pytest.mark.slow   # compiles prefill, decode and vision programs of a tiny Qwen3-VL


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_vl")
    torch_model = vl_reference.build("untied-gqa2-deepstack2", path, seed=21)
    model = load_pretrained(path)
    return torch_model, model, Sampler(model)


def _prompt(rng, sizes, seed):
    """Token ids with one pad per image (a chat template's form) and the images."""
    ids = list(rng.integers(1, 400, 4))
    for _ in sizes:
        ids += [START, IMAGE, END] + list(rng.integers(1, 400, 3))
    return ids, vl_reference.images(sizes, seed=seed)


def _transformers_greedy(torch_model, ids, images, new_tokens):
    input_ids = torch.tensor([ids])
    vision = {}
    if images:
        pixel_values, grid = processor.preprocess_images(images)
        vision = dict(pixel_values=torch.tensor(pixel_values), image_grid_thw=torch.tensor(grid),
                      mm_token_type_ids=(input_ids == IMAGE).int())
    with torch.no_grad():
        out = torch_model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                   max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0, **vision)
    return out[0, len(ids):].tolist()


def _transformers_logprobs(torch_model, ids, images, completion):
    pixel_values, grid = processor.preprocess_images(images) if images else (None, None)
    sequence = np.asarray([ids + completion])
    logits = vl_reference.reference_logits(torch_model, sequence, np.ones_like(sequence), pixel_values, grid)[0]
    log_probs = torch.log_softmax(torch.tensor(logits), -1).numpy()
    return [log_probs[len(ids) - 1 + i, token] for i, token in enumerate(completion)]


def test_greedy_and_logprobs_match_transformers_on_a_batch_with_different_image_counts(tiny):
    torch_model, _, sampler = tiny
    rng = np.random.default_rng(0)
    raw = [_prompt(rng, [(64, 64)], 1), _prompt(rng, [(80, 120), (40, 200)], 2), _prompt(rng, [], 3)]
    prepared = [processor.prepare_prompt(ids, images, IMAGE) for ids, images in raw]
    conversation = sampler.start([ids for ids, _ in prepared], 8, images=[imgs for _, imgs in prepared])
    completions = sampler.decode(conversation, 8, stop_token_ids=())
    for (ids, _), (_, images), completion in zip(prepared, raw, completions):
        assert completion.token_ids == _transformers_greedy(torch_model, ids, images, 8)
        np.testing.assert_allclose(completion.logprobs,
                                   _transformers_logprobs(torch_model, ids, images, completion.token_ids),
                                   atol=1e-4, rtol=0)


def test_extend_with_a_new_screenshot_equals_generating_over_the_whole_conversation(tiny):
    torch_model, _, sampler = tiny
    rng = np.random.default_rng(1)
    first_ids, first_images = _prompt(rng, [(96, 48)], 4)
    ids, prepared = processor.prepare_prompt(first_ids, first_images, IMAGE)
    conversation = sampler.start([ids], 6, cache_length=1024, images=[prepared])
    first = sampler.decode(conversation, 6, stop_token_ids=())[0]

    turn_ids, turn_images = _prompt(rng, [(64, 64)], 5)
    turn, turn_prepared = processor.prepare_prompt(turn_ids, turn_images, IMAGE)
    sampler.extend(conversation, [turn], images=[turn_prepared])
    second = sampler.decode(conversation, 6, stop_token_ids=())[0]

    history = ids + first.token_ids + turn
    assert second.token_ids == _transformers_greedy(torch_model, history, first_images + turn_images, 6)
    np.testing.assert_allclose(second.logprobs, _transformers_logprobs(torch_model, history, first_images +
                                                                       turn_images, second.token_ids),
                               atol=1e-4, rtol=0)


def test_an_image_prompt_joining_a_running_conversation_and_a_repack_keep_transformers_outputs(tiny):
    """Continuous batching with screenshots: a prompt with an image joins row 1 of a running conversation
    (`Sampler.join`, its M-RoPE positions its own), then the rows are repacked into a smaller cache
    (`Sampler.repack`) and extended with a new screenshot: every turn equals transformers' generate."""
    torch_model, _, sampler = tiny
    rng = np.random.default_rng(2)
    raw = [_prompt(rng, [(64, 64)], 6), _prompt(rng, [(48, 96)], 7)]
    (ids_a, images_a), (ids_b, images_b) = [processor.prepare_prompt(ids, images, IMAGE) for ids, images in raw]
    conversation = sampler.start([ids_a, list(rng.integers(1, 400, 90))], 6, cache_length=1024, images=[images_a, []])
    first_a = sampler.decode(conversation, 6, stop_token_ids=())[0]
    sampler.join(conversation, [1], [ids_b], images=[images_b])
    first_b = sampler.decode(conversation, 6, stop_token_ids=())[1]
    assert first_b.token_ids == _transformers_greedy(torch_model, ids_b, raw[1][1], 6)

    conversation = sampler.repack(conversation, [1, 0], 512)
    turn_ids, turn_images = _prompt(rng, [(64, 64)], 8)
    turn, turn_prepared = processor.prepare_prompt(turn_ids, turn_images, IMAGE)
    sampler.extend(conversation, [turn, []], images=[turn_prepared, []])
    second_b = sampler.decode(conversation, 6, stop_token_ids=())[0]
    history = ids_b + first_b.token_ids + turn
    assert second_b.token_ids == _transformers_greedy(torch_model, history, raw[1][1] + turn_images, 6)
    np.testing.assert_allclose(second_b.logprobs, _transformers_logprobs(torch_model, history, raw[1][1] +
                                                                         turn_images, second_b.token_ids),
                               atol=1e-4, rtol=0)
    assert first_a.token_ids == _transformers_greedy(torch_model, ids_a, raw[0][1], 6)


def test_one_vision_program_per_patch_bucket_and_weight_swaps_do_not_recompile(tiny):
    _, model, _ = tiny
    sampler = Sampler(model)
    rng = np.random.default_rng(2)
    # Three grids (14x20, 8x36, 24x12: 280, 288 and 288 patches), one 512-patch bucket, one per row.
    prompts = [processor.prepare_prompt(*_prompt(rng, [size], 6 + index), IMAGE)
               for index, size in enumerate([(80, 120), (40, 200), (96, 48)])]
    assert len({p[1][0].grid_thw for p in prompts}) == 3
    for _ in range(2):
        conversation = sampler.start([p[0] for p in prompts], 4, images=[p[1] for p in prompts])
        sampler.decode(conversation, 4, stop_token_ids=())
    assert sampler.compilations["vision"] == 1 and sampler.compilations["prefill_images"] == 1
    before = dict(sampler.compilations)
    params = nnx.state(model)
    sampler.update_params(jax.tree.map(lambda a: a * 0.5, params))
    conversation = sampler.start([p[0] for p in prompts], 4, images=[p[1] for p in prompts])
    sampler.decode(conversation, 4, stop_token_ids=())
    assert dict(sampler.compilations) == before
