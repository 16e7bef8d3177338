"""Stacked, scanned decoder layers (`model.<role>.scan_layers`): logits equal transformers', gradients,
KV-cache decoding (joins and repacks included) and checkpoints equal the unrolled model's, and the compiled
programs do not grow with depth."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.models import Decoder, DecoderConfig, load_pretrained
from rlanything_jax.core.models.hf_io import save_pretrained
from rlanything_jax.core.models.layer_stack import is_stacked_path, per_layer_path
from rlanything_jax.core.rl.train_state import make_optimizer
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, _micro_objective
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig
from rlanything_jax.core.sampling.slots import generate_in_slots
from tests import hf_reference

LAYERS = 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    torch_model = hf_reference.build("qwen3", path, num_hidden_layers=LAYERS, num_key_value_heads=4, head_dim=32,
                                     rope_theta=1e6)
    return torch_model, path, load_pretrained(path), load_pretrained(path, scan_layers=True)


def _per_layer(state: nnx.State) -> dict:
    """A model's parameters by their unrolled path: a stacked one split into its layers."""
    out = {}
    for path, variable in nnx.to_flat_state(state):
        value = np.asarray(variable[...])
        if is_stacked_path(path):
            out.update({per_layer_path(path, i): value[i] for i in range(value.shape[0])})
        else:
            out[path] = value
    return out


def test_parameters_are_stacked_on_a_replicated_layers_axis(models):
    *_, unrolled, scanned = models
    kernel = scanned.layers.attn.q_proj.kernel
    assert kernel.shape == (LAYERS,) + unrolled.layers[0].attn.q_proj.kernel.shape
    assert kernel.get_metadata()["logical_axes"][0] == "layers"
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4}, jax.devices()[:8])
    specs = sharding.state_shardings(nnx.state(scanned, nnx.Param), mesh, sharding.DEFAULT_LOGICAL_AXIS_RULES)
    assert tuple(specs["layers"]["attn"]["q_proj"]["kernel"].spec) == (None, "fsdp", "tensor", None)
    np.testing.assert_array_equal(np.asarray(kernel[...][1]), np.asarray(unrolled.layers[1].attn.q_proj.kernel[...]))


def test_logits_match_transformers_and_every_path_matches_the_unrolled_model(models):
    torch_model, _, unrolled, scanned = models
    ids, mask = hf_reference.left_padded_batch([7, 12, 3], 256)
    expected = hf_reference.reference_logits(torch_model, ids, mask)
    valid = mask.astype(bool)
    assert np.abs(expected[valid]).max() > 1.0
    np.testing.assert_allclose(np.asarray(scanned(ids, mask))[valid], expected[valid], atol=1e-4, rtol=0)
    # `last`: the scanned layers run at full length and are cut after the scan; the unrolled cut the final layer.
    np.testing.assert_allclose(np.asarray(scanned.hidden_states(ids, mask, last=2)),
                               np.asarray(unrolled.hidden_states(ids, mask, last=2)), atol=1e-5, rtol=0)
    prefix_ids, prefix_mask = hf_reference.left_padded_batch([5, 3], 256, seed=1)
    rows, row_mask = ids[:, -3:], np.ones((3, 3), np.int32)
    index = np.array([1, 0, 1], np.int32)
    for last in (None, 2):
        np.testing.assert_allclose(
            np.asarray(scanned.hidden_states_after_prefixes(prefix_ids, prefix_mask, index, rows, row_mask, last)),
            np.asarray(unrolled.hidden_states_after_prefixes(prefix_ids, prefix_mask, index, rows, row_mask, last)),
            atol=1e-5, rtol=0)


@pytest.mark.parametrize("remat", ["none", "full"])
def test_train_step_loss_and_gradients_equal_the_unrolled_model(models, remat):
    *_, unrolled, scanned = models
    rng = np.random.RandomState(0)
    ids = rng.randint(0, 256, (4, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, :3] = 0
    batch = TrainBatch(input_ids=ids, attention_mask=mask, targets=np.roll(ids, -1, axis=1)[:, -6:],
                       loss_mask=np.ones((4, 6), np.float32), old_logp=np.full((4, 6), -4.0, np.float32),
                       advantages=rng.randn(4).astype(np.float32))
    results = []
    for model in (unrolled, scanned):
        graphdef, params = nnx.split(model)
        spec = TrainSpec(graphdef, make_optimizer({}), remat=remat)
        loss, grads = jax.jit(jax.value_and_grad(lambda p, b, spec=spec: _micro_objective(p, b, spec)[0]))(params,
                                                                                                           batch)
        results.append((float(loss), _per_layer(grads)))
    (loss, grads), (scanned_loss, scanned_grads) = results
    assert scanned_loss == pytest.approx(loss, abs=1e-5)
    assert scanned_grads.keys() == grads.keys()
    for path, grad in grads.items():
        np.testing.assert_allclose(scanned_grads[path], grad, atol=1e-5, rtol=1e-5, err_msg=str(path))


def test_greedy_decoding_matches_transformers_and_the_unrolled_log_probs(models):
    torch_model, _, unrolled, scanned = models
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(20, 57)), [3]]
    ours = Sampler(scanned).generate(prompts, 16, stop_token_ids=[])
    assert [c.token_ids for c in ours] == hf_reference.greedy_generate(torch_model, prompts, 16)
    for mine, theirs in zip(ours, Sampler(unrolled).generate(prompts, 16, stop_token_ids=[])):
        np.testing.assert_allclose(mine.logprobs, theirs.logprobs, atol=1e-5)
    hf_reference.assert_logprobs_match_full_forward(scanned, prompts, ours)


def test_a_sharded_scanned_model_and_its_sampler_match_one_device(models):
    """On fsdp 2 x tensor 4: the stacked parameters and cache shard like the unrolled ones (the layers axis
    whole), and logits and greedy tokens equal the single-device model's."""
    torch_model, path, unrolled, _ = models
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4}, jax.devices()[:8])
    scanned = load_pretrained(path, mesh=mesh, scan_layers=True)
    assert tuple(scanned.layers.mlp.up_proj.kernel[...].sharding.spec) == (None, "fsdp", "tensor")
    ids, mask = hf_reference.left_padded_batch([7, 12, 3, 9], 256, seed=3)
    np.testing.assert_allclose(np.asarray(scanned(ids, mask)), np.asarray(unrolled(ids, mask)), atol=1e-5, rtol=0)
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(20, 57)), [3]]
    sampler = Sampler(scanned, mesh=mesh)
    conversation = sampler.start(prompts, 12)
    assert tuple(conversation.state.cache.k.sharding.spec)[:2] == (None, ("data", "fsdp"))   # [layers, batch, ...]
    ours = sampler.generate(prompts, 12, stop_token_ids=[])
    assert [c.token_ids for c in ours] == hf_reference.greedy_generate(torch_model, prompts, 12)


def test_refilled_rows_join_and_repack_a_stacked_cache(models):
    """Continuous batching moves rows of the stacked [layers, batch, ...] cache (join, repack, replicate)."""
    *_, unrolled, scanned = models
    rng = np.random.default_rng(6)
    prompts = [rng.integers(3, 200, size=n).tolist() for n in (40, 7, 33, 5, 21, 9)]
    stops = (0, 1, 2, 5, 9, 11)
    alone = Sampler(unrolled, config=SamplerConfig(max_cache_length=256)).generate(prompts, 24, stop_token_ids=stops)
    sampler = Sampler(scanned, config=SamplerConfig(max_cache_length=256, min_window=32))
    refilled, metrics = generate_in_slots(sampler, prompts, 24, slots=4, num_samples=2, stop_token_ids=stops,
                                          refill_every=2, tag="test")
    assert metrics["test/joined_rows"] >= 2 and metrics["test/repacks"] >= 1
    for i, reference in enumerate(alone):
        for sample in refilled[2 * i:2 * i + 2]:
            assert sample.token_ids == reference.token_ids
            np.testing.assert_allclose(sample.logprobs, reference.logprobs, atol=1e-4)


def test_a_scanned_model_saves_the_per_layer_checkpoint_transformers_reads(models, tmp_path):
    torch_model, path, unrolled, scanned = models
    save_pretrained(scanned, tmp_path)
    reloaded = load_pretrained(tmp_path)
    assert isinstance(reloaded.layers, nnx.List)   # per-layer tensors, loaded unrolled
    original, again = _per_layer(nnx.state(unrolled, nnx.Param)), _per_layer(nnx.state(reloaded, nnx.Param))
    assert original.keys() == again.keys()
    for key, value in original.items():
        np.testing.assert_array_equal(again[key], value)
    theirs = type(torch_model).from_pretrained(tmp_path).eval()
    ids, mask = hf_reference.left_padded_batch([6, 4], 256, seed=2)
    valid = mask.astype(bool)
    np.testing.assert_allclose(hf_reference.reference_logits(theirs, ids, mask)[valid],
                               hf_reference.reference_logits(torch_model, ids, mask)[valid], atol=1e-5, rtol=0)


def test_compiled_programs_do_not_grow_with_depth():
    """One layer body in a scan: the lowered program's matmuls are as many at 8 layers as at 2, and the
    compiled train step's temporaries grow by about one layer's kept input (remat full), not by a layer's
    whole working set as the unrolled program's do."""
    sds = jax.ShapeDtypeStruct
    rows, length, window = 4, 64, 32
    batch = TrainBatch(input_ids=sds((rows, length), jnp.int32), attention_mask=sds((rows, length), jnp.int32),
                       targets=sds((rows, window), jnp.int32), loss_mask=sds((rows, window), jnp.float32),
                       old_logp=sds((rows, window), jnp.float32), advantages=sds((rows,), jnp.float32))

    def program(num_layers, scan):
        cfg = DecoderConfig(model_type="qwen3", vocab_size=256, hidden_size=64, intermediate_size=128,
                            num_layers=num_layers, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
                            scan_layers=scan)
        graphdef, params = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0))))
        spec = TrainSpec(graphdef, make_optimizer({}), remat="full")
        lowered = jax.jit(jax.value_and_grad(lambda p, b: _micro_objective(p, b, spec)[0])).lower(params, batch)
        return lowered.as_text().count("dot_general"), lowered.compile().memory_analysis().temp_size_in_bytes

    (scan_dots_2, scan_temp_2), (scan_dots_8, scan_temp_8) = program(2, True), program(8, True)
    (unrolled_dots_2, _), (unrolled_dots_8, _) = program(2, False), program(8, False)
    assert scan_dots_8 == scan_dots_2
    assert unrolled_dots_8 > 3 * unrolled_dots_2 // 2
    kept_per_layer = rows * length * 64 * 4   # one layer's float32 input, what "full" keeps
    assert scan_temp_8 - scan_temp_2 <= 6 * 2 * kept_per_layer


@pytest.mark.parametrize("shape", ["tied-gqa4-deepstack1", "untied-gqa1-deepstack3-over-2-layers"])
def test_qwen3_vl_with_scanned_layers_matches_transformers_on_images(tmp_path, shape):
    """DeepStack under a traced layer index: one level over 3 layers (the later layers add nothing), and
    3 levels over 2 layers (the last level is never used); the vision tower's blocks scanned too, its
    DeepStack taps kept in the scan's carry."""
    from tests.models.qwen3_vl import vl_reference

    torch_model = vl_reference.build(shape, tmp_path, seed=3)
    scanned = load_pretrained(tmp_path, scan_layers=True)
    assert scanned.config.scan_layers and scanned.layers.attn.q_proj.kernel.shape[0] == scanned.config.num_layers
    assert scanned.visual.blocks.attn.qkv.kernel.shape[0] == scanned.vl_config.vision.depth   # the tower's too
    input_ids, mask, pixel_values, grid_thw = vl_reference.prompt_batch([2, 1], seed=4)
    expected = vl_reference.reference_logits(torch_model, input_ids, mask, pixel_values, grid_thw)
    valid = mask.astype(bool)
    logits = np.asarray(scanned(input_ids, mask, pixel_values, grid_thw))
    np.testing.assert_allclose(logits[valid], expected[valid], atol=1e-4, rtol=0)
    save_pretrained(scanned, tmp_path / "saved")   # per-layer and per-block tensors again
    again = np.asarray(load_pretrained(tmp_path / "saved")(input_ids, mask, pixel_values, grid_thw))
    np.testing.assert_allclose(again[valid], logits[valid], atol=1e-5, rtol=0)


def test_a_scanned_vision_tower_gives_the_same_features_and_gradients():
    """The tower's blocks stacked and scanned, DeepStack taps at blocks 0 and 2 of 4, remat full: features
    and every gradient equal the unrolled tower's with the same weights."""
    from rlanything_jax.core.models.qwen3_vl.config import VisionConfig
    from rlanything_jax.core.models.qwen3_vl.vision import VisionTower

    cfg = VisionConfig(depth=4, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
                       num_position_embeddings=64, deepstack_visual_indexes=(0, 2), patch_size=4)
    unrolled = VisionTower(cfg, rngs=nnx.Rngs(1))
    scanned = VisionTower(cfg, rngs=nnx.Rngs(2), scan_blocks=True)
    weights = _per_layer(nnx.state(unrolled, nnx.Param))
    for path, variable in nnx.to_flat_state(nnx.state(scanned, nnx.Param)):
        variable[...] = (np.stack([weights[per_layer_path(path, i)] for i in range(cfg.depth)])
                         if is_stacked_path(path) else weights[path])
    layout = unrolled.layout([(1, 8, 12), (1, 4, 6)], 128)
    pixels = jnp.asarray(np.random.default_rng(2).standard_normal((128, cfg.patch_dim)), jnp.float32)
    results = []
    for tower in (unrolled, scanned):
        graphdef, params = nnx.split(tower)

        def loss(params, graphdef=graphdef):
            model = nnx.merge(graphdef, params)
            embeddings, deepstack = model(pixels, layout, "full")
            return jnp.sum(embeddings ** 2) + jnp.sum(jnp.sin(deepstack)), (embeddings, deepstack)

        (_, features), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        results.append((features, _per_layer(grads)))
    (features, grads), (scanned_features, scanned_grads) = results
    for ours, theirs in zip(scanned_features, features):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-5, rtol=0)
    assert scanned_grads.keys() == grads.keys()
    for path, grad in grads.items():   # float32 sums over 128 patches in another order: 1e-4
        np.testing.assert_allclose(scanned_grads[path], grad, atol=1e-4, rtol=1e-4, err_msg=str(path))


def test_paper_configs_scan_and_checkpoints_do_not_record_it():
    from rlanything_jax.system.config import ROOT, load_config

    for config in ("alfworld.py:paper", "coding.py:paper", "osworld.py:paper"):
        models = load_config(str(ROOT / "configs" / config)).model
        assert models.policy.scan_layers and models.reward.scan_layers and models.environment.scan_layers, config
    assert not load_config(str(ROOT / "configs/osworld.py:cpu")).model.policy.scan_layers
    cfg = DecoderConfig(model_type="qwen3", vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1,
                        num_heads=1, num_kv_heads=1, head_dim=8)
    assert dataclasses.replace(cfg, scan_layers=True).to_hf() == cfg.to_hf()
