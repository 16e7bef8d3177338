"""Mesh construction, the logical-axis rules table, and sharded models on 8 fake CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from rlanything_jax.core import sharding
from rlanything_jax.core.models import load_pretrained
from tests import hf_reference

RULES = sharding.DEFAULT_LOGICAL_AXIS_RULES


def test_fake_devices_are_available():
    assert len(jax.devices()) == 8, "tests/conftest.py sets --xla_force_host_platform_device_count=8"


@pytest.mark.parametrize("shape,expected", [
    ({"data": 1, "fsdp": -1, "tensor": 1}, (1, 8, 1)),
    ({"fsdp": 2, "tensor": 4}, (1, 2, 4)),
    ({"data": 2, "fsdp": -1, "tensor": 2}, (2, 2, 2)),
])
def test_build_mesh(shape, expected):
    mesh = sharding.build_mesh(shape)
    assert mesh.axis_names == ("data", "fsdp", "tensor")
    assert tuple(mesh.shape.values()) == expected
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)


@pytest.mark.parametrize("shape,message", [
    ({"fsdp": 3}, "needs 3 devices"),
    ({"fsdp": -1, "tensor": -1}, "at most one"),
    ({"pipeline": 2}, "unknown axes"),
    ({"fsdp": -1, "tensor": 3}, "not divisible"),
])
def test_build_mesh_errors(shape, message):
    with pytest.raises(ValueError, match=message):
        sharding.build_mesh(shape)


def test_logical_to_spec_follows_the_table_and_uses_each_mesh_axis_once():
    assert sharding.logical_to_spec(("batch", "length", "embed"), RULES) == P(("data", "fsdp"), None, None)
    assert sharding.logical_to_spec(("embed", "mlp"), RULES) == P("fsdp", "tensor")
    assert sharding.logical_to_spec(("vocab", "embed"), RULES) == P("tensor", "fsdp")
    with pytest.raises(KeyError, match="'experts'"):
        sharding.logical_to_spec(("experts",), RULES)


def test_logical_to_spec_replicates_dims_the_mesh_does_not_divide():
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    axes = ("embed", "kv_heads", "head_dim")
    assert sharding.logical_to_spec(axes, RULES, mesh, (64, 2, 16)) == P("fsdp", None, None)
    assert sharding.logical_to_spec(axes, RULES, mesh, (64, 4, 16)) == P("fsdp", "tensor", None)
    # batch -> (data, fsdp): with data = 1, fsdp = 2 a batch of 3 cannot be split.
    assert sharding.logical_to_spec(("batch",), RULES, mesh, (3,)) == P(("data",))


def test_validate_rules_names_the_bad_entry():
    with pytest.raises(ValueError, match="'mlp'.*'model'"):
        sharding.validate_rules((("mlp", "model"),))
    with pytest.raises(ValueError, match="twice"):
        sharding.validate_rules((("mlp", "tensor"), ("mlp", None)))


# Expected specs written out by hand for a model with 8 heads, 2 kv heads, on fsdp=2 x tensor=4.
EXPECTED_SPECS = {
    "embed": P("tensor", "fsdp"),
    "final_norm.scale": P("fsdp"),
    "lm_head.kernel": P("fsdp", "tensor"),
    "input_norm.scale": P("fsdp"),
    "post_attention_norm.scale": P("fsdp"),
    "attn.q_proj.kernel": P("fsdp", "tensor", None),
    "attn.k_proj.kernel": P("fsdp", None, None),     # 2 kv heads do not split 4 ways
    "attn.v_proj.kernel": P("fsdp", None, None),
    "attn.o_proj.kernel": P("tensor", None, "fsdp"),
    "mlp.gate_proj.kernel": P("fsdp", "tensor"),
    "mlp.up_proj.kernel": P("fsdp", "tensor"),
    "mlp.down_proj.kernel": P("tensor", "fsdp"),
}



def test_sharded_model_matches_single_device_and_follows_the_rules(tmp_path):
    hf_reference.build("llama", tmp_path, num_attention_heads=8, num_key_value_heads=2, head_dim=16)
    ids, mask = hf_reference.left_padded_batch([30, 11, 30, 2], vocab=256, seed=6)
    single = np.asarray(load_pretrained(tmp_path)(jnp.asarray(ids), jnp.asarray(mask)))

    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    model = load_pretrained(tmp_path, mesh=mesh, rules=RULES)
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        dotted = ".".join(str(p) for p in path)
        key = dotted.split(".", 2)[2] if dotted.startswith("layers.") else dotted
        actual = variable[...].sharding
        assert actual.mesh == mesh, dotted
        expected = EXPECTED_SPECS[key]
        assert tuple(actual.spec) + (None,) * (len(expected) - len(actual.spec)) == tuple(expected), dotted
        assert len(variable[...].addressable_shards) == 8

    batch_sharding = sharding.named_sharding(mesh, ("batch", "length"), RULES, ids.shape)
    sharded = model(jax.device_put(jnp.asarray(ids), batch_sharding), jax.device_put(jnp.asarray(mask), batch_sharding))
    np.testing.assert_allclose(np.asarray(sharded), single, atol=1e-5, rtol=0)


def test_sharded_qwen3_on_a_three_axis_mesh(tmp_path):
    hf_reference.build("qwen3", tmp_path, num_attention_heads=8, num_key_value_heads=4, head_dim=16,
                       tie_word_embeddings=True)
    ids, mask = hf_reference.left_padded_batch([9, 20], vocab=256, seed=7)
    single = np.asarray(load_pretrained(tmp_path)(jnp.asarray(ids), jnp.asarray(mask)))
    mesh = sharding.build_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    model = load_pretrained(tmp_path, mesh=mesh)
    assert tuple(model.layers[0].attn.k_proj.kernel[...].sharding.spec) == ("fsdp", "tensor", None)
    assert tuple(model.layers[0].attn.q_norm.scale[...].sharding.spec) in ((), (None,))
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(ids), jnp.asarray(mask))), single, atol=1e-5, rtol=0)
