"""Hugging Face checkpoints in safetensors, for any model family: reading, writing, and the decoder's key layout.

`hf_io.load_pretrained` and `save_pretrained` pick a family (`models.families`); each family loads with
`load_into` and saves with `write_checkpoint`, naming its tensors with a `key_for` (the decoder's `hf_key_for`
by default). Nothing here knows a family: they all import this module, and it imports none of them.

Loading reads `config.json` and single or index-sharded `*.safetensors`, one tensor
at a time: each is converted to our layout and sent to devices with its target
sharding before the next is read, so the host never holds a second full copy of
the model. Saving writes safetensors shards + `config.json` that transformers'
`AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, SingleDeviceSharding
from safetensors import safe_open
from safetensors.numpy import save_file

from rlanything_jax.core import multihost
from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.core.models.layer_stack import is_stacked_path, per_layer_getters, per_layer_shapes, stack_per_layer

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

# (our parameter path, Hugging Face key, layout). Layout "kernel:N": our kernel is the
# transposed torch weight with its N input dims unflattened; "flat": torch keeps the
# tensor flat ([heads * head_dim] biases); "plain": same array.
_KEY_MAP: tuple[tuple[str, str, str], ...] = (
    (r"embed", "model.embed_tokens.weight", "plain"),
    (r"final_norm\.scale", "model.norm.weight", "plain"),
    (r"lm_head\.kernel", "lm_head.weight", "kernel:1"),
    (r"layers\.(\d+)\.input_norm\.scale", r"model.layers.\1.input_layernorm.weight", "plain"),
    (r"layers\.(\d+)\.post_attention_norm\.scale", r"model.layers.\1.post_attention_layernorm.weight", "plain"),
    (r"layers\.(\d+)\.attn\.([qkv])_proj\.kernel", r"model.layers.\1.self_attn.\2_proj.weight", "kernel:1"),
    (r"layers\.(\d+)\.attn\.o_proj\.kernel", r"model.layers.\1.self_attn.o_proj.weight", "kernel:2"),
    (r"layers\.(\d+)\.attn\.([qkvo])_proj\.bias", r"model.layers.\1.self_attn.\2_proj.bias", "flat"),
    (r"layers\.(\d+)\.attn\.([qk])_norm\.scale", r"model.layers.\1.self_attn.\2_norm.weight", "plain"),
    (r"layers\.(\d+)\.mlp\.(gate|up|down)_proj\.kernel", r"model.layers.\1.mlp.\2_proj.weight", "kernel:1"),
    (r"layers\.(\d+)\.mlp\.(gate|up|down)_proj\.bias", r"model.layers.\1.mlp.\2_proj.bias", "flat"),
)
# Tensors some checkpoints carry that the model recomputes or shares.
_IGNORED_HF_KEYS = re.compile(r".*rotary_emb\.inv_freq$|^lm_head\.weight$")


def hf_key_for(path: tuple) -> tuple[str, str]:
    """Maps an NNX state path such as ('layers', 0, 'attn', 'q_proj', 'kernel') to (HF key, layout)."""
    dotted = ".".join(str(p) for p in path)
    for pattern, hf_template, layout in _KEY_MAP:
        match = re.fullmatch(pattern, dotted)
        if match:
            return match.expand(hf_template), layout
    raise KeyError(f"no Hugging Face name for parameter {dotted!r}")


def hf_to_ours(weight: np.ndarray, layout: str, shape: tuple[int, ...]) -> np.ndarray:
    if layout.startswith("kernel:"):
        weight = weight.T
    return weight.reshape(shape)


def ours_to_hf(value: np.ndarray, layout: str) -> np.ndarray:
    if layout.startswith("kernel:"):
        num_in_dims = int(layout.split(":")[1])
        in_size = math.prod(value.shape[:num_in_dims])
        return np.ascontiguousarray(value.reshape(in_size, -1).T)
    return value.reshape(-1) if layout == "flat" else value


class SafetensorsCheckpoint:
    """Lazy, per-tensor reader over a directory of one or many `*.safetensors` files."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        index_path = self.directory / "model.safetensors.index.json"
        if index_path.exists():
            weight_map = json.loads(index_path.read_text())["weight_map"]
            self._file_for = {key: self.directory / name for key, name in weight_map.items()}
        else:
            files = sorted(self.directory.glob("*.safetensors"))
            if not files:
                raise FileNotFoundError(f"no *.safetensors files in {self.directory}")
            self._file_for = {}
            for file in files:
                with safe_open(file, framework="numpy") as handle:
                    self._file_for.update({key: file for key in handle.keys()})
        self._handles: dict[Path, Any] = {}

    def keys(self) -> set[str]:
        return set(self._file_for)

    def read(self, key: str) -> np.ndarray:
        if key not in self._file_for:
            raise KeyError(f"checkpoint {self.directory} has no tensor {key!r}")
        file = self._file_for[key]
        if file not in self._handles:
            self._handles[file] = safe_open(file, framework="numpy")
        return self._handles[file].get_tensor(key)


def read_hf_config(hf_dir: str | Path) -> dict[str, Any]:
    path = Path(hf_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{hf_dir} is not a Hugging Face model directory: {path} is missing")
    return json.loads(path.read_text())


def resolve_dtype(dtype: Any) -> Any:
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {sorted(_DTYPES)}")
        return _DTYPES[dtype]
    return dtype


def load_into(build, hf_dir: str | Path, param_dtype: Any, mesh: Mesh | None, rules: sharding_lib.Rules,
              key_for=None, to_ours=None, name: str = "the model") -> Any:
    """Builds the module `build()` describes from a checkpoint without materialising random weights:
    `key_for(path) -> (HF key, layout)` names each parameter's tensor and `to_ours(weight, layout,
    shape)` converts it (this module's decoder mapping by default)."""
    key_for = key_for or hf_key_for
    to_ours = to_ours or hf_to_ours
    abstract = nnx.eval_shape(build)
    graphdef, abstract_state = nnx.split(abstract)
    if mesh is None:
        shardings = jax.tree.map(lambda _: SingleDeviceSharding(jax.devices()[0]), abstract_state)
    else:
        shardings = sharding_lib.state_shardings(abstract_state, mesh, rules)

    checkpoint = SafetensorsCheckpoint(hf_dir)
    used: set[str] = set()

    def read(path, shape):
        key, layout = key_for(path)
        used.add(key)
        weight = to_ours(checkpoint.read(key), layout, shape)
        return weight.astype(param_dtype) if weight.dtype != np.dtype(param_dtype) else weight

    def load_leaf(path, leaf, sharding):
        path = _state_path(path)
        if is_stacked_path(path):   # scanned layers: the layers' tensors stacked, one parameter at a time
            weight = stack_per_layer(lambda layer_path: read(layer_path, leaf.shape[1:]), path, leaf.shape[0])
        else:
            weight = read(path, leaf.shape)
        return sharding_lib.place(weight, sharding)

    state = jax.tree_util.tree_map_with_path(load_leaf, abstract_state, shardings)
    unused = {k for k in checkpoint.keys() - used if not _IGNORED_HF_KEYS.fullmatch(k)}
    if unused:
        raise ValueError(f"{hf_dir}: checkpoint tensors not used by {name}: "
                         f"{sorted(unused)[:8]}{' ...' if len(unused) > 8 else ''}")
    return nnx.merge(graphdef, state)


def _state_path(tree_path) -> tuple:
    """A jax key path into an nnx.State (..., GetAttrKey('value')) -> plain path tuple."""
    out = []
    for entry in tree_path:
        if isinstance(entry, jax.tree_util.DictKey):
            out.append(entry.key)
        elif isinstance(entry, jax.tree_util.SequenceKey):
            out.append(entry.idx)
    return tuple(out)


def _plan_shards(model: Any, itemsize: int, max_shard_bytes: int,
                 key_for=hf_key_for) -> list[list[tuple[tuple, str, str]]]:
    """Groups parameters (path, HF key, layout) into shards of at most `max_shard_bytes`."""
    shards: list[list[tuple[tuple, str, str]]] = [[]]
    size = 0
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        for layer_path, shape in per_layer_shapes(path, variable.shape):
            nbytes = math.prod(shape) * itemsize
            if shards[-1] and size + nbytes > max_shard_bytes:
                shards.append([])
                size = 0
            shards[-1].append((layer_path, *key_for(layer_path)))
            size += nbytes
    return shards



def write_checkpoint(model, out_dir: str | Path, config_json, dtype: Any = None, max_shard_bytes: int = 2 << 30,
                     key_for=hf_key_for, to_hf=ours_to_hf) -> Path:
    """Writes `model` as a Hugging Face checkpoint: safetensors shards (+ index) and config.json. The host
    holds one shard at a time; in a multi-process run every process takes part in gathering, and only process 0
    writes. For any module: `key_for(path) -> (HF key, layout)`, `to_hf(value, layout)` converts,
    `config_json(dtype_name)` is the config.json dictionary."""
    out_dir = Path(out_dir)
    state = nnx.state(model, nnx.Param)
    dtype = np.dtype(resolve_dtype(dtype) if dtype is not None else jax.tree.leaves(state)[0].dtype)
    # Scanned layers' parameters are written as the per-layer tensors of an unrolled model: one format.
    getters = {layer_path: get for path, variable in nnx.to_flat_state(state)
               for layer_path, get in per_layer_getters(path, variable[...])}
    shards = _plan_shards(model, dtype.itemsize, max_shard_bytes, key_for)
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    writer = jax.process_index() == 0
    if writer:
        out_dir.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total_bytes = 0
    for name, shard in zip(names, shards):
        tensors = {key: to_hf(multihost.to_host(getters[path]()).astype(dtype), layout)
                   for path, key, layout in shard}
        total_bytes += sum(t.nbytes for t in tensors.values())
        weight_map.update(dict.fromkeys(tensors, name))
        if writer:
            save_file(tensors, str(out_dir / name), metadata={"format": "pt"})
    if writer:
        if len(shards) > 1:
            index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
            (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        dtype_name = "bfloat16" if dtype == np.dtype(jnp.bfloat16) else str(dtype)
        (out_dir / "config.json").write_text(json.dumps(config_json(dtype_name), indent=2) + "\n")
    return out_dir
