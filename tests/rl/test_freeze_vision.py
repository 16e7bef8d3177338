"""`model.freeze_vision` end to end: the typed key reaches the learner (`assemble.learner_for`), whose phase on
examples with screenshots leaves the vision tower as loaded when it is set, and trains it by default."""

import types

import jax
import numpy as np
import pytest
from flax import nnx

from rlanything_jax.core import sharding
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.rl.phase import train_phase
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system import assemble
from rlanything_jax.system.config import DEFAULT_CONFIG, load_config
from tests.models.qwen3_vl import vl_reference
from tests.models.qwen3_vl.vl_reference import IMAGE

EOS = 7
TRAIN = {"learning_rate": 3e-3, "updates_per_step": 1, "micro_batch_size": 4, "max_prompt_tokens": 512,
         "max_response_tokens": 16, "kl_beta": 0.0}


def test_the_key_is_typed_and_off_by_default():
    assert load_config(DEFAULT_CONFIG).model.freeze_vision is False
    assert load_config(DEFAULT_CONFIG, ["model.freeze_vision=True"]).model.freeze_vision is True
    with pytest.raises(ConfigError, match="config.model.freeze_vision"):
        load_config(DEFAULT_CONFIG, ["model.freeze_vision=3"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_vl")
    vl_reference.build("tied-gqa4-deepstack1", path, seed=31)
    return load_pretrained(path)


@pytest.mark.slow   # compiles a train step of a tiny Qwen3-VL twice
@pytest.mark.parametrize("frozen", [False, True])
def test_a_phase_freezes_the_tower_only_when_configured(tiny, frozen):
    cfg = load_config(DEFAULT_CONFIG, [f"model.freeze_vision={frozen}"] +
                      [f"train.policy.{key}={value}" for key, value in TRAIN.items()])
    mesh = sharding.build_mesh({"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    tokens = types.SimpleNamespace(eos_id=EOS, pad_id=0, stop_token_ids=(EOS,))   # the ids learner_for reads
    learner = assemble.learner_for(cfg, "policy", tiny, tokens, mesh)
    assert learner.images.freeze_vision is frozen and learner.images.image_token_id == IMAGE
    params = nnx.state(tiny, nnx.Param)
    state = learner.fresh_state(jax.tree.map(np.array, params))
    state, phase = train_phase(learner, state, vl_reference.screenshot_examples(EOS), seed=0)
    assert phase["policy/updates"] == 1 and np.isfinite(phase["policy/loss"])

    def changed(part):
        return [not np.array_equal(np.asarray(a), np.asarray(b))
                for a, b in zip(jax.tree.leaves(params[part]), jax.tree.leaves(state.params[part]))]

    assert all(changed("visual")) is not frozen and any(changed("visual")) is not frozen
    assert any(changed("layers"))   # the text decoder trains either way
    # Frozen: the step reads features computed outside it, so it compiled without the tower's pixels.
    assert any(key[0] == "vision_features" for key in learner.compiled) is frozen
