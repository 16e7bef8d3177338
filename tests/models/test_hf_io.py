"""Hugging Face checkpoints in and out: transformers reloads what we save; our own round trip is exact."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from rlanything_jax.core.models import load_pretrained, save_pretrained
from rlanything_jax.core.models.hf_io import SafetensorsCheckpoint
from tests import hf_reference


def _params(model):
    return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


@pytest.mark.parametrize("family,overrides", [
    ("llama", dict(attention_bias=True, mlp_bias=True, head_dim=24)),
    ("qwen2", dict(tie_word_embeddings=True)),
    ("qwen3", dict(rope_theta=1e6, head_dim=32)),
])
def test_transformers_loads_what_we_save(family, overrides, tmp_path):
    torch_model = hf_reference.build(family, tmp_path / "src", **overrides)
    ids, mask = hf_reference.left_padded_batch([15, 6], vocab=256, seed=4)
    expected = hf_reference.reference_logits(torch_model, ids, mask)

    save_pretrained(load_pretrained(tmp_path / "src"), tmp_path / "out")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", attn_implementation="eager")
    assert type(reloaded) is type(torch_model)
    got = hf_reference.reference_logits(reloaded.eval(), ids, mask)
    valid = mask.astype(bool)
    np.testing.assert_array_equal(got[valid], expected[valid])


def test_round_trip_through_our_loader_is_bit_identical(tmp_path):
    hf_reference.build("qwen3", tmp_path / "src", tie_word_embeddings=False)
    first = load_pretrained(tmp_path / "src")
    save_pretrained(first, tmp_path / "out")
    second = load_pretrained(tmp_path / "out")
    a, b = _params(first), _params(second)
    assert a.keys() == b.keys()
    for path in a:
        np.testing.assert_array_equal(a[path], b[path], err_msg=str(path))
    ids = jnp.arange(24, dtype=jnp.int32).reshape(2, 12)
    np.testing.assert_array_equal(np.asarray(first(ids)), np.asarray(second(ids)))


def test_index_sharded_checkpoints_write_and_read(tmp_path):
    torch_model = hf_reference.build("llama", tmp_path / "src")
    model = load_pretrained(tmp_path / "src")
    save_pretrained(model, tmp_path / "out", max_shard_bytes=64 * 1024)
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert len(SafetensorsCheckpoint(tmp_path / "out").keys()) == len(index["weight_map"])

    ids, mask = hf_reference.left_padded_batch([10, 4], vocab=256, seed=5)
    expected = hf_reference.reference_logits(torch_model, ids, mask)
    valid = mask.astype(bool)
    ours = np.asarray(load_pretrained(tmp_path / "out")(jnp.asarray(ids), jnp.asarray(mask)))
    np.testing.assert_allclose(ours[valid], expected[valid], atol=1e-4, rtol=0)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", attn_implementation="eager")
    np.testing.assert_array_equal(hf_reference.reference_logits(theirs.eval(), ids, mask)[valid], expected[valid])


def test_bfloat16_checkpoint_loads_exactly_into_float32(tmp_path):
    torch_model = hf_reference.build("qwen2", tmp_path / "f32")
    torch_model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    model = load_pretrained(tmp_path / "bf16", dtype="float32")
    kernel = np.asarray(model.layers[1].mlp.down_proj.kernel[...])
    weight = torch_model.model.layers[1].mlp.down_proj.weight.detach().float().numpy()
    assert kernel.dtype == np.float32
    np.testing.assert_array_equal(kernel, weight.T)


def test_save_in_bfloat16_writes_bfloat16(tmp_path):
    hf_reference.build("llama", tmp_path / "src", tie_word_embeddings=True)
    save_pretrained(load_pretrained(tmp_path / "src"), tmp_path / "out", dtype="bfloat16")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "bfloat16"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert reloaded.model.embed_tokens.weight.dtype == torch.bfloat16
    assert load_pretrained(tmp_path / "out", dtype="bfloat16").embed[...].dtype == jnp.bfloat16


def test_missing_and_unexpected_tensors_are_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf_reference.build("llama", tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["model.layers.0.self_attn.extra.weight"] = np.zeros(3, np.float32)
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="self_attn.extra.weight"):
        load_pretrained(tmp_path)
    del tensors["model.layers.0.self_attn.extra.weight"], tensors["model.norm.weight"]
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(KeyError, match="model.norm.weight"):
        load_pretrained(tmp_path)


def test_not_a_model_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path)


def test_loaded_leaves_live_on_the_first_device_without_a_mesh(tmp_path):
    hf_reference.build("qwen3", tmp_path)
    model = load_pretrained(tmp_path)
    devices = {d for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)) for d in leaf.devices()}
    assert devices == {jax.devices()[0]}
