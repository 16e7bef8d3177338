"""TrainConfig: the reference's defaults, each field's rule as a ConfigError naming it, and a Learner built
from a mapping (as system/assemble.py and system/run.py still pass)."""

import dataclasses

import jax
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.phase import Learner
from rlanything_jax.core.rl.train_config import TrainConfig
from rlanything_jax.core.rl.train_state import learning_rate_schedule, make_optimizer
from rlanything_jax.core.validation import ConfigError

CFG = DecoderConfig(model_type="qwen3", vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=1,
                    num_heads=2, num_kv_heads=1, head_dim=8)


def test_defaults_are_the_references():
    """ALGORITHM.md 2.3: AdamW lr 1e-6, betas (0.9, 0.999), eps 1e-8, no decay, clip 1.0, eps 0.2, beta 0.01,
    a constant learning rate, one epoch, sequence-mean aggregation, over-long prompts dropped."""
    cfg = TrainConfig()
    assert (cfg.learning_rate, cfg.adam_b1, cfg.adam_b2, cfg.adam_eps, cfg.weight_decay) == (1e-6, 0.9, 0.999, 1e-8, 0)
    assert (cfg.max_grad_norm, cfg.clip_eps, cfg.kl_beta, cfg.ppo_epochs) == (1.0, 0.2, 0.01, 1)
    assert (cfg.schedule, cfg.aggregation, cfg.overlong_prompt) == ("constant", "sequence_mean", "drop")


@pytest.mark.parametrize("field,value", [
    ("learning_rate", 0.0), ("adam_b1", 1.0), ("adam_b2", -0.1), ("adam_eps", 0), ("weight_decay", -1e-3),
    ("max_grad_norm", float("nan")), ("clip_eps", 1.0), ("clip_eps", 0.0), ("kl_beta", -0.01),
    ("updates_per_step", 0), ("ppo_epochs", 1.5), ("micro_batch_size", True), ("max_prompt_tokens", -1),
    ("max_response_tokens", 0), ("schedule", "cosine"), ("warmup_steps", -1), ("decay_steps", 0),
    ("min_lr_ratio", 1.5), ("aggregation", "sum"), ("reset_optimizer_each_step", 1),
    ("overlong_prompt", "keep"), ("append_eos", "yes"), ("pack_turns", None),
])
def test_an_invalid_field_names_its_key(field, value):
    with pytest.raises(ConfigError, match=rf"^config\.{field}: ") as error:
        TrainConfig(**{field: value})
    assert error.value.key == field


def test_edge_values_are_accepted():
    TrainConfig(adam_b1=0.0, weight_decay=0.0, max_grad_norm=0.0, kl_beta=0.0, warmup_steps=0, min_lr_ratio=1.0,
                schedule="warmup_cosine", aggregation="token_mean", overlong_prompt="truncate_left")


def test_a_mapping_becomes_a_train_config():
    assert TrainConfig.of({"learning_rate": 1e-3}) == TrainConfig(learning_rate=1e-3)
    cfg = TrainConfig(kl_beta=0.0)
    assert TrainConfig.of(cfg) is cfg
    with pytest.raises(TypeError, match="learnig_rate"):
        TrainConfig.of({"learnig_rate": 1e-3})   # a misspelt key is no silent default


def test_the_schedule_and_optimizer_follow_the_config():
    warm = TrainConfig(learning_rate=1e-3, schedule="warmup_cosine", warmup_steps=10, decay_steps=110,
                       min_lr_ratio=0.1)
    schedule = learning_rate_schedule(warm)
    assert float(schedule(0)) == 0.0 and float(schedule(10)) == pytest.approx(1e-3)
    assert float(schedule(110)) == pytest.approx(1e-4)
    assert float(learning_rate_schedule(TrainConfig(learning_rate=1e-3))(500)) == pytest.approx(1e-3)
    # max_grad_norm 0: plain AdamW, whose first update of a gradient g is -lr * sign(g) (up to eps)
    params = {"w": jax.numpy.array([2.0, -3.0])}
    tx = make_optimizer({"learning_rate": 0.5, "max_grad_norm": 0.0})
    updates, _ = tx.update({"w": jax.numpy.array([4.0, -1.0])}, tx.init(params), params)
    assert updates["w"].tolist() == pytest.approx([-0.5, 0.5], abs=1e-5)   # float32 bias correction
    clipped = make_optimizer({"learning_rate": 0.5, "max_grad_norm": 1.0})
    assert len(clipped.init(params)) == 2   # global-norm clipping, then AdamW


def test_learner_takes_a_mapping_and_replace_rebuilds_the_optimizer():
    graphdef, _ = nnx.split(Decoder(CFG, rngs=nnx.Rngs(0)))
    mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    learner = Learner(graphdef=graphdef, train_config={"learning_rate": 1e-3, "micro_batch_size": 4}, mesh=mesh,
                      eos_id=2, pad_id=0)
    assert learner.train_config == TrainConfig(learning_rate=1e-3, micro_batch_size=4)
    sft = dataclasses.replace(learner, train_config={"learning_rate": 0.25, "max_grad_norm": 0.0}, compiled={})
    assert isinstance(sft.train_config, TrainConfig) and sft.train_config.learning_rate == 0.25
    params = {"w": jax.numpy.array([1.0])}
    updates, _ = sft.tx.update({"w": jax.numpy.array([3.0])}, sft.tx.init(params), params)
    assert float(updates["w"][0]) == pytest.approx(-0.25, abs=1e-5)
    with pytest.raises(ConfigError, match=r"config\.clip_eps"):
        Learner(graphdef=graphdef, train_config={"clip_eps": 2.0}, mesh=mesh, eos_id=2, pad_id=0)
