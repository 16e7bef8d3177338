"""Model families other than the text decoder, by Hugging Face `model_type`: how their checkpoints load and save.

`hf_io.load_pretrained` and `save_pretrained` read a `Decoder` themselves and hand any family named here
to its module, which provides `load(hf, hf_dir, param_dtype, compute_dtype, mesh, rules, attention,
scan_layers)`, `save(model, out_dir, dtype, max_shard_bytes)` and `owns(model)`. Modules are named, not
imported, here: a family's module builds on `hf_io`, so the import runs one way (family -> hf_io). A new
family is a new package plus one `register_family` call.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_FAMILY_MODULES: dict[str, str] = {"qwen3_vl": "rlanything_jax.models.qwen3_vl.weights"}


def register_family(model_type: str, module: str) -> None:
    """Loads and saves checkpoints of `model_type` with the module named `module` (see the module doc)."""
    _FAMILY_MODULES[model_type] = module


def family_for_type(model_type: str | None) -> ModuleType | None:
    """The module of a registered family, or None for a text decoder."""
    name = _FAMILY_MODULES.get(model_type or "")
    return None if name is None else importlib.import_module(name)


def family_of(model) -> ModuleType | None:
    """The module of the registered family whose model this is, or None for a text decoder."""
    for name in _FAMILY_MODULES.values():
        module = importlib.import_module(name)
        if module.owns(model):
            return module
    return None
