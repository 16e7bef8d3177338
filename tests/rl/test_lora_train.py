"""LoRA in the train step: only the adapters learn, the base stays bit-identical, roles can share one base."""

import json
import math

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from rlanything_jax.core import sharding
from rlanything_jax.core.checkpoint import SystemCheckpointer, abstract_like
from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.models.lora import LoRAConfig
from rlanything_jax.core.rl.phase import Learner
from rlanything_jax.core.rl.train_state import sampler_weights
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, jit_train_step, token_logprobs
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import load_config

CFG = DecoderConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=8, num_kv_heads=4, head_dim=8, qk_norm=True)
LORA = dict(learning_rate=1e-2, max_grad_norm=1.0, kl_beta=0.0, lora=dict(rank=4, alpha=8.0))


def _batch(n: int = 8, length: int = 12, seed: int = 0) -> TrainBatch:
    """Rows whose every response token has advantage +1, sampled (old_logp) at half the initial model's
    probability: the clipped loss falls as their log-probabilities rise."""
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, CFG.vocab_size, (n, length)).astype(np.int32)
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    mask, targets = np.ones((n, length), np.int32), np.roll(ids, -1, axis=1)
    old_logp = np.asarray(token_logprobs(graphdef, params, ids, mask, targets)) + np.log(2.0)
    return TrainBatch(input_ids=ids, attention_mask=mask, targets=targets,
                      loss_mask=np.tile(np.arange(length) >= 6, (n, 1)).astype(np.float32),
                      old_logp=old_logp.astype(np.float32), advantages=np.ones(n, np.float32))


def _learner(mesh, **overrides) -> tuple[Learner, nnx.State]:
    graphdef, params = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    learner = Learner(graphdef=graphdef, train_config=dict(LORA, **overrides), mesh=mesh, eos_id=1, pad_id=0)
    return learner, params


def _step(learner: Learner, state, batch):
    return jit_train_step(TrainSpec(learner.train_graphdef, learner.tx, kl_beta=0.0), state, batch, learner.mesh)


def _host(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_lora_steps_lower_the_loss_and_leave_the_base_bit_identical():
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    learner, params = _learner(mesh)
    state = learner.fresh_state(params, seed=1)
    base_before, adapters_before = _host(state.base), _host(state.params)
    # The optimizer holds moments of the adapters only (AdamW: two per adapter), not of the base.
    adapter_size = sum(x.size for x in adapters_before)
    assert sum(x.size for x in jax.tree.leaves(state.opt_state) if x.ndim) == 2 * adapter_size
    assert adapter_size < sum(x.size for x in base_before) / 4
    batch = _batch()
    step = _step(learner, state, batch)
    losses = []
    for _ in range(4):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < losses[0] - 0.05, losses
    for before, after in zip(base_before, _host(state.base)):
        np.testing.assert_array_equal(before, after)
    assert any(np.abs(b - a).max() > 0 for b, a in zip(adapters_before, _host(state.params)))
    # Adapters are sharded like their kernel's axes, with the rank axis unsharded.
    gate = state.params["layers"][0]["mlp"]["gate_proj"]
    assert state.base["layers"][0]["mlp"]["gate_proj"]["kernel"][...].sharding.spec == P("fsdp", "tensor")
    assert gate["lora_a"][...].sharding.spec == P("fsdp", None)
    assert gate["lora_b"][...].sharding.spec == P(None, "tensor")
    # The sampler's weights (the adapters merged into the base) give the adapted model's logits.
    ids = batch.input_ids[:2]
    adapted = nnx.merge(learner.train_graphdef, state.base, state.params)(ids)
    merged = nnx.merge(learner.graphdef, sampler_weights(state))(ids)
    np.testing.assert_allclose(np.asarray(merged), np.asarray(adapted), atol=1e-5, rtol=0)


def test_two_roles_share_one_base_each_with_its_own_adapters():
    mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    policy_learner, params = _learner(mesh)
    reward_learner, _ = _learner(mesh, learning_rate=3e-3)
    policy = policy_learner.fresh_state(params, seed=1)
    reward = reward_learner.fresh_state(policy.base, seed=2)
    pairs = list(zip(jax.tree.leaves(policy.base), jax.tree.leaves(reward.base)))
    assert all(a is b for a, b in pairs)          # one copy of the base: the very same arrays
    batch = _batch()
    for _ in range(2):   # each role's step donates its own adapters and optimizer state, never the base
        policy, _ = _step(policy_learner, policy, batch)(policy, batch)
        reward, _ = _step(reward_learner, reward, _batch(seed=1))(reward, _batch(seed=1))
    assert all(not a.is_deleted() and a is b for (a, _), b in zip(pairs, jax.tree.leaves(policy.base)))
    assert all(a is b for a, b in zip(jax.tree.leaves(policy.base), jax.tree.leaves(reward.base)))
    assert any(np.abs(a - b).max() > 0 for a, b in zip(_host(policy.params), _host(reward.params)))


def test_checkpoint_holds_adapters_only_and_resumes_to_the_same_step(tmp_path):
    mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    learner, params = _learner(mesh)
    state = learner.fresh_state(params, seed=1)
    batch = _batch()
    step = _step(learner, state, batch)
    state, _ = step(state, batch)
    checkpointer = SystemCheckpointer(tmp_path / "ckpt", async_save=False)
    checkpointer.save(1, {"policy": state.replace(base=None)})
    # The saved tree (orbax's metadata): adapters, their moments and the step count, no base kernel or norm.
    saved = json.loads((tmp_path / "ckpt" / "1" / "arrays" / "_METADATA").read_text())["tree_metadata"]
    sizes = [math.prod(leaf["value_metadata"]["write_shape"]) for leaf in saved.values()
             if "write_shape" in leaf["value_metadata"]]   # (None leaves have no shape)
    assert not any("kernel" in key or "scale" in key or "embed" in key for key in saved), sorted(saved)[:5]
    assert sum(sizes) == 3 * sum(x.size for x in jax.tree.leaves(state.params)) + 3   # + step and Adam's counts
    straight, _ = step(jax.tree.map(lambda x: x.copy(), state), batch)

    fresh_learner, fresh_params = _learner(mesh)
    fresh = fresh_learner.fresh_state(fresh_params, seed=1)
    restored = checkpointer.restore_latest(abstract_like({"policy": fresh.replace(base=None)}))
    checkpointer.close()
    resumed = restored.arrays["policy"].replace(base=fresh.base)
    resumed, _ = _step(fresh_learner, resumed, batch)(resumed, batch)
    for a, b in zip(_host((straight.params, straight.opt_state)), _host((resumed.params, resumed.opt_state))):
        np.testing.assert_array_equal(a, b)


def test_config_keys_and_the_shared_base_rule():
    cfg = load_config("configs/default.py:smoke", ["train.policy.lora.rank=8", "train.reward.lora.rank=2",
                                                   "train.reward.lora.targets=('q_proj','v_proj')"])
    assert cfg.train.policy.lora == LoRAConfig(rank=8) and not cfg.train.policy.lora.dropout
    assert cfg.train.reward.lora.targets == ("q_proj", "v_proj") and cfg.train.reward.lora.scale == 8.0
    assert not load_config("configs/default.py:smoke").train.policy.lora.enabled   # off by default
    with pytest.raises(ConfigError, match="train.policy.lora.rank"):
        load_config("configs/default.py:smoke", ["train.policy.lora.rank=-1"])
    with pytest.raises(ConfigError, match="model.reward.share_base"):   # scratch models are built per role
        load_config("configs/default.py:smoke", ["model.reward.share_base=true", "train.policy.lora.rank=8",
                                                 "train.reward.lora.rank=8"])
    shared = ["model.reward.share_base=true", "train.policy.lora.rank=8"]
    with pytest.raises(ConfigError, match="model.reward.share_base"):   # the reward model would train its base
        load_config("configs/alfworld.py:cpu", shared)
    assert load_config("configs/alfworld.py:cpu", shared + ["train.reward.lora.rank=8"]).model.reward.share_base


@pytest.mark.slow   # loads SmolLM2-135M and builds a run (about a minute on 2 cores)
def test_a_run_with_a_shared_base_holds_one_copy_of_it(smollm2_dir, tmp_path):
    from rlanything_jax.system.run import build_system  # noqa: PLC0415 - the whole run's machinery, for this test only

    path = str(smollm2_dir)
    cfg = load_config("configs/default.py:smoke", [
        f"model.policy.path={path}", f"model.reward.path={path}", "model.reward.share_base=true",
        "train.policy.lora.rank=4", "train.reward.lora.rank=2", f"workdir={tmp_path}"])
    system = build_system(cfg, tmp_path, log=lambda line: None)
    try:
        state = system.initial_state()
    finally:
        system.runner.close()
    policy_base, reward_base = jax.tree.leaves(state.policy.base), jax.tree.leaves(state.reward.base)
    assert len(policy_base) == len(reward_base) > 0 and all(a is b for a, b in zip(policy_base, reward_base))
    ranks = {x.shape[-1] for x in jax.tree.leaves(state.policy.params) if x.ndim == 2 and x.shape[-1] < 8}
    assert ranks == {4} and {x.shape[0] for x in jax.tree.leaves(state.reward.params) if x.shape[0] < 8} == {2}


def test_a_frozen_kl_reference_is_the_starting_adapters_on_the_same_base():
    mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    learner, params = _learner(mesh, kl_reference="initial", kl_beta=0.1)
    state = learner.fresh_state(params, seed=1)
    assert state.reference is not None and len(jax.tree.leaves(state.reference)) == len(jax.tree.leaves(state.params))
    batch = _batch()
    step = jit_train_step(TrainSpec(learner.train_graphdef, learner.tx, kl_beta=0.1), state, batch, mesh)
    kls = []
    for _ in range(3):
        state, metrics = step(state, batch)
        kls.append(float(metrics["kl"]))
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[-1] > 1e-6   # the adapters move away from where they began
