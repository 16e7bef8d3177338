"""A role's model architecture without its weights, and its abstract parameters.

The planner never loads a checkpoint. A local Hugging Face directory gives its `config.json`, read by its
family (`models.families`, by `model_type`); "scratch" and "scratch_vl" are built from the config's
`model.scratch` (`families.SCRATCH_MODELS`); a model whose weights are not on this
machine (the paper configs' `checkpoints/...`) is looked up by its directory's name in
`models.released_configs.KNOWN_ARCHITECTURES`, the released `config.json` fields of the models the paper configs name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from flax import nnx

from rlanything_jax.core.models import families
from rlanything_jax.core.models.family import ModelFamily, VisionPlan
from rlanything_jax.core.models.hf_checkpoint import read_hf_config
from rlanything_jax.core.models.model_config import DecoderConfig
from rlanything_jax.core.models.registry import PACKAGE_PREFIX
from rlanything_jax.core.models.released_configs import KNOWN_ARCHITECTURES
from rlanything_jax.core.models.scratch import ScratchArchitecture

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One model's shapes: its family's `config`; `text` is its decoder's, `vision` its vision part's plan (None
    for a text model)."""

    name: str        # the config's model path
    source: str      # where the shapes came from, for the report
    family: ModelFamily
    config: Any

    @property
    def text(self) -> DecoderConfig:
        return self.family.text_config(self.config)

    @property
    def vision(self) -> VisionPlan | None:
        return self.family.vision_plan(self.config)

    def with_layers(self, num_layers: int) -> Architecture:
        """The same model with `num_layers` decoder layers (the planner compiles a few and extrapolates)."""
        return self._with_text(num_layers=num_layers)

    def with_scan(self, scan_layers: bool) -> Architecture:
        """The same model with its layers stacked and scanned, or unrolled (`DecoderConfig.scan_layers`)."""
        return self._with_text(scan_layers=scan_layers)

    def _with_text(self, **changes) -> Architecture:
        text = dataclasses.replace(self.text, **changes)
        return dataclasses.replace(self, config=self.family.with_text(self.config, text))


def architecture_from_hf(name: str, source: str, hf: dict) -> Architecture:
    family = families.family_for_type(hf.get("model_type"))
    return Architecture(name, source, family, family.read_config(hf))


def _scratch(path: str, arch: ScratchArchitecture) -> Architecture:
    family, config_of = families.SCRATCH_MODELS[path]
    source = "config model.scratch" + ("" if family.vision_plan(config_of(arch)) is None else f" ({family.name})")
    return Architecture(path, source, family, config_of(arch))


def role_architecture(path: str, scratch: ScratchArchitecture, scan_layers: bool = False) -> Architecture:
    """The architecture of the model at a config's model path (its layers scanned as the config says);
    ValueError (one line) when none is known."""
    return _architecture(path, scratch).with_scan(scan_layers)


def _architecture(path: str, scratch: ScratchArchitecture) -> Architecture:
    if path in families.SCRATCH_MODELS:
        return _scratch(path, scratch)
    local = Path(path).expanduser()
    if (local / "config.json").is_file():
        return architecture_from_hf(path, str(local / "config.json"), read_hf_config(local))
    name = path[len(PACKAGE_PREFIX):] if path.startswith(PACKAGE_PREFIX) else local.name
    known = KNOWN_ARCHITECTURES.get(name.lower())
    if known is None:
        raise ValueError(f"model path {path!r}: no config.json there and no known architecture named "
                         f"{name.lower()!r} (known: {', '.join(sorted(KNOWN_ARCHITECTURES))})")
    return architecture_from_hf(path, f"known architecture {name.lower()} (core/models/released_configs.py)", known)


def abstract_model(arch: Architecture, dtype: str, compute_dtype: str) -> tuple[nnx.GraphDef, nnx.State]:
    """The model's graph and its parameters as ShapeDtypeStructs (`nnx.eval_shape`: nothing is allocated)."""
    kwargs = dict(dtype=_DTYPES[compute_dtype], param_dtype=_DTYPES[dtype])
    return nnx.split(nnx.eval_shape(lambda: arch.family.build(arch.config, rngs=nnx.Rngs(0), **kwargs)))
