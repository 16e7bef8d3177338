"""Qwen3-VL checkpoints in the released key layout <-> `Qwen3VL`.

The text model's tensors are the decoder's under `model.language_model.` (plus `lm_head.weight`),
so their mapping is `hf_checkpoint`'s; the vision tower's are named here. `hf_io.load_pretrained` and
`save_pretrained` reach this module through the family's record (`qwen3_vl.family`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from jax.sharding import Mesh

from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.models import hf_checkpoint
from rlanything_jax.core.models.attention_kernels import AttentionKernel
from rlanything_jax.core.models.qwen3_vl.config import Qwen3VLConfig
from rlanything_jax.core.models.qwen3_vl.model import Qwen3VL

# (our path under `visual.`, checkpoint key under `model.visual.`, layout as in hf_checkpoint, plus "conv": the
# patch embedding's Conv3d weight [out, C, T, p, p], our [C * T * p * p, out] kernel).
_VISION_KEYS: tuple[tuple[str, str, str], ...] = (
    (r"patch_embed\.kernel", "patch_embed.proj.weight", "conv"),
    (r"patch_embed\.bias", "patch_embed.proj.bias", "plain"),
    (r"pos_embed", "pos_embed.weight", "plain"),
    (r"blocks\.(\d+)\.(norm[12])\.scale", r"blocks.\1.\2.weight", "plain"),
    (r"blocks\.(\d+)\.(norm[12])\.bias", r"blocks.\1.\2.bias", "plain"),
    (r"blocks\.(\d+)\.attn\.qkv\.kernel", r"blocks.\1.attn.qkv.weight", "kernel:1"),
    (r"blocks\.(\d+)\.attn\.qkv\.bias", r"blocks.\1.attn.qkv.bias", "flat"),
    (r"blocks\.(\d+)\.attn\.proj\.kernel", r"blocks.\1.attn.proj.weight", "kernel:2"),
    (r"blocks\.(\d+)\.attn\.proj\.bias", r"blocks.\1.attn.proj.bias", "plain"),
    (r"blocks\.(\d+)\.mlp\.fc([12])\.kernel", r"blocks.\1.mlp.linear_fc\2.weight", "kernel:1"),
    (r"blocks\.(\d+)\.mlp\.fc([12])\.bias", r"blocks.\1.mlp.linear_fc\2.bias", "plain"),
    (r"merger\.norm\.scale", "merger.norm.weight", "plain"),
    (r"merger\.norm\.bias", "merger.norm.bias", "plain"),
    (r"merger\.fc([12])\.kernel", r"merger.linear_fc\1.weight", "kernel:1"),
    (r"merger\.fc([12])\.bias", r"merger.linear_fc\1.bias", "plain"),
    (r"deepstack_mergers\.(\d+)\.norm\.scale", r"deepstack_merger_list.\1.norm.weight", "plain"),
    (r"deepstack_mergers\.(\d+)\.norm\.bias", r"deepstack_merger_list.\1.norm.bias", "plain"),
    (r"deepstack_mergers\.(\d+)\.fc([12])\.kernel", r"deepstack_merger_list.\1.linear_fc\2.weight", "kernel:1"),
    (r"deepstack_mergers\.(\d+)\.fc([12])\.bias", r"deepstack_merger_list.\1.linear_fc\2.bias", "plain"),
)


def hf_key_for(path: tuple) -> tuple[str, str]:
    """Our parameter path -> (checkpoint key, layout)."""
    if path[0] == "visual":
        dotted = ".".join(str(p) for p in path[1:])
        for pattern, template, layout in _VISION_KEYS:
            match = re.fullmatch(pattern, dotted)
            if match:
                return "model.visual." + match.expand(template), layout
        raise KeyError(f"no Hugging Face name for vision parameter {dotted!r}")
    key, layout = hf_checkpoint.hf_key_for(path)
    return (key if key == "lm_head.weight" else "model.language_model." + key[len("model."):]), layout


def hf_to_ours(weight: np.ndarray, layout: str, shape: tuple[int, ...]) -> np.ndarray:
    if layout == "conv":
        return weight.reshape(weight.shape[0], -1).T.reshape(shape)
    return hf_checkpoint.hf_to_ours(weight, layout, shape)


def _ours_to_hf(cfg: Qwen3VLConfig):
    vision = cfg.vision

    def convert(value: np.ndarray, layout: str) -> np.ndarray:
        if layout == "conv":
            return np.ascontiguousarray(value.T.reshape(vision.hidden_size, vision.in_channels,
                                                        vision.temporal_patch_size, vision.patch_size,
                                                        vision.patch_size))
        return hf_checkpoint.ours_to_hf(value, layout)

    return convert


def load(cfg: Qwen3VLConfig, hf_dir: str | Path, param_dtype: Any, compute_dtype: Any, mesh: Mesh | None,
         rules: sharding_lib.Rules, attention: AttentionKernel | None = None) -> Qwen3VL:
    """The `Qwen3VL` of `cfg` with a checkpoint directory's weights."""
    build = lambda: Qwen3VL(cfg, dtype=compute_dtype, param_dtype=param_dtype, attention=attention)  # noqa: E731
    return hf_checkpoint.load_into(build, hf_dir, param_dtype, mesh, rules, key_for=hf_key_for, to_ours=hf_to_ours,
                                   name="Qwen3-VL")


def save(model: Qwen3VL, out_dir: str | Path, dtype: Any = None, max_shard_bytes: int = 2 << 30) -> Path:
    """A directory transformers' `Qwen3VLForConditionalGeneration.from_pretrained` loads."""
    return hf_checkpoint.write_checkpoint(model, out_dir, model.vl_config.to_hf, dtype, max_shard_bytes,
                                  key_for=hf_key_for, to_hf=_ours_to_hf(model.vl_config))
