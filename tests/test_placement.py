"""Role placement (rlanything_jax/system/placement.py) on 8 fake CPU devices: colocated and split meshes, and a
sampler on the split half generating what a colocated one does with weights handed over from the learners'.
The multi-process case (partner devices inside each process) runs in tests/test_multiprocess.py."""

import jax
import numpy as np
import pytest

from rlanything_jax.core import multihost, sharding
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.system import placement
from tests import hf_reference


def test_colocated_is_one_mesh_and_split_pairs_each_learner_device_with_a_sampler_device():
    colocated = placement.build_meshes({"fsdp": -1})
    assert colocated.learner is colocated.sampler and not colocated.split
    split = placement.build_meshes({"fsdp": 2, "tensor": -1}, "split")
    assert split.split and split.learner.devices.shape == split.sampler.devices.shape == (1, 2, 2)
    learner_ids = {d.id for d in split.learner.devices.flat}
    sampler_ids = {d.id for d in split.sampler.devices.flat}
    assert learner_ids == {0, 1, 2, 3} and sampler_ids == {4, 5, 6, 7}
    # Partners sit at the same mesh position: an array laid out alike on both moves shard by shard.
    assert [d.id + 4 for d in split.learner.devices.flat] == [d.id for d in split.sampler.devices.flat]


def test_split_needs_an_even_number_of_devices_per_process():
    with pytest.raises(ValueError, match="same, even number of devices"):
        placement.build_meshes({"fsdp": -1}, "split", devices=jax.devices()[:3])
    with pytest.raises(ValueError, match="placement must be one of"):
        placement.build_meshes({"fsdp": -1}, "spread")


def test_weights_trained_on_the_learner_half_reach_a_sampler_on_the_other_half(tmp_path):
    hf_reference.build("qwen2", tmp_path, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    meshes = placement.build_meshes({"fsdp": -1}, "split")
    learner_model = load_pretrained(tmp_path, mesh=meshes.learner)
    colocated = Sampler(load_pretrained(tmp_path), mesh=sharding.build_mesh({"fsdp": -1}))
    split = Sampler(load_pretrained(tmp_path), mesh=meshes.sampler)
    # "Training" on the learner mesh: new weights, then handed over as the loop does.
    from flax import nnx

    new = jax.tree.map(lambda x: x * 1.5, nnx.state(learner_model))
    split.update_params(new)
    colocated.update_params(multihost.to_device(new, colocated._param_shardings))
    assert {d.id for leaf in jax.tree.leaves(split.params) for d in leaf.sharding.device_set} == {4, 5, 6, 7}
    prompts = [[5, 9, 13, 2], [7, 7, 30]]
    ours = split.generate(prompts, max_new_tokens=6)
    theirs = colocated.generate(prompts, max_new_tokens=6)
    assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]
    np.testing.assert_allclose(np.concatenate([c.logprobs for c in ours]),
                               np.concatenate([c.logprobs for c in theirs]), atol=1e-5)
