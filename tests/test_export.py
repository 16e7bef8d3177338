"""`python -m rlanything_jax.export`: a smoke run's checkpoint (the smoke config's scratch models, their
weights moved as training moves them) as a Hugging Face directory that transformers loads with our
model's logits, for a text decoder and Qwen3-VL, scanned layers and bfloat16 with a float32 master copy."""

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from rlanything_jax import export
from rlanything_jax.core.checkpoint import SystemCheckpointer
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.system import assemble, model_export
from rlanything_jax.system.config import load_config

pytestmark = pytest.mark.slow   # builds, checkpoints and reloads two small models per case (seconds each)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ["You are in the middle of a room. Your task is to: put a clean apple in fridge.",
          "go to fridge 1", "open fridge 1", "take apple 1 from countertop 1", "> look"] * 4
STEP = 3


def _moved(tree, seed):
    """Weights as a few training steps leave them: each moved by a small random amount."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    moved = [x + (0.05 * jax.random.normal(k, x.shape, jnp.float32)).astype(x.dtype) for x, k in zip(leaves, keys)]
    return jax.tree.unflatten(treedef, moved)


def _trained_workdir(tmp_path, *overrides):
    """A run's workdir as `main` leaves it: config.json, its scratch models, and a checkpoint of step STEP."""
    workdir = tmp_path / "run"
    cfg = load_config(str(ROOT / "configs/alfworld.py:smoke"), [f"workdir={workdir}", *overrides])
    workdir.mkdir()
    (workdir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2, default=str))
    for role in assemble.ROLES:
        assemble.model_dir(cfg, role, workdir, lambda: CORPUS)
    built = model_export.build_models(cfg, workdir)
    states = {}
    for index, (role, (_, state, _)) in enumerate(built.items()):
        if state.master is not None:   # the optimizer moves the master copy; the params are its cast
            master = _moved(state.master, index)
            state = state.replace(master=master, params=jax.tree.map(lambda m, p: m.astype(p.dtype), master,
                                                                     state.params))
        else:
            state = state.replace(params=_moved(state.params, index))
        states[role] = state
    checkpointer = SystemCheckpointer(workdir / "checkpoints", async_save=False)
    checkpointer.save(STEP, states, {"pool": {}, "step": STEP})
    checkpointer.close()
    return workdir, cfg, states


def _our_logits(cfg, role, directory, state, batch):
    """Our model with the checkpoint's weights in float32 (the master copy where there is one)."""
    model = load_pretrained(directory, dtype="float32", compute_dtype="float32",
                            scan_layers=getattr(cfg.model, role).scan_layers)
    weights = state.master if state.master is not None else state.params
    nnx.update(model, jax.tree.map(lambda x: x.astype(jnp.float32), weights))
    return np.asarray(model(*batch))


def _check_export(tmp_path, capsys, path, overrides, role="policy"):
    workdir, cfg, states = _trained_workdir(tmp_path, f"model.{role}.path={path}", *overrides)
    out = tmp_path / "hf"
    assert export.main([f"--workdir={workdir}", f"--role={role}", f"--out={out}"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["step"] == STEP and summary["role"] == role and summary["dtype"] == "float32"
    source = assemble.model_dir(cfg, role, workdir, None)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template and tokenizer.chat_template == AutoTokenizer.from_pretrained(source).chat_template
    assert tokenizer.apply_chat_template([{"role": "user", "content": "go to fridge 1"}], tokenize=False)
    return out, source, cfg, states[role]


def _torch_logits(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))
    return out.logits.float().numpy()


@pytest.mark.parametrize("overrides", [
    (),
    ("model.policy.scan_layers=true",),
    ("model.policy.dtype=bfloat16", "train.policy.master_copy=true"),
], ids=["float32", "scanned", "bfloat16_master"])
def test_text_decoder_export_loads_in_transformers_with_our_logits(overrides, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    out, source, cfg, state = _check_export(tmp_path, capsys, "scratch", overrides)
    reloaded = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32, attn_implementation="eager")
    vocab = reloaded.config.vocab_size
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, size=(2, 9)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, :3] = 0   # left padding
    ours = _our_logits(cfg, "policy", source, state, (ids, mask))
    theirs = _torch_logits(reloaded, ids, mask)
    valid = mask.astype(bool)
    assert np.abs(theirs[valid]).max() > 0.1
    np.testing.assert_allclose(ours[valid], theirs[valid], atol=1e-4, rtol=0)
    # the checkpoint's weights, not the model the run started from
    initial = np.asarray(load_pretrained(source, dtype="float32", compute_dtype="float32")(ids, mask))
    assert np.abs(initial[valid] - theirs[valid]).max() > 1e-3


def test_qwen3_vl_export_loads_in_transformers_with_our_logits(tmp_path, capsys):
    from transformers import Qwen3VLForConditionalGeneration

    out, source, cfg, state = _check_export(tmp_path, capsys, "scratch_vl", ())
    reloaded = Qwen3VLForConditionalGeneration.from_pretrained(out, torch_dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    vocab = reloaded.config.text_config.vocab_size
    ids = np.random.default_rng(1).integers(0, vocab - 16, size=(2, 7)).astype(np.int32)
    mask = np.ones_like(ids)
    ours = _our_logits(cfg, "policy", source, state, (ids, mask))
    theirs = _torch_logits(reloaded, ids, mask)
    assert np.abs(theirs).max() > 0.1
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)


def test_a_missing_checkpoint_is_a_one_line_error(tmp_path, capsys):
    assert export.main([f"--workdir={tmp_path}", "--role=policy", f"--out={tmp_path / 'hf'}"]) == 2
    assert "config.json" in capsys.readouterr().err
