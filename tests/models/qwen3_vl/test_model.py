"""The JAX Qwen3-VL reproduces transformers' vision features and logits on random tiny models (float32)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.qwen3_vl.model import Qwen3VL
from tests.models.qwen3_vl import vl_reference

pytestmark = pytest.mark.slow   # each case builds, saves and runs a torch and a JAX model (several seconds)


@pytest.fixture(scope="module", params=sorted(vl_reference.SHAPES))
def models(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    torch_model = vl_reference.build(request.param, out, seed=len(request.param))
    ours = load_pretrained(out)
    assert isinstance(ours, Qwen3VL)
    return torch_model, ours


def test_vision_embeddings_and_deepstack_features_match(models):
    torch_model, ours = models
    _, _, pixel_values, grid_thw = vl_reference.prompt_batch([3], seed=1)
    with torch.no_grad():
        expected = torch_model.model.get_image_features(torch.tensor(pixel_values), torch.tensor(grid_thw))
    embeddings, deepstack = ours.image_features(jnp.asarray(pixel_values), grid_thw)
    reference = torch.cat(expected.pooler_output).numpy()
    assert np.abs(reference).max() > 0.5
    np.testing.assert_allclose(np.asarray(embeddings), reference, atol=1e-5, rtol=0)
    assert deepstack.shape[0] == len(expected.deepstack_features)
    for level, features in enumerate(expected.deepstack_features):
        np.testing.assert_allclose(np.asarray(deepstack[level]), torch.cat(features).numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("counts", [(1,), (2, 1), (0, 3)])
def test_logits_match_on_left_padded_image_prompts(models, counts):
    torch_model, ours = models
    input_ids, mask, pixel_values, grid_thw = vl_reference.prompt_batch(list(counts), seed=sum(counts))
    expected = vl_reference.reference_logits(torch_model, input_ids, mask, pixel_values, grid_thw)
    logits = np.asarray(ours(input_ids, mask, pixel_values, grid_thw))
    assert logits.shape == (*input_ids.shape, vl_reference.VOCAB)
    valid = mask.astype(bool)
    assert np.abs(expected[valid]).max() > 1.0
    np.testing.assert_allclose(logits[valid], expected[valid], atol=1e-4, rtol=0)


def test_text_only_logits_match(models):
    torch_model, ours = models
    input_ids = np.random.default_rng(3).integers(1, 400, (2, 19)).astype(np.int32)
    mask = np.ones_like(input_ids)
    expected = vl_reference.reference_logits(torch_model, input_ids, mask)
    np.testing.assert_allclose(np.asarray(ours(input_ids)), expected, atol=1e-4, rtol=0)


def test_query_chunked_vision_attention_matches(models, monkeypatch):
    """Images larger than the query chunk (here 40 patches, so 256 patches make 7 query chunks, and 3 key
    chunks of 96, the last ones partial) take the chunked path; the features stay those of transformers' full
    attention."""
    from rlanything_jax.core.models.qwen3_vl import vision

    torch_model, ours = models
    _, _, pixel_values, grid_thw = vl_reference.prompt_batch([2], seed=5)
    monkeypatch.setattr(vision, "_QUERY_CHUNK", 40)
    monkeypatch.setattr(vision, "_KEY_CHUNK", 96)
    with torch.no_grad():
        expected = torch_model.model.get_image_features(torch.tensor(pixel_values), torch.tensor(grid_thw))
    # A fresh trace (image_features' program for this bucket may be cached with the default chunks).
    grids = tuple(tuple(int(v) for v in grid) for grid in grid_thw)
    embeddings, deepstack = nnx.jit(lambda tower, x: tower(x, grids))(ours.visual, jnp.asarray(pixel_values))
    np.testing.assert_allclose(np.asarray(embeddings), torch.cat(expected.pooler_output).numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(deepstack[-1]), torch.cat(expected.deepstack_features[-1]).numpy(),
                               atol=1e-5, rtol=0)
