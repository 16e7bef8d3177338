"""LoRA adapters for any model built from `decoder.Projection`: y = x W + (alpha / rank) (x A) B.

Adapters attach to the projections named in `LoRAConfig.targets` (attention and MLP projections by their
logical names, q_proj ... down_proj). They are `LoRAParam` variables, so `nnx.split(model, LoRAParam, ...)`
separates the trainable adapters from the frozen base (nnx.Param), which keeps its own dtype. A is
[*in, rank] and B [rank, *out] (B starts at zero: a fresh adapter leaves the model as it is); their logical
axes are the kernel's input or output axes with an unsharded rank axis, so adapters are sharded like their
base kernel's axes (replicated where the kernel is). Stacked (scanned) layers carry a leading layers axis.

`merge_adapters` folds them into the base kernels (the sampler's weights at each swap; an export), and
`save_peft_adapters` writes them in PEFT's format (adapter_config.json + adapter_model.safetensors), which
`peft.PeftModel.from_pretrained` loads onto the transformers model.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from rlanything_jax.core import multihost
from rlanything_jax.core import validation as v
from rlanything_jax.core.models.decoder import Projection
from rlanything_jax.core.models.hf_io import hf_key_for, save_pretrained
from rlanything_jax.core.models.layer_stack import LAYERS_AXIS, per_layer_getters

ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
TARGETS = ATTENTION_TARGETS + MLP_TARGETS


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """A config's train.<role>.lora section. rank 0: no adapters (every parameter is trained)."""

    rank: int = 0
    alpha: float = 16.0
    # Dropout on the adapters' input. Only 0 is implemented (the train step draws no random numbers).
    dropout: float = 0.0
    targets: tuple[str, ...] = TARGETS

    def __post_init__(self):
        v.non_negative_int("rank", self.rank)
        v.positive("alpha", self.alpha)
        v.check("dropout", v.is_number(self.dropout) and self.dropout == 0,
                "must be 0 (adapter dropout is not implemented)", self.dropout)
        targets = tuple(self.targets)
        v.check("targets", bool(targets) and all(t in TARGETS for t in targets),
                f"must be a non-empty subset of {TARGETS}", self.targets)
        object.__setattr__(self, "targets", targets)

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @classmethod
    def of(cls, config: LoRAConfig | Mapping[str, Any]) -> LoRAConfig:
        return config if isinstance(config, LoRAConfig) else cls(**config)


class LoRAParam(nnx.Variable):
    """A trainable LoRA adapter matrix (A or B)."""


def _projections(model: nnx.Module, targets: tuple[str, ...]):
    for path, node in nnx.iter_graph(model):
        if isinstance(node, Projection) and path and path[-1] in targets:
            yield path, node


def add_adapters(model: nnx.Module, config: LoRAConfig, seed: int = 0) -> nnx.Module:
    """Attaches float32 adapters to `model`'s target projections (in place; returns it). A is drawn as PEFT
    draws it (uniform in +-1/sqrt(fan_in)), B is zero, so the model's outputs do not change."""
    key = jax.random.key(seed)
    found = 0
    for index, (_, proj) in enumerate(_projections(model, config.targets)):
        kernel = proj.kernel
        axes = tuple(kernel.get_metadata().get("logical_axes") or (None,) * kernel.ndim)
        lead = 1 if axes and axes[0] == LAYERS_AXIS else 0
        n_in = proj.num_in_dims
        in_shape, out_shape = kernel.shape[lead:lead + n_in], kernel.shape[lead + n_in:]
        bound = 1.0 / math.sqrt(math.prod(in_shape))
        a = jax.random.uniform(jax.random.fold_in(key, index), kernel.shape[:lead] + in_shape + (config.rank,),
                               jnp.float32, -bound, bound)
        b = jnp.zeros(kernel.shape[:lead] + (config.rank,) + out_shape, jnp.float32)
        sharding = getattr(kernel[...], "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding):   # the base axis' sharding, rank unsharded
            spec = tuple(sharding.spec) + (None,) * (kernel.ndim - len(sharding.spec))
            a = jax.device_put(a, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(
                *spec[:lead + n_in], None)))
            b = jax.device_put(b, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(
                *spec[:lead], None, *spec[lead + n_in:])))
        proj.lora_a = nnx.data(LoRAParam(a, logical_axes=axes[:lead + n_in] + (None,)))
        proj.lora_b = nnx.data(LoRAParam(b, logical_axes=axes[:lead] + (None,) + axes[lead + n_in:]))
        proj.lora_scale = config.scale
        found += 1
    if not found:
        raise ValueError(f"lora.targets {config.targets}: the model has no such projection")
    return model


def split_adapters(model: nnx.Module) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """(graphdef, adapters, base) of a model with adapters; `nnx.merge(graphdef, base, adapters)` rebuilds it."""
    graphdef, adapters, base = nnx.split(model, LoRAParam, ...)  # type: ignore[misc]  # nnx.split's variadic stub
    return graphdef, adapters, base


def lora_delta(a: jax.Array, b: jax.Array, lead: int) -> jax.Array:
    """A B as a kernel-shaped float32 update: a [*lead, *in, r], b [*lead, r, *out] -> [*lead, *in, *out]."""
    batch = tuple(range(lead))
    return jax.lax.dot_general(a.astype(jnp.float32), b.astype(jnp.float32),
                               (((a.ndim - 1,), (lead,)), (batch, batch)), preferred_element_type=jnp.float32)


def merge_adapters(base: nnx.State, adapters: nnx.State, scale: float) -> nnx.State:
    """The base parameters with each adapted kernel replaced by W + scale * A B (in W's dtype): a pure
    function of the two states, with the base's structure (a model without adapters takes it)."""
    pairs: dict[tuple, dict] = {}
    for path, variable in nnx.to_flat_state(adapters):
        pairs.setdefault(tuple(path[:-1]), {})[path[-1]] = variable
    flat = []
    for path, variable in nnx.to_flat_state(base):
        pair = pairs.get(tuple(path[:-1])) if path[-1] == "kernel" else None
        if pair is not None:
            a = pair["lora_a"]
            lead = 1 if (a.get_metadata().get("logical_axes") or (None,))[0] == LAYERS_AXIS else 0
            kernel = variable[...]
            merged = kernel.astype(jnp.float32) + scale * lora_delta(a[...], pair["lora_b"][...], lead)
            variable = variable.replace(value=merged.astype(kernel.dtype))
        flat.append((path, variable))
    return nnx.from_flat_state(flat)


def export_adapted(base_graphdef: nnx.GraphDef, base: nnx.State, adapters: nnx.State, config: LoRAConfig,
                   out_dir: str | Path, base_model: str = "", dtype: Any = None) -> Path:
    """An adapted model's export: the merged model as a Hugging Face checkpoint in `out_dir` (transformers loads
    it as it is) and the adapters in PEFT's format in `out_dir/adapter` (for `PeftModel.from_pretrained` on the
    base model `base_model`)."""
    out_dir = Path(out_dir)
    save_pretrained(nnx.merge(base_graphdef, merge_adapters(base, adapters, config.scale)), out_dir, dtype)
    save_peft_adapters(adapters, config, out_dir / "adapter", base_model=base_model)
    return out_dir


def peft_config(config: LoRAConfig, base_model: str = "") -> dict[str, Any]:
    """adapter_config.json of PEFT's LoRA for these adapters."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
            "r": config.rank, "lora_alpha": config.alpha, "lora_dropout": config.dropout,
            "target_modules": sorted(config.targets), "bias": "none", "fan_in_fan_out": False,
            "inference_mode": True, "init_lora_weights": True, "use_rslora": False, "use_dora": False,
            "modules_to_save": None}


def save_peft_adapters(adapters: nnx.State, config: LoRAConfig, out_dir: str | Path, key_for=None,
                       base_model: str = "") -> Path:
    """Writes the adapters as PEFT does: `base_model.model.<module>.lora_A.weight` [r, in] and `lora_B.weight`
    [out, r] (torch's Linear layout, input dims flattened) in adapter_model.safetensors, and
    adapter_config.json. `key_for(path) -> (HF key, layout)` names a kernel (hf_io's decoder mapping by default);
    stacked layers are written per layer. Only process 0 writes."""
    key_for = key_for or hf_key_for
    out_dir = Path(out_dir)
    tensors = {}
    for path, variable in nnx.to_flat_state(adapters):
        for layer_path, get in per_layer_getters(tuple(path), variable[...]):
            hf_key, layout = key_for(tuple(layer_path[:-1]) + ("kernel",))
            module = hf_key[:-len(".weight")]
            value = np.asarray(multihost.to_host(get()), np.float32)
            if layer_path[-1] == "lora_a":   # [*in, r] -> [r, in]
                tensors[f"base_model.model.{module}.lora_A.weight"] = np.ascontiguousarray(
                    value.reshape(-1, value.shape[-1]).T)
            else:                             # [r, *out] -> [out, r]
                tensors[f"base_model.model.{module}.lora_B.weight"] = np.ascontiguousarray(
                    value.reshape(value.shape[0], -1).T)
    if jax.process_index() == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
        (out_dir / "adapter_config.json").write_text(json.dumps(peft_config(config, base_model), indent=2) + "\n")
    return out_dir
