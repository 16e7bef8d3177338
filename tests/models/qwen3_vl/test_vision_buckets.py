"""Bucketed vision programs: images padded to one patch bucket, their grids passed as arrays
(`patches.PatchLayout`), give the features of the unpadded computation and of transformers through
one compiled program."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.qwen3_vl import processor
from rlanything_jax.core.models.qwen3_vl.patches import bucket_patches
from tests.models.qwen3_vl import vl_reference

pytestmark = pytest.mark.slow   # builds a torch and a JAX model and compiles the tower a few times

# 280, 288 and 288 patches (grids 14x20, 8x36 and 24x12): all in the 512-patch bucket.
SIZES = [(80, 120), (40, 200), (96, 48)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("buckets")
    return vl_reference.build("untied-gqa2-deepstack2", out, seed=3), load_pretrained(out)


def _transformers(torch_model, pixel_values, grids):
    with torch.no_grad():
        out = torch_model.model.get_image_features(torch.tensor(pixel_values), torch.tensor(grids))
    return torch.cat(out.pooler_output).numpy(), [torch.cat(f).numpy() for f in out.deepstack_features]


def _padded(pixel_values, size):
    out = np.zeros((size, pixel_values.shape[1]), np.float32)
    out[:pixel_values.shape[0]] = pixel_values
    return jnp.asarray(out)


def test_bucket_sizes():
    assert [bucket_patches(n) for n in (1, 256, 257, 280, 288, 1024, 1025, 8160)] == \
        [256, 256, 512, 512, 512, 1024, 2048, 8192]


def test_images_of_one_bucket_share_a_program_and_equal_the_unpadded_features(models):
    torch_model, ours = models
    traces = []

    @nnx.jit
    def bucketed(tower, pixel_values, layout):
        traces.append(pixel_values.shape)   # runs once per trace: counts compilations
        return tower(pixel_values, layout)

    exact = nnx.jit(lambda tower, pixel_values, grids: tower(pixel_values, grids), static_argnums=2)
    for index, image in enumerate(vl_reference.images(SIZES, seed=4)):
        pixel_values, grids = processor.preprocess_images([image])
        count, grid = pixel_values.shape[0], tuple(int(v) for v in grids[0])
        assert bucket_patches(count) == 512
        tokens = count // 4
        embeddings, deepstack = bucketed(ours.visual, _padded(pixel_values, 512), ours.visual.layout([grid], 512))
        unpadded = exact(ours.visual, jnp.asarray(pixel_values), (grid,))
        reference, reference_deepstack = _transformers(torch_model, pixel_values, grids)
        assert deepstack.shape[0] == len(reference_deepstack) == 2
        for ours_out, theirs in [(embeddings, unpadded[0]), (deepstack, unpadded[1])]:
            np.testing.assert_allclose(np.asarray(ours_out[..., :tokens, :]), np.asarray(theirs), atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.asarray(embeddings[:tokens]), reference, atol=1e-5, rtol=0)
        for level, features in enumerate(reference_deepstack):
            np.testing.assert_allclose(np.asarray(deepstack[level, :tokens]), features, atol=1e-5, rtol=0)
        if index == 0:   # mostly padding: the query chunks of padding only are skipped, the rest unchanged
            embeddings, _ = bucketed(ours.visual, _padded(pixel_values, 1024), ours.visual.layout([grid], 1024))
            np.testing.assert_allclose(np.asarray(embeddings[:tokens]), reference, atol=1e-5, rtol=0)
    assert traces == [(512, 1536), (1024, 1536)]


def test_images_packed_into_one_bucket_attend_within_themselves(models):
    torch_model, ours = models
    pixel_values, grids = processor.preprocess_images(vl_reference.images(SIZES, seed=5))
    assert bucket_patches(pixel_values.shape[0]) == 1024   # 856 patches and 168 of padding
    embeddings, deepstack = ours.image_features(jnp.asarray(pixel_values), grids)
    reference, reference_deepstack = _transformers(torch_model, pixel_values, grids)
    np.testing.assert_allclose(np.asarray(embeddings), reference, atol=1e-5, rtol=0)
    for level, features in enumerate(reference_deepstack):
        np.testing.assert_allclose(np.asarray(deepstack[level]), features, atol=1e-5, rtol=0)
