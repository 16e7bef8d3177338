"""A role's model architecture without its weights, and its abstract parameters.

The planner never loads a checkpoint. A local Hugging Face directory gives its `config.json`; "scratch"
and "scratch_vl" are built from the config's `model.scratch`; a model whose weights are not on this
machine (the paper configs' `checkpoints/...`) is looked up by its directory's name in
`KNOWN_ARCHITECTURES`, the released `config.json` fields of the models the paper configs name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax.numpy as jnp
from flax import nnx

from rlanything_jax.models.decoder import Decoder
from rlanything_jax.models.hf_io import read_hf_config
from rlanything_jax.models.model_config import DecoderConfig
from rlanything_jax.models.qwen3_vl.config import Qwen3VLConfig
from rlanything_jax.models.qwen3_vl.scratch import ScratchVisionArchitecture, scratch_vl_config
from rlanything_jax.models.registry import PACKAGE_PREFIX
from rlanything_jax.models.scratch import ScratchArchitecture, decoder_config

_QWEN3_8B_TEXT = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
                  "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                  "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
_QWEN3_VL_8B = {
    "model_type": "qwen3_vl", "tie_word_embeddings": False, "image_token_id": 151655, "video_token_id": 151656,
    "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "text_config": dict(_QWEN3_8B_TEXT, max_position_embeddings=262144, rope_theta=5_000_000.0,
                        rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20],
                                      "mrope_interleaved": True}),
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                      "out_hidden_size": 4096, "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
                      "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3,
                      "hidden_act": "gelu_pytorch_tanh"},
}
# Released config.json fields (docs: Qwen2.5, Qwen3 and SmolLM2 model cards; QWEN3_VL.md section 1), keyed by the
# lower-cased name of the model's directory or package.
KNOWN_ARCHITECTURES: dict[str, dict] = {
    "qwen2.5-7b-instruct": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                            "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                            "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
                            "max_position_embeddings": 32768, "tie_word_embeddings": False},
    "qwen3-8b": dict(_QWEN3_8B_TEXT, rope_theta=1_000_000.0, max_position_embeddings=40960),
    "qwen3-vl-8b-thinking": _QWEN3_VL_8B,
    "qwen3-vl-8b-instruct": _QWEN3_VL_8B,
    "smollm2-135m-instruct": {"model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
                              "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                              "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_theta": 100_000.0,
                              "max_position_embeddings": 8192, "tie_word_embeddings": True},
}
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One model's shapes: `text` is its decoder; `vl` is set for a Qwen3-VL (its `text` is `vl.text`)."""

    name: str        # the config's model path
    source: str      # where the shapes came from, for the report
    text: DecoderConfig
    vl: Qwen3VLConfig | None = None

    def with_layers(self, num_layers: int) -> Architecture:
        """The same model with `num_layers` decoder layers (the planner compiles a few and extrapolates)."""
        return self._with_text(num_layers=num_layers)

    def with_scan(self, scan_layers: bool) -> Architecture:
        """The same model with its layers stacked and scanned, or unrolled (`DecoderConfig.scan_layers`)."""
        return self._with_text(scan_layers=scan_layers)

    def _with_text(self, **changes) -> Architecture:
        text = dataclasses.replace(self.text, **changes)
        vl = None if self.vl is None else dataclasses.replace(self.vl, text=text)
        return dataclasses.replace(self, text=text, vl=vl)


def architecture_from_hf(name: str, source: str, hf: dict) -> Architecture:
    if hf.get("model_type") == "qwen3_vl":
        vl = Qwen3VLConfig.from_hf(hf)
        return Architecture(name, source, vl.text, vl)
    return Architecture(name, source, DecoderConfig.from_hf(hf))


def _scratch(path: str, arch: ScratchArchitecture) -> Architecture:
    if path == "scratch":
        return Architecture(path, "config model.scratch", decoder_config(arch, arch.vocab_size))
    # Token ids as the scratch tokenizer assigns them (its specials last); only their count matters here.
    names = ("<|im_end|>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    token_ids = {name: arch.vocab_size - 1 - i for i, name in enumerate(names)}
    vl = scratch_vl_config(arch, ScratchVisionArchitecture(), arch.vocab_size, token_ids)
    return Architecture(path, "config model.scratch (Qwen3-VL)", vl.text, vl)


def role_architecture(path: str, scratch: ScratchArchitecture, scan_layers: bool = False) -> Architecture:
    """The architecture of the model at a config's model path (its layers scanned as the config says);
    ValueError (one line) when none is known."""
    return _architecture(path, scratch).with_scan(scan_layers)


def _architecture(path: str, scratch: ScratchArchitecture) -> Architecture:
    if path in ("scratch", "scratch_vl"):
        return _scratch(path, scratch)
    local = Path(path).expanduser()
    if (local / "config.json").is_file():
        return architecture_from_hf(path, str(local / "config.json"), read_hf_config(local))
    name = path[len(PACKAGE_PREFIX):] if path.startswith(PACKAGE_PREFIX) else local.name
    known = KNOWN_ARCHITECTURES.get(name.lower())
    if known is None:
        raise ValueError(f"model path {path!r}: no config.json there and no known architecture named "
                         f"{name.lower()!r} (known: {', '.join(sorted(KNOWN_ARCHITECTURES))})")
    return architecture_from_hf(path, f"known architecture {name.lower()} (planning/architectures.py)", known)


def abstract_model(arch: Architecture, dtype: str, compute_dtype: str) -> tuple[nnx.GraphDef, nnx.State]:
    """The model's graph and its parameters as ShapeDtypeStructs (`nnx.eval_shape`: nothing is allocated)."""
    from rlanything_jax.models.qwen3_vl.model import Qwen3VL

    kwargs = dict(dtype=_DTYPES[compute_dtype], param_dtype=_DTYPES[dtype])
    if arch.vl is not None:
        model = nnx.eval_shape(lambda: Qwen3VL(arch.vl, rngs=nnx.Rngs(0), **kwargs))
    else:
        model = nnx.eval_shape(lambda: Decoder(arch.text, rngs=nnx.Rngs(0), **kwargs))
    return nnx.split(model)
