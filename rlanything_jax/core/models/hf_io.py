"""Hugging Face checkpoints <-> models, by family: `load_pretrained` reads config.json's `model_type` and hands
the directory to that family's loader (`models.families`); `save_pretrained` hands a model to its family's saver.

Loading reads single or index-sharded `*.safetensors` one tensor at a time: each is converted to our layout and
sent to devices with its target sharding before the next is read, so the host never holds a second full copy of
the model (`hf_checkpoint`). Saving writes safetensors shards + `config.json` that transformers loads.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jax.sharding import Mesh

from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.models import families
from rlanything_jax.core.models.attention_kernels import AttentionKernel
from rlanything_jax.core.models.hf_checkpoint import (  # noqa: F401  (re-exported: the checkpoint functions' old home)
    SafetensorsCheckpoint,
    hf_key_for,
    hf_to_ours,
    load_into,
    ours_to_hf,
    read_hf_config,
    resolve_dtype,
    write_checkpoint,
)


def load_pretrained(hf_dir: str | Path, dtype: Any = "float32", mesh: Mesh | None = None,
                    rules: sharding_lib.Rules = sharding_lib.DEFAULT_LOGICAL_AXIS_RULES,
                    compute_dtype: Any = None, attention: AttentionKernel | None = None,
                    scan_layers: bool = False) -> Any:
    """Builds the model of its family (`models.families`, by config.json's `model_type`) from a Hugging Face
    directory, each leaf placed with its target sharding.

    `dtype` is the parameter dtype; `compute_dtype` defaults to it. With `mesh=None`
    everything goes to the first device. `attention`: how the model attends (`attention_kernels`;
    default: this platform's `auto`). `scan_layers`: the decoder layers stacked and scanned
    (`DecoderConfig.scan_layers`); the checkpoint's per-layer tensors are stacked as they load.
    """
    param_dtype = resolve_dtype(dtype)
    compute_dtype = resolve_dtype(compute_dtype) if compute_dtype is not None else param_dtype
    hf = read_hf_config(hf_dir)
    family = families.family_for_type(hf.get("model_type"))
    cfg = family.read_config(hf)
    cfg = family.with_text(cfg, dataclasses.replace(family.text_config(cfg), scan_layers=scan_layers))
    return family.load(cfg, hf_dir, param_dtype, compute_dtype, mesh, rules, attention)


def save_pretrained(model: Any, out_dir: str | Path, dtype: Any = None,
                    max_shard_bytes: int = 2 << 30) -> Path:
    """Writes `model` as a Hugging Face checkpoint: safetensors shards (+ index) and config.json.

    The host holds one shard at a time. In a multi-process run every process takes
    part in gathering, and only process 0 writes.
    """
    return families.family_of(model).save(model, out_dir, dtype, max_shard_bytes)


