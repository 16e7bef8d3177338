"""The JAX decoder reproduces transformers' Llama / Qwen2 / Qwen3 logits (float32, 1e-4)."""

import jax.numpy as jnp
import numpy as np
import pytest

from rlanything_jax.core.models import load_pretrained
from tests import hf_reference

# (family, overrides): tied/untied, theta 1e4/1e6, GQA ratios 1/2/4, head_dim != hidden/heads,
# biases, q/k norm and every supported rope scaling type.
CASES = {
    "llama-tied-theta1e4-gqa1": ("llama", dict(tie_word_embeddings=True, num_key_value_heads=4)),
    "llama-untied-theta1e6-gqa4-headdim24": ("llama", dict(rope_theta=1e6, num_attention_heads=8,
                                                           num_key_value_heads=2, head_dim=24)),
    "llama-llama3-rope-biases": ("llama", dict(attention_bias=True, mlp_bias=True, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16, "rope_theta": 5e5})),
    "llama-linear-rope": ("llama", dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})),
    "qwen2-untied-theta1e6-gqa2": ("qwen2", dict(rope_theta=1e6)),
    "qwen2-tied-gqa4-headdim32": ("qwen2", dict(tie_word_embeddings=True, num_attention_heads=8,
                                                num_key_value_heads=2, head_dim=32)),
    "qwen3-tied-theta1e6-gqa2-headdim32": ("qwen3", dict(tie_word_embeddings=True, rope_theta=1e6, head_dim=32)),
    "qwen3-untied-theta1e4-gqa1": ("qwen3", dict(num_key_value_heads=4, head_dim=16)),
    "qwen3-yarn-rope-gqa4": ("qwen3", dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                                           rope_scaling={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                                         "original_max_position_embeddings": 32})),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers_on_left_padded_batch(case, tmp_path):
    family, overrides = CASES[case]
    torch_model = hf_reference.build(family, tmp_path, **overrides)
    ids, mask = hf_reference.left_padded_batch([40, 17, 1, 33], vocab=256, seed=1)
    expected = hf_reference.reference_logits(torch_model, ids, mask)

    model = load_pretrained(tmp_path, dtype="float32")
    logits = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask)))

    assert logits.shape == (4, 40, 256) and logits.dtype == np.float32
    valid = mask.astype(bool)
    assert np.abs(expected[valid]).max() > 1.0  # unit-scale logits: the tolerance below is meaningful
    np.testing.assert_allclose(logits[valid], expected[valid], atol=1e-4, rtol=0)


def test_unpadded_call_takes_only_input_ids(tmp_path):
    torch_model = hf_reference.build("qwen3", tmp_path, tie_word_embeddings=True)
    ids, mask = hf_reference.left_padded_batch([12, 12], vocab=256, seed=2)
    expected = hf_reference.reference_logits(torch_model, ids, mask)
    logits = load_pretrained(tmp_path)(jnp.asarray(ids, jnp.int32))
    np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-4, rtol=0)


def test_bfloat16_params_and_compute_stay_close_to_float32(tmp_path):
    torch_model = hf_reference.build("qwen2", tmp_path)
    ids, mask = hf_reference.left_padded_batch([20, 9], vocab=256, seed=3)
    expected = hf_reference.reference_logits(torch_model, ids, mask)

    model = load_pretrained(tmp_path, dtype="bfloat16")
    assert model.embed[...].dtype == jnp.bfloat16
    assert model.layers[0].attn.q_proj.kernel[...].dtype == jnp.bfloat16
    logits = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask)))
    valid = mask.astype(bool)
    error = np.abs(logits[valid] - expected[valid])
    # bf16 has an 8-bit mantissa: errors are a few percent of the logit scale, never wrong argmaxes en masse.
    assert error.max() < 0.15 * np.abs(expected[valid]).max()
    agree = (logits[valid].argmax(-1) == expected[valid].argmax(-1)).mean()
    assert agree > 0.9


def test_unsupported_checkpoint_is_a_clear_error(tmp_path):
    hf_reference.build("qwen2", tmp_path, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    with pytest.raises(ValueError, match="sliding-window"):
        load_pretrained(tmp_path)
