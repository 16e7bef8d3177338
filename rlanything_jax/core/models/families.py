"""The model registry: each family's `ModelFamily` (config reader, loader, saver, planner shapes) by Hugging Face
`model_type`, and the families a config's "scratch" model paths build.

`hf_io.load_pretrained` / `save_pretrained` and `system/planning/architectures` look families up here; a
`model_type` not registered is read as a text decoder (`DecoderConfig.from_hf` names the types it knows).
A new family is a package defining its `ModelFamily` plus one `register_family` call. The imports run one
way: this module -> each family's package -> `models.hf_checkpoint`; `hf_io` -> this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from rlanything_jax.core.models.decoder_family import DECODER
from rlanything_jax.core.models.family import ModelFamily
from rlanything_jax.core.models.qwen3_vl.family import QWEN3_VL, scratch_vl_config
from rlanything_jax.core.models.qwen3_vl.scratch import build_scratch_vl_model_dir
from rlanything_jax.core.models.scratch import ScratchArchitecture, build_scratch_model_dir, decoder_config

_FAMILIES: dict[str, ModelFamily] = {"qwen3_vl": QWEN3_VL}

# A config's model path "scratch..." -> the family and config of a small random model of `model.scratch`'s shape.
SCRATCH_MODELS: dict[str, tuple[ModelFamily, Callable[[ScratchArchitecture], Any]]] = {
    "scratch": (DECODER, lambda arch: decoder_config(arch, arch.vocab_size)),
    "scratch_vl": (QWEN3_VL, scratch_vl_config),
}
# ... and what builds its directory (a tokenizer fitted to a corpus, random weights): (out, corpus, arch, seed=).
_SCRATCH_BUILDERS: dict[str, Callable[..., Path]] = {
    "scratch": build_scratch_model_dir,
    "scratch_vl": build_scratch_vl_model_dir,
}


def build_scratch_model(path: str, out: str | Path, corpus: Iterable[str], arch: ScratchArchitecture,
                        seed: int = 0) -> Path:
    """Builds the small random model a config's model path `path` ("scratch", "scratch_vl") names in `out`."""
    if path not in _SCRATCH_BUILDERS:
        raise ValueError(f"unknown scratch model {path!r}; known: {', '.join(sorted(_SCRATCH_BUILDERS))}")
    return _SCRATCH_BUILDERS[path](out, corpus, arch, seed=seed)


def register_family(model_type: str, family: ModelFamily) -> None:
    """Loads, saves and plans checkpoints whose config.json says `model_type` with `family`."""
    _FAMILIES[model_type] = family


def family_for_type(model_type: str | None) -> ModelFamily:
    """The registered family of a `model_type`; the text decoder's for any other."""
    return _FAMILIES.get(model_type or "", DECODER)


def family_of(model: Any) -> ModelFamily:
    """The registered family whose model this is (a family's model may subclass the decoder: they come first)."""
    return next((family for family in _FAMILIES.values() if family.owns(model)), DECODER)
