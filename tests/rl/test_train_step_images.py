"""The train step on vision-language examples: target log-probabilities equal transformers' (through the
vision tower and from cached features, also with images of different grids in one batch), and a few
updates lower the loss with the tower trained or frozen."""

import functools

import jax
import numpy as np
import optax
import pytest
import torch
from flax import nnx

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.qwen3_vl.images import Qwen3VLImages
from rlanything_jax.core.rl.data import DataConfig, collate
from rlanything_jax.core.rl.train_state import init_train_state
from rlanything_jax.core.rl.train_step import TrainSpec, token_logprobs, train_step
from rlanything_jax.core.rl.vision import freeze_vision, with_cached_image_features
from tests.models.qwen3_vl import vl_reference
from tests.models.qwen3_vl.vl_reference import IMAGE

pytestmark = pytest.mark.slow   # compiles train steps of a tiny Qwen3-VL

DATA = DataConfig(batch_size=4, max_prompt_tokens=512, max_response_tokens=16, eos_id=7,
                  images=Qwen3VLImages(IMAGE),
                  aggregation="sequence_mean")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_vl")
    return vl_reference.build("tied-gqa4-deepstack1", path, seed=31), load_pretrained(path)


# 280, 288 and 288 patches: three grids (14x20, 8x36, 24x12), the second row holding two of them.
MIXED = ((80, 120), (40, 200), (96, 48))


@pytest.mark.parametrize("sizes", [((64, 96),), MIXED], ids=["one-grid", "mixed-grids"])
def test_target_logprobs_equal_transformers_with_the_tower_and_from_cached_features(tiny, sizes):
    torch_model, model = tiny
    examples = vl_reference.screenshot_examples(7, sizes)
    batch = collate(examples, DATA)
    graphdef, params = nnx.split(model)
    through_tower = np.asarray(jax.jit(functools.partial(token_logprobs, graphdef))(
        params, batch.input_ids, batch.attention_mask, batch.targets, None, batch))
    cached = jax.jit(functools.partial(with_cached_image_features, graphdef))(params, batch)
    from_cache = np.asarray(jax.jit(functools.partial(token_logprobs, graphdef))(
        params, batch.input_ids, batch.attention_mask, batch.targets, None, cached))
    window = batch.targets.shape[1]
    for row, example in enumerate(examples):
        sequence = np.asarray([list(example.prompt_ids) + list(example.response_ids)])
        images = example.images or []
        pixel_values = np.concatenate([image.pixel_values for image in images]) if images else None
        grids = np.asarray([image.grid_thw for image in images]) if images else None
        logits = vl_reference.reference_logits(torch_model, sequence, np.ones_like(sequence), pixel_values, grids)
        log_probs = torch.log_softmax(torch.tensor(logits[0]), -1).numpy()
        n = len(example.response_ids)
        expected = [log_probs[len(example.prompt_ids) - 1 + i, t] for i, t in enumerate(example.response_ids)]
        valid = batch.loss_mask[row] > 0
        assert valid.sum() == n
        np.testing.assert_allclose(through_tower[row][valid], expected, atol=1e-4, rtol=0)
        np.testing.assert_allclose(from_cache[row][valid], expected, atol=1e-4, rtol=0)
    assert window <= batch.input_ids.shape[1]
    if sizes == MIXED:
        assert len({image.grid_thw for e in examples for image in e.images or ()}) == 3
        assert batch.model_inputs.pixel_values.shape[1] == 1024   # the 2-image row's 576 patches, bucketed


@pytest.mark.parametrize("frozen", [False, True])
def test_updates_lower_the_loss(tiny, frozen):
    _, model = tiny
    examples = vl_reference.screenshot_examples(7)
    batch = collate(examples, DATA)
    graphdef, params = nnx.split(model, nnx.Param)[0], nnx.state(model, nnx.Param)
    tx = optax.adam(3e-3)
    if frozen:
        tx = freeze_vision(tx, model.vision_params)
        batch = jax.jit(functools.partial(with_cached_image_features, graphdef))(params, batch)
    spec = TrainSpec(graphdef, tx)
    # On-policy old log-probabilities: the first step's ratio is 1.
    old = jax.jit(functools.partial(token_logprobs, graphdef))(
        params, batch.input_ids, batch.attention_mask, batch.targets, None, batch)
    batch = batch.replace(old_logp=old)
    state = init_train_state(params, tx)
    step = jax.jit(lambda s, b: train_step(s, b, spec))
    losses = []
    for _ in range(3):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < losses[0] - 1e-3, losses
    before, after = params["visual"], state.params["visual"]
    changed = [not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(jax.tree.leaves(before),
                                                                               jax.tree.leaves(after))]
    assert not any(changed) if frozen else all(changed)
