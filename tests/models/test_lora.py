"""LoRA adapters (core/models/lora.py) against the base model, their merge, and PEFT on the transformers model."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core.models import load_pretrained, lora
from rlanything_jax.core.validation import ConfigError
from tests import hf_reference


def _randomize_b(adapters: nnx.State, seed: int) -> nnx.State:
    """Non-zero B matrices (fresh adapters have B = 0), of a size that moves the logits by O(1)."""
    leaves, treedef = jax.tree.flatten(adapters)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(treedef, [x + 0.3 * jax.random.normal(k, x.shape, x.dtype)
                                        for x, k in zip(leaves, keys)])


@pytest.fixture(scope="module", params=[False, True], ids=["unrolled", "scanned"])
def tiny(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny")
    torch_model = hf_reference.build("qwen3", directory, num_key_value_heads=4, head_dim=16)
    model = load_pretrained(directory, dtype="float32", scan_layers=request.param)
    ids, mask = hf_reference.left_padded_batch([12, 7, 1], vocab=256, seed=3)
    return directory, torch_model, model, jnp.asarray(ids), jnp.asarray(mask)


def _with_adapters(model, config, seed=0):
    base_graphdef, base = nnx.split(model)
    adapted = lora.add_adapters(nnx.merge(base_graphdef, base), config, seed)
    graphdef, adapters, frozen = lora.split_adapters(adapted)
    return base_graphdef, base, graphdef, adapters, frozen


def test_zero_initialised_adapters_give_the_base_logits_exactly(tiny):
    _, _, model, ids, mask = tiny
    _, _, graphdef, adapters, frozen = _with_adapters(model, lora.LoRAConfig(rank=4))
    assert len(jax.tree.leaves(adapters)) == 2 * 7 * (1 if model.config.scan_layers else 2)
    expected = np.asarray(model(ids, mask))
    got = np.asarray(nnx.merge(graphdef, frozen, adapters)(ids, mask))
    np.testing.assert_array_equal(got, expected)


def test_merged_and_unmerged_forwards_agree(tiny):
    _, _, model, ids, mask = tiny
    config = lora.LoRAConfig(rank=4, alpha=8.0, targets=("q_proj", "o_proj", "up_proj", "down_proj"))
    base_graphdef, base, graphdef, adapters, frozen = _with_adapters(model, config)
    adapters = _randomize_b(adapters, 1)
    unmerged = np.asarray(nnx.merge(graphdef, frozen, adapters)(ids, mask))
    merged = np.asarray(nnx.merge(base_graphdef, lora.merge_adapters(base, adapters, config.scale))(ids, mask))
    assert np.abs(unmerged - np.asarray(model(ids, mask))).max() > 0.1   # the adapters do change the model
    np.testing.assert_allclose(merged, unmerged, atol=1e-5, rtol=0)


def test_written_adapters_load_into_peft_with_the_same_logits(tiny, tmp_path):
    peft = pytest.importorskip("peft")
    directory, torch_model, model, ids, mask = tiny
    config = lora.LoRAConfig(rank=4, alpha=12.0)
    _, _, graphdef, adapters, frozen = _with_adapters(model, config)
    adapters = _randomize_b(adapters, 2)
    ours = np.asarray(nnx.merge(graphdef, frozen, adapters)(ids, mask))
    lora.save_peft_adapters(adapters, config, tmp_path / "adapter", base_model=str(directory))

    base_copy = type(torch_model)(torch_model.config).eval()
    base_copy.load_state_dict(torch_model.state_dict())
    peft_model = peft.PeftModel.from_pretrained(base_copy, str(tmp_path / "adapter")).eval()
    # Every adapter was loaded (none silently left at PEFT's zero init).
    lora_b = [p for name, p in peft_model.named_parameters() if "lora_B" in name]
    assert len(lora_b) == 7 * 2 and all(float(p.abs().max()) > 0 for p in lora_b)
    expected = hf_reference.reference_logits(peft_model, np.asarray(ids), np.asarray(mask))
    valid = np.asarray(mask).astype(bool)
    assert np.abs(expected[valid] - hf_reference.reference_logits(
        torch_model, np.asarray(ids), np.asarray(mask))[valid]).max() > 0.1
    np.testing.assert_allclose(ours[valid], expected[valid], atol=1e-4, rtol=0)


def test_export_writes_the_merged_model_for_transformers_and_the_adapters_for_peft(tiny, tmp_path):
    directory, torch_model, model, ids, mask = tiny
    config = lora.LoRAConfig(rank=2, alpha=4.0, targets=("v_proj", "gate_proj"))
    base_graphdef, base, graphdef, adapters, frozen = _with_adapters(model, config)
    adapters = _randomize_b(adapters, 3)
    ours = np.asarray(nnx.merge(graphdef, frozen, adapters)(ids, mask))
    out = lora.export_adapted(base_graphdef, base, adapters, config, tmp_path / "export", base_model=str(directory))
    merged = type(torch_model).from_pretrained(out).eval()
    merged.config._attn_implementation = "eager"
    expected = hf_reference.reference_logits(merged, np.asarray(ids), np.asarray(mask))
    valid = np.asarray(mask).astype(bool)
    np.testing.assert_allclose(ours[valid], expected[valid], atol=1e-4, rtol=0)
    assert sorted(p.name for p in (out / "adapter").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]


def test_config_checks():
    assert not lora.LoRAConfig().enabled
    assert lora.LoRAConfig.of({"rank": 8, "alpha": 16, "targets": ["q_proj"]}).scale == 2.0
    for bad in (dict(rank=-1), dict(rank=4, targets=("embed",)), dict(rank=4, dropout=0.1), dict(alpha=0)):
        with pytest.raises(ConfigError):
            dataclasses.replace(lora.LoRAConfig(), **bad)
