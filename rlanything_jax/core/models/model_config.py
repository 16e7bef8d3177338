"""Decoder configuration: one frozen dataclass for Llama, Qwen2/2.5 and Qwen3.

The families differ only in flags (qkv bias, q/k norm, tied embeddings, rope), so
a Hugging Face `config.json` maps onto `DecoderConfig` and back without loss for
the fields these families' released checkpoints use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
_HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


class UnsupportedCheckpointError(ValueError):
    """A Hugging Face config asks for something this decoder does not implement."""


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters, named as in transformers' `rope_parameters`."""

    theta: float = 10_000.0
    type: str = "default"
    factor: float = 1.0
    # llama3
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    # yarn
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def to_hf(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rope_type": self.type, "rope_theta": self.theta}
        if self.type == "linear":
            out["factor"] = self.factor
        elif self.type == "llama3":
            out.update(factor=self.factor, low_freq_factor=self.low_freq_factor,
                       high_freq_factor=self.high_freq_factor,
                       original_max_position_embeddings=self.original_max_position_embeddings)
        elif self.type == "yarn":
            out.update(factor=self.factor, beta_fast=self.beta_fast, beta_slow=self.beta_slow,
                       original_max_position_embeddings=self.original_max_position_embeddings,
                       truncate=self.truncate)
            for key in ("attention_factor", "mscale", "mscale_all_dim"):
                if getattr(self, key) is not None:
                    out[key] = getattr(self, key)
        return out


def rope_from_hf(hf: dict[str, Any], max_position_embeddings: int) -> RopeConfig:
    """Reads rope settings from either transformers 5 `rope_parameters` or the older keys."""
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = params.get("rope_theta", hf.get("rope_theta")) or 10_000.0
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedCheckpointError(
            f"rope type {rope_type!r} is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedCheckpointError("partial_rotary_factor != 1 is not supported")
    fields = {f.name for f in dataclasses.fields(RopeConfig)}
    kwargs = {k: v for k, v in params.items() if k in fields and v is not None}
    kwargs.update(theta=float(theta), type=rope_type)
    if rope_type in ("llama3", "yarn"):
        kwargs.setdefault("original_max_position_embeddings",
                          hf.get("original_max_position_embeddings", max_position_embeddings))
    return RopeConfig(**kwargs)


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Architecture of a Llama / Qwen2 / Qwen3 decoder. Hashable, so it can be a jit static."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = RopeConfig()
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    # How the layers are held and run, not part of a checkpoint: False, one module per layer, unrolled in the
    # compiled programs; True, every layer's parameters (and the sampler's KV cache) stacked on a leading
    # "layers" axis and the layers run as one `jax.lax.scan`, so compile time does not grow with depth.
    scan_layers: bool = False

    def __post_init__(self):
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedCheckpointError(
                f"model_type {self.model_type!r} is not supported (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedCheckpointError(
                f"num_attention_heads ({self.num_heads}) must be a multiple of num_key_value_heads "
                f"({self.num_kv_heads})")

    @property
    def queries_per_kv_head(self) -> int:
        return self.num_heads // self.num_kv_heads

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "DecoderConfig":
        """Builds the config from a Hugging Face `config.json` dictionary."""
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedCheckpointError(
                f"config.json model_type {model_type!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
        if hf.get("hidden_act", "silu") != "silu":
            raise UnsupportedCheckpointError(f"hidden_act {hf['hidden_act']!r} is not supported (only silu)")
        if hf.get("use_sliding_window") or "sliding_attention" in (hf.get("layer_types") or ()):
            raise UnsupportedCheckpointError("sliding-window attention layers are not supported")
        num_heads = hf["num_attention_heads"]
        max_pos = hf.get("max_position_embeddings", 4096)
        attention_bias = bool(hf.get("attention_bias", False))
        eos = hf.get("eos_token_id")
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope=rope_from_hf(hf, max_pos),
            max_position_embeddings=max_pos,
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases and never an o bias; the others follow attention_bias.
            qkv_bias=True if model_type == "qwen2" else attention_bias,
            o_bias=False if model_type == "qwen2" else attention_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)),
            qk_norm=model_type == "qwen3",
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            pad_token_id=hf.get("pad_token_id"),
        )

    def to_hf(self, dtype: str = "float32") -> dict[str, Any]:
        """A `config.json` dictionary that transformers loads into the matching model class."""
        if self.model_type == "qwen2" and (not self.qkv_bias or self.o_bias):
            raise UnsupportedCheckpointError("qwen2 checkpoints need qkv_bias=True and o_bias=False")
        if self.model_type != "qwen2" and self.qkv_bias != self.o_bias:
            raise UnsupportedCheckpointError(f"{self.model_type}: qkv_bias and o_bias must agree")
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        out: dict[str, Any] = {
            "architectures": [_HF_ARCHITECTURES[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": self.rope.to_hf(),
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "pad_token_id": self.pad_token_id,
            "dtype": dtype,
        }
        if self.model_type != "qwen2":
            out["attention_bias"] = self.qkv_bias
        if self.model_type == "llama":
            out["mlp_bias"] = self.mlp_bias
        return out
