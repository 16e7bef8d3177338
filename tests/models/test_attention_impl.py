"""`model.attention_impl`: every implementation that runs on a CPU equals `xla` (float32, 1e-5) in the full
forward (and its gradients), the sampler's prefill, extend and decode, and the vision tower; the choice
is resolved per platform and validated by name."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core.models.attention_kernels import AttentionKernel, causal_attention, resolve_attention
from rlanything_jax.core.models.decoder import Decoder
from rlanything_jax.core.models.model_config import DecoderConfig
from rlanything_jax.core.models.qwen3_vl.config import VisionConfig
from rlanything_jax.core.models.qwen3_vl.vision import VisionTower
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import DEFAULT_CONFIG, load_config

XLA = AttentionKernel("xla")
# Small tiles, so that tiny inputs cross several query and key chunks (partial ones at the ends).
CHUNKED = AttentionKernel("chunked", query_chunk=8, key_chunk=16)
TINY = DecoderConfig(model_type="qwen3", vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True)
PROMPTS = [[5, 6, 7, 8, 9], list(range(10, 33)), list(range(40, 77)), [3]]   # odd lengths, left-padded to 64
SECOND_TURN = [[11, 12, 13], list(range(50, 67)), [], list(range(20, 49))]   # one row sits the turn out


def _decoder(kernel: AttentionKernel) -> Decoder:
    return Decoder(TINY, rngs=nnx.Rngs(0), attention=kernel)   # same seed: same weights under every kernel


def _padded_batch():
    length = 29
    rng = np.random.default_rng(0)
    ids = rng.integers(1, TINY.vocab_size, (3, length)).astype(np.int32)
    mask = np.ones((3, length), np.int32)
    mask[0, :11] = 0      # left padding
    mask[2, :length - 1] = 0   # a single real token
    return jnp.asarray(ids), jnp.asarray(mask)


def test_full_forward_logits_and_gradients_match_xla():
    ids, mask = _padded_batch()
    real = np.asarray(mask).astype(bool)
    models = {kernel.name: _decoder(kernel) for kernel in (XLA, CHUNKED)}
    logits = {name: np.asarray(nnx.jit(lambda m: m(ids, mask))(model)) for name, model in models.items()}
    np.testing.assert_allclose(logits["chunked"][real], logits["xla"][real], atol=1e-5, rtol=0)

    def loss(model):   # what training differentiates: log-probabilities of real tokens after real tokens
        logprobs = model.target_logprobs(model.hidden_states(ids, mask)[:, :-1], ids[:, 1:])
        return jnp.sum(logprobs * mask[:, 1:] * mask[:, :-1])   # a padding position's output is unspecified

    grads = {name: nnx.jit(nnx.grad(loss))(model) for name, model in models.items()}
    for ours, reference in zip(jax.tree.leaves(grads["chunked"]), jax.tree.leaves(grads["xla"])):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(reference), atol=1e-5, rtol=1e-5)


def test_prefill_extend_and_decode_match_xla():
    results = {}
    for kernel in (XLA, CHUNKED):
        sampler = Sampler(_decoder(kernel))
        conversation = sampler.start(PROMPTS, max_new_tokens=8, cache_length=256)
        prefill_logits = np.asarray(conversation.state.logits)
        first = sampler.decode(conversation, 8, stop_token_ids=[])
        sampler.extend(conversation, SECOND_TURN)
        extend_logits = np.asarray(conversation.state.logits)
        second = sampler.decode(conversation, 8, stop_token_ids=[])
        results[kernel.name] = (prefill_logits, first, extend_logits, second)
    ours, reference = results["chunked"], results["xla"]
    np.testing.assert_allclose(ours[0][:len(PROMPTS)], reference[0][:len(PROMPTS)], atol=1e-5, rtol=0)
    taking_part = [row for row, tokens in enumerate(SECOND_TURN) if tokens]
    np.testing.assert_allclose(ours[2][taking_part], reference[2][taking_part], atol=1e-5, rtol=0)
    for decoded, expected in ((ours[1], reference[1]), (ours[3], reference[3])):
        assert [c.token_ids for c in decoded] == [c.token_ids for c in expected]
        for completion, want in zip(decoded, expected):
            np.testing.assert_allclose(completion.logprobs, want.logprobs, atol=1e-5, rtol=0)


def test_vision_tower_on_packed_images_of_different_sizes_matches_xla():
    cfg = VisionConfig(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
                       num_position_embeddings=64, deepstack_visual_indexes=(0,), patch_size=4)
    grids = [(1, 8, 12), (1, 4, 6), (1, 10, 8)]   # 96, 24 and 80 patches, padded to 224 (a segment of its own)
    towers = {kernel.name: VisionTower(cfg, rngs=nnx.Rngs(1), attention=kernel)
              for kernel in (XLA, AttentionKernel("chunked", query_chunk=32, key_chunk=64))}
    layout = towers["xla"].layout(grids, 224)
    pixels = np.zeros((224, cfg.patch_dim), np.float32)
    pixels[:200] = np.random.default_rng(2).standard_normal((200, cfg.patch_dim))
    out = {name: nnx.jit(lambda t: t(jnp.asarray(pixels), layout))(tower) for name, tower in towers.items()}
    tokens = 200 // cfg.spatial_merge_size ** 2
    for ours, reference in zip(out["chunked"], out["xla"]):   # embeddings, then DeepStack features
        np.testing.assert_allclose(np.asarray(ours)[..., :tokens, :], np.asarray(reference)[..., :tokens, :],
                                   atol=1e-5, rtol=0)


def _attention_inputs(length: int, keys: int, start: int):
    rng = np.random.default_rng(3)
    q = jnp.asarray(rng.standard_normal((2, length, 4, 16)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((2, keys, 2, 16)), jnp.float32) for _ in range(2))
    valid = np.ones((2, keys), bool)
    valid[0, :start + 40] = False   # left padding into the queries' own columns
    valid[1, 3:9] = False
    real = valid[:, start:start + length]
    return q, k, v, jnp.asarray(valid), real


@pytest.mark.parametrize("platform", ["tpu", "gpu"])
def test_pallas_kernels_in_interpret_mode_match_xla(platform, caplog):
    """splash (TPU) and the Triton flash kernel (GPU), run by the Pallas interpreter: the training forward's
    causal attention with left padding and grouped heads, at lengths their tiles divide."""
    kernel = resolve_attention("splash", platform=platform, interpret=True)
    q, k, v, valid, real = _attention_inputs(128, 128, 0)
    with caplog.at_level(logging.WARNING):
        ours = causal_attention(q, k, v, valid, 0, kernel)
    assert "runs chunked" not in caplog.text   # the kernel itself ran
    np.testing.assert_allclose(np.asarray(ours)[real], np.asarray(causal_attention(q, k, v, valid, 0, XLA))[real],
                               atol=1e-5, rtol=0)


def test_kernels_fall_back_to_chunked_with_the_reason_logged(caplog):
    """A traced first column (the sampler's write column) for splash, float32 for cuDNN: chunked runs."""
    q, k, v, valid, real = _attention_inputs(37, 96, 50)
    reference = np.asarray(causal_attention(q, k, v, valid, 50, XLA))[real]
    with caplog.at_level(logging.WARNING):
        for kernel in (AttentionKernel("splash", platform="tpu"), AttentionKernel("cudnn", platform="gpu")):
            ours = jax.jit(lambda start: causal_attention(q, k, v, valid, start, kernel))(jnp.int32(50))  # noqa: B023
            np.testing.assert_allclose(np.asarray(ours)[real], reference, atol=1e-5, rtol=0)
    assert "static first query column" in caplog.text and "bfloat16 or float16" in caplog.text


def test_auto_resolves_by_platform_and_accelerator_kernels_refuse_a_cpu():
    assert [resolve_attention("auto", platform=p).name for p in ("cpu", "gpu", "tpu")] == ["chunked", "cudnn",
                                                                                          "splash"]
    assert resolve_attention("xla", platform="tpu").name == "xla"
    for name in ("cudnn", "splash"):
        with pytest.raises(ConfigError, match=rf"^config\.model\.policy\.attention_impl: {name} attention runs on"):
            resolve_attention(name, platform="cpu", key="model.policy.attention_impl")
    with pytest.raises(ConfigError, match="attention runs on gpu only"):
        resolve_attention("cudnn", platform="tpu")


def test_config_names_a_bad_attention_impl():
    with pytest.raises(ConfigError, match=r"^config\.model\.policy\.attention_impl: must be one of auto, xla"):
        load_config(DEFAULT_CONFIG, ["model.policy.attention_impl=flashy"])
    assert load_config(DEFAULT_CONFIG, ["model.reward.attention_impl=xla"]).model.reward.attention_impl == "xla"
