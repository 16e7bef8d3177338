"""Qwen3-VL checkpoints in and out: released and v5 config forms, transformers reloads what we save,
our round trip is bit-identical, bfloat16, and a sharded load on a (2, 4) mesh."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file
from transformers import Qwen3VLForConditionalGeneration

from rlanything_jax.core import sharding
from rlanything_jax.core.models import load_pretrained, save_pretrained
from rlanything_jax.core.models.qwen3_vl.model import Qwen3VL
from tests.models.qwen3_vl import vl_reference

pytestmark = pytest.mark.slow   # builds torch and JAX models and compiles their forwards (several seconds each)


def _params(model):
    return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _eager(model):
    for config in (model.config, model.config.text_config, model.config.vision_config):
        config._attn_implementation = "eager"
    return model.eval()


@pytest.mark.parametrize("shape", ["untied-gqa2-deepstack2", "tied-gqa4-deepstack1"])
def test_transformers_loads_what_we_save(shape, tmp_path):
    torch_model = vl_reference.build(shape, tmp_path / "src", seed=3)
    batch = vl_reference.prompt_batch([1, 2], seed=4)
    expected = vl_reference.reference_logits(torch_model, *batch)

    save_pretrained(load_pretrained(tmp_path / "src"), tmp_path / "out")
    reloaded = _eager(Qwen3VLForConditionalGeneration.from_pretrained(tmp_path / "out"))
    np.testing.assert_array_equal(vl_reference.reference_logits(reloaded, *batch), expected)
    ours = np.asarray(load_pretrained(tmp_path / "out")(*batch))
    valid = batch[1].astype(bool)
    np.testing.assert_allclose(ours[valid], expected[valid], atol=1e-4, rtol=0)


def test_load_then_save_is_bit_identical(tmp_path):
    vl_reference.build("untied-gqa1-deepstack3-over-2-layers", tmp_path / "src", seed=5)
    first = load_pretrained(tmp_path / "src")
    save_pretrained(first, tmp_path / "out")
    source = load_file(tmp_path / "src" / "model.safetensors")
    written = load_file(tmp_path / "out" / "model.safetensors")
    assert source.keys() == written.keys()
    for key in source:
        assert source[key].dtype == written[key].dtype and source[key].shape == written[key].shape, key
        np.testing.assert_array_equal(source[key], written[key], err_msg=key)
    second = load_pretrained(tmp_path / "out")
    a, b = _params(first), _params(second)
    assert a.keys() == b.keys()
    for path in a:
        np.testing.assert_array_equal(a[path], b[path], err_msg=str(path))


def _to_released_config_form(directory):
    """Rewrites a transformers 5 config.json into the released (4.57-era) form of Qwen3-VL checkpoints."""
    path = directory / "config.json"
    hf = json.loads(path.read_text())
    text, vision = hf["text_config"], hf["vision_config"]
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope.pop("rope_theta")
    text["rope_scaling"] = rope
    text["tie_word_embeddings"] = hf["tie_word_embeddings"]
    vision.pop("rope_parameters")
    vision["model_type"] = "qwen3_vl"
    hf["transformers_version"] = "4.57.0.dev0"
    path.write_text(json.dumps(hf, indent=2))


def test_released_config_form_loads(tmp_path):
    vl_reference.build("tied-gqa4-deepstack1", tmp_path, seed=6)
    _to_released_config_form(tmp_path)
    reference = _eager(Qwen3VLForConditionalGeneration.from_pretrained(tmp_path))
    assert reference.config.text_config.rope_parameters["mrope_section"] == [2, 3, 3]
    ours = load_pretrained(tmp_path)
    assert ours.vl_config.mrope_section == (2, 3, 3) and ours.config.rope.theta == 5e6
    assert ours.lm_head is None
    batch = vl_reference.prompt_batch([2, 1], seed=7)
    expected = vl_reference.reference_logits(reference, *batch)
    valid = batch[1].astype(bool)
    np.testing.assert_allclose(np.asarray(ours(*batch))[valid], expected[valid], atol=1e-4, rtol=0)


def test_bfloat16_params_and_compute_stay_close_to_float32(tmp_path):
    torch_model = vl_reference.build("untied-gqa2-deepstack2", tmp_path, seed=8)
    batch = vl_reference.prompt_batch([1, 2], seed=9)
    expected = vl_reference.reference_logits(torch_model, *batch)
    model = load_pretrained(tmp_path, dtype="bfloat16")
    assert model.visual.blocks[0].attn.qkv.kernel[...].dtype == jnp.bfloat16
    assert model.embed[...].dtype == jnp.bfloat16
    logits = np.asarray(model(*batch))
    valid = batch[1].astype(bool)
    error = np.abs(logits[valid] - expected[valid])
    assert error.max() < 0.15 * np.abs(expected[valid]).max()
    assert (logits[valid].argmax(-1) == expected[valid].argmax(-1)).mean() > 0.9


def test_sharded_load_on_a_2x4_mesh_gives_the_same_logits(tmp_path):
    torch_model = vl_reference.build("tied-gqa4-deepstack1", tmp_path, seed=10)
    batch = vl_reference.prompt_batch([2, 1], seed=11)
    single = np.asarray(load_pretrained(tmp_path)(*batch))

    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    model = load_pretrained(tmp_path, mesh=mesh)
    assert isinstance(model, Qwen3VL)
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        assert variable[...].sharding.mesh == mesh, path
    assert tuple(model.visual.blocks[0].attn.qkv.kernel[...].sharding.spec) == ("fsdp", None, "tensor", None)
    assert tuple(model.layers[0].attn.q_proj.kernel[...].sharding.spec)[:2] == ("fsdp", "tensor")
    with jax.set_mesh(mesh):
        sharded = np.asarray(model(*batch))
    np.testing.assert_allclose(sharded, single, atol=1e-5, rtol=0)
    valid = batch[1].astype(bool)
    expected = vl_reference.reference_logits(torch_model, *batch)
    np.testing.assert_allclose(sharded[valid], expected[valid], atol=1e-4, rtol=0)
