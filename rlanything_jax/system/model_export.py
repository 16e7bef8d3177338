"""Writing a run's trained model as a Hugging Face directory: the library behind
`python -m rlanything_jax.export` (its docstring says what is written) and `loop.export_at_end`."""


from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from rlanything_jax.core.checkpoint import SystemCheckpointer, abstract_like
from rlanything_jax.core.models.lora import save_peft_adapters
from rlanything_jax.core.rl.train_state import sampler_weights
from rlanything_jax.system import assemble
from rlanything_jax.system.config import run_config

# What the exported directory takes from the model the run started from (weights and config.json are new).
_WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.gguf", "config.json")


def run_config_of(workdir: Path):
    path = workdir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"--workdir: no {path} (a run's workdir has one)")
    return run_config(json.loads(path.read_text()))


def _no_corpus():
    raise FileNotFoundError("the run's scratch model directory is missing from its workdir")


def build_models(cfg, workdir: Path) -> dict:
    """{role: (model, a fresh train state, model directory)} as the run built them (under LoRA the state holds
    the frozen base and fresh adapters)."""
    meshes = assemble.build_meshes(cfg)
    built = {}
    for role in assemble.ROLES:
        directory = assemble.model_dir(cfg, role, workdir, _no_corpus)
        model, tokenizer = assemble.load_model(cfg, role, directory, meshes.learner)
        learner = assemble.learner_for(cfg, role, model, tokenizer, meshes.learner)
        built[role] = (model, learner.fresh_state(nnx.state(model, nnx.Param)), directory)
    return built


def restore_models(cfg, workdir: Path, step: int | None = None) -> tuple[int, dict]:
    """(the checkpoint's step, {role: (model with the checkpoint's weights, train state, model directory)})."""
    built = build_models(cfg, workdir)
    checkpointer = SystemCheckpointer(workdir / "checkpoints", async_save=False)
    try:
        # A checkpoint holds what was trained: under LoRA the adapters, not the base (`run._checkpointed`).
        restored = checkpointer.restore_latest(
            abstract_like({role: state.replace(base=None) for role, (_, state, _) in built.items()}), step=step)
    finally:
        checkpointer.close()
    if restored is None:
        raise FileNotFoundError(f"--workdir: no readable checkpoint{'' if step is None else f' of step {step}'} "
                                f"in {workdir / 'checkpoints'}")
    out = {}
    for role, (model, fresh, directory) in built.items():
        state = restored.arrays[role].replace(base=fresh.base)
        nnx.update(model, sampler_weights(state))   # under LoRA: the base with the adapters merged
        out[role] = (model, state, directory)
    return restored.step, out


def export_model(model, state, source_dir: Path, out: Path, dtype: str | None = None, lora_config=None,
                 base_model: str = "") -> str:
    """Writes `model` (with `state`'s weights: the master copy when there is one; under LoRA the merged model
    and the adapters in PEFT's format in `out/adapter`) and the source directory's tokenizer and chat
    template into `out`; returns the dtype written."""
    from rlanything_jax.core.models import save_pretrained

    if state.base is not None:   # LoRA: the merged model (restore_models merged it) and the PEFT adapters
        save_peft_adapters(state.params, lora_config, out / "adapter", base_model=base_model)
    elif state.master is not None and dtype in (None, "float32"):
        nnx.update(model, jax.tree.map(lambda p: p.astype(jnp.float32), state.master))
        dtype = "float32"
    out.mkdir(parents=True, exist_ok=True)
    save_pretrained(model, out, dtype=dtype)
    for path in sorted(Path(source_dir).iterdir()):
        if path.is_file() and not any(path.match(pattern) for pattern in _WEIGHT_FILES):
            shutil.copy(path, out / path.name)
    return dtype or str(jax.tree.leaves(nnx.state(model, nnx.Param))[0].dtype)


def export(workdir: str | Path, role: str, out: str | Path, step: int | None = None,
           dtype: str | None = None) -> dict:
    workdir = Path(workdir).expanduser().resolve()
    if role not in assemble.ROLES:
        raise ValueError(f"--role must be one of {', '.join(assemble.ROLES)}")
    cfg = run_config_of(workdir)
    restored_step, models = restore_models(cfg, workdir, step)
    model, state, directory = models[role]
    written = export_model(model, state, directory, Path(out), dtype, getattr(cfg.train, role).lora,
                           getattr(cfg.model, role).path)
    return {"out": str(Path(out).resolve()), "role": role, "step": restored_step, "dtype": written}
