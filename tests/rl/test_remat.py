"""The train config's remat policy: the same loss and gradients under none, dots and full, and a bad value named."""

import jax
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.core.rl.train_state import make_optimizer
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, _micro_objective
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import DEFAULT_CONFIG, load_config

CFG = DecoderConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def _batch(n: int = 4, length: int = 12) -> TrainBatch:
    rng = np.random.RandomState(0)
    ids = rng.randint(0, CFG.vocab_size, (n, length)).astype(np.int32)
    mask = np.ones((n, length), np.int32)
    mask[1, :3] = 0   # a left-padded row
    window = 6        # a loss window shorter than the rows: the final layer's query_window path
    return TrainBatch(input_ids=ids, attention_mask=mask, targets=np.roll(ids, -1, axis=1)[:, -window:],
                      loss_mask=np.ones((n, window), np.float32), old_logp=np.full((n, window), -4.0, np.float32),
                      advantages=rng.randn(n).astype(np.float32))


def _loss_and_grads(remat: str):
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    spec = TrainSpec(graphdef, make_optimizer({}), remat=remat)
    grad_fn = jax.value_and_grad(lambda p, b: _micro_objective(p, b, spec)[0])
    return jax.jit(grad_fn)(params, _batch())


def test_remat_policies_give_the_same_loss_and_gradients():
    loss, grads = _loss_and_grads("none")
    for remat in ("dots", "full"):
        other_loss, other_grads = _loss_and_grads(remat)
        np.testing.assert_allclose(float(other_loss), float(loss), rtol=1e-5, atol=1e-5)
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(other_grads)):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-5)


def test_checkpointing_keeps_fewer_residuals():
    """The policy reaches the differentiated forward: what the backward pass keeps (the residuals that
    `jax.vjp`'s backward function holds) shrinks from "none" to "dots" to "full"."""
    wide = DecoderConfig(model_type="qwen3", vocab_size=64, hidden_size=128, intermediate_size=512, num_layers=4,
                         num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True)
    graphdef, params = nnx.split(Decoder(wide, rngs=nnx.Rngs(0)))
    batch = _batch(n=8, length=256)

    def residual_bytes(remat):
        spec = TrainSpec(graphdef, make_optimizer({}), remat=remat)
        _, backward = jax.vjp(lambda p: _micro_objective(p, batch, spec)[0], params)
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(backward))

    none, dots, full = (residual_bytes(remat) for remat in ("none", "dots", "full"))
    assert full < dots < none and full < 0.2 * none


def test_default_is_none_and_unknown_values_are_named():
    assert TrainConfig().remat == "none"
    assert load_config(DEFAULT_CONFIG).train.policy.remat == "none"
    assert load_config(DEFAULT_CONFIG, ["train.reward.remat=full"]).train.reward.remat == "full"
    with pytest.raises(ConfigError, match=r"^config\.train\.policy\.remat: must be one of none, dots, full"):
        load_config(DEFAULT_CONFIG, ["train.policy.remat=everything"])


def test_the_vision_tower_is_checkpointed_too():
    """A Qwen3-VL tower's blocks follow the same policy: equal gradients, fewer residuals under "full"."""
    import jax.numpy as jnp

    from rlanything_jax.core.models.qwen3_vl.config import VisionConfig
    from rlanything_jax.core.models.qwen3_vl.vision import VisionTower

    cfg = VisionConfig(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
                       num_position_embeddings=64, deepstack_visual_indexes=(1,), patch_size=4)
    graphdef, params = nnx.split(VisionTower(cfg, rngs=nnx.Rngs(1)))
    layout = VisionTower(cfg, rngs=nnx.Rngs(1)).layout([(1, 8, 12), (1, 4, 6)], 128)
    pixels = jnp.asarray(np.random.default_rng(2).standard_normal((128, cfg.patch_dim)), jnp.float32)

    def loss(params, remat):
        tower = nnx.merge(graphdef, params)
        embeddings, deepstack = tower(pixels, layout, remat)
        return jnp.sum(embeddings ** 2) + jnp.sum(jnp.sin(deepstack))

    results = {remat: jax.value_and_grad(loss)(params, remat) for remat in ("none", "full")}
    np.testing.assert_allclose(float(results["full"][0]), float(results["none"][0]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(results["none"][1]), jax.tree.leaves(results["full"][1])):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-5)

    def residual_bytes(remat):
        _, backward = jax.vjp(lambda p: loss(p, remat), params)
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(backward))

    assert residual_bytes("full") < 0.5 * residual_bytes("none")
