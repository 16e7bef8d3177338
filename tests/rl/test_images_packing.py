"""Multimodal rows in the two sequence-sharing schemes: turn packing keeps working (a packed episode with two
screenshots scores each step's response as the step's own example does); shared prefixes are switched off
for rows with images, and counted."""

import functools
from collections import Counter

import jax
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.qwen3_vl import processor
from rlanything_jax.core.models.qwen3_vl.images import Qwen3VLImages
from rlanything_jax.core.rl.data import DataConfig, Example, collate, pack_turns
from rlanything_jax.core.rl.train_step import share_prompt_prefixes, token_logprobs
from tests.models.qwen3_vl import vl_reference
from tests.models.qwen3_vl.vl_reference import END, IMAGE, START

EOS = 7
DATA = DataConfig(batch_size=2, max_prompt_tokens=512, max_response_tokens=16, eos_id=EOS,
                  images=Qwen3VLImages(IMAGE),
                  aggregation="sequence_mean")


def _episode():
    """Two steps of a desktop episode: step 2's prompt is step 1's prompt + response + a new screenshot turn."""
    rng = np.random.default_rng(3)
    first, images = processor.prepare_prompt([11, 12, START, IMAGE, END, 13],
                                             vl_reference.images([(64, 96)], seed=1), IMAGE)
    response_1 = list(rng.integers(10, 400, 4)) + [EOS]
    turn, new_images = processor.prepare_prompt([14, START, IMAGE, END, 15], vl_reference.images([(64, 96)], seed=2),
                                                IMAGE)
    response_2 = list(rng.integers(10, 400, 3)) + [EOS]
    return [Example(first, response_1, 1.0, [-2.0] * 5, images=images),
            Example(first + response_1 + turn, response_2, -1.0, [-2.0] * 4, images=images + new_images)]


def test_shared_prefixes_are_switched_off_for_rows_with_images_and_counted():
    steps = _episode()
    batch = collate([steps[0], steps[0]], DATA)   # two rows of one prompt: a group that could share it
    counts = Counter()
    assert share_prompt_prefixes(batch, group_size=2, prefix_length=4, counts=counts) is batch
    assert counts == {"prefix_sharing_off_images": 2}


@pytest.mark.slow   # compiles a tiny Qwen3-VL forward twice
def test_a_packed_episode_with_screenshots_scores_each_step_as_its_own_example(tmp_path):
    vl_reference.build("tied-gqa4-deepstack1", tmp_path, seed=31)
    model = load_pretrained(tmp_path)
    graphdef, params = nnx.split(model)
    steps = _episode()
    packed = pack_turns(steps)
    assert packed is not None and len(packed.images) == 2

    def scored(examples):
        batch = collate(examples, DATA)
        logp = jax.jit(functools.partial(token_logprobs, graphdef))(
            params, batch.input_ids, batch.attention_mask, batch.targets, None, batch)
        return np.asarray(logp), np.asarray(batch.loss_mask)

    per_step, step_mask = scored(steps)
    together, packed_mask = scored([packed])
    expected = np.concatenate([per_step[row][step_mask[row] > 0] for row in range(2)])
    np.testing.assert_allclose(together[0][packed_mask[0] > 0], expected, atol=1e-5, rtol=0)
