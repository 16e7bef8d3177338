"""The text decoder's `ModelFamily`: every `model_type` `DecoderConfig.from_hf` reads (Qwen2, Qwen3, Llama, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlanything_jax.core.models.decoder import Decoder
from rlanything_jax.core.models.family import ModelFamily
from rlanything_jax.core.models.hf_checkpoint import load_into, write_checkpoint
from rlanything_jax.core.models.model_config import DecoderConfig


def load(cfg: DecoderConfig, hf_dir: str | Path, param_dtype: Any, compute_dtype: Any, mesh, rules,
         attention=None) -> Decoder:
    return load_into(lambda: Decoder(cfg, dtype=compute_dtype, param_dtype=param_dtype, attention=attention),
                     hf_dir, param_dtype, mesh, rules, name=f"the {cfg.model_type} decoder")


def save(model: Decoder, out_dir: str | Path, dtype: Any = None, max_shard_bytes: int = 2 << 30) -> Path:
    """A directory transformers' `AutoModelForCausalLM.from_pretrained` loads."""
    return write_checkpoint(model, out_dir, model.config.to_hf, dtype, max_shard_bytes)


DECODER = ModelFamily(
    name="decoder", read_config=DecoderConfig.from_hf, text_config=lambda cfg: cfg, with_text=lambda cfg, text: text,
    build=lambda cfg, **kwargs: Decoder(cfg, **kwargs), load=load, save=save,
    owns=lambda model: isinstance(model, Decoder))
