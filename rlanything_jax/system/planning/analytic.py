"""Per-device bytes of a run, from shapes alone: parameters, optimizer, gradients, activations, KV cache, images.

Parameters and optimizer moments are exact for the run's shardings: each leaf's size over the mesh axes its
logical axes map to (`sharding.logical_to_spec`, a mesh axis that does not divide a dim dropped, as the run
drops it). Activations are an estimate of what a layer keeps for the backward pass (below), not a
simulation of XLA's buffer assignment; the planner prints the compiled figures beside them.

Activations per layer and row, c = the compute dtype's bytes, dims divided by the tensor axis where it
shards them (heads, kv heads, mlp, vocab):
- remat "none" keeps everything: the layer input, the two norms' outputs, q/k/v (before and after
  rotary), the attention's output (with dense attention, `attention_impl=xla`, its [heads, L, L] weights;
  with the flash-style kernels, a log-sum-exp per query), the projections' outputs, the MLP's gate, up
  and product;
- "dots" keeps the layer input and the projections' outputs, and recomputes one layer's rest at a time;
- "full" keeps the layer input only, and recomputes one layer at a time.
Plus one layer's float32 attention logits while it runs (one tile with the flash-style kernels), and the
output layer's float32 logits and their gradient over the loss window. A Qwen3-VL tower's activations come
on top per row, under the same policy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from types import SimpleNamespace

import jax
import numpy as np
from flax import nnx

from rlanything_jax.core import sharding as sharding_lib
from rlanything_jax.system.planning.architectures import Architecture
from rlanything_jax.system.planning.workload import SamplerShapes, TrainShapes

FLASH_TILE = (128, 512)   # the flash-style kernels' query and key tile (core/models/flash.causal_window_attention)

GIB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Mesh:
    """Axis sizes only: enough to shard shapes on paper (no devices)."""

    sizes: dict
    rules: tuple

    def divisor(self, logical: str, dim: int) -> int:
        """How many ways a dim of this size carrying `logical` is split."""
        spec = sharding_lib.logical_to_spec((logical,), self.rules, SimpleNamespace(shape=self.sizes), (dim,))
        axes = spec[0] if isinstance(spec[0], tuple) else (spec[0],) if spec[0] else ()
        return math.prod(self.sizes[a] for a in axes)


def per_device_bytes(params: nnx.State, mesh: Mesh, itemsize: int | None = None) -> int:
    """Bytes of one device's shards of `params` (abstract or real), at their dtype or `itemsize`."""
    total = 0
    for variable in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, nnx.Variable)):
        axes = sharding_lib.variable_logical_axes(variable)
        spec = sharding_lib.logical_to_spec(axes, mesh.rules, SimpleNamespace(shape=mesh.sizes), variable.shape)
        elements = 1
        for size, entry in zip(variable.shape, tuple(spec) + (None,) * len(variable.shape)):
            names = entry if isinstance(entry, tuple) else (entry,) if entry else ()
            elements *= size // math.prod(mesh.sizes[a] for a in names)
        total += elements * (itemsize or np.dtype(variable.dtype).itemsize)
    return total


def vision_param_bytes(params: nnx.State, mesh: Mesh, vision_params: Sequence[str],
                       itemsize: int | None = None) -> int:
    """Per-device bytes of the parameters a model names as its vision part (`VisionPlan.vision_params`)."""
    return sum(per_device_bytes(params[name], mesh, itemsize) for name in vision_params if name in params)


@dataclasses.dataclass(frozen=True)
class LearnerBytes:
    parameters: int
    optimizer: int       # Adam's two moments (the parameters' dtype as optax keeps them, or the master copy's)
    reference: int       # a frozen copy of the parameters (kl_reference="initial")
    gradients: int       # one micro-batch's, plus the accumulator when there are several
    master: int = 0      # a float32 copy of low-precision parameters (master_copy)


def learner_bytes(params: nnx.State, mesh: Mesh, train_cfg, micro_batches: int, freeze_vision: bool,
                  vision_params: Sequence[str] = ()) -> LearnerBytes:
    parameters = per_device_bytes(params, mesh)
    as_float32 = per_device_bytes(params, mesh, itemsize=4)
    master = as_float32 if train_cfg.master_copy and as_float32 != parameters else 0
    # With a master copy, the moments and the gradients' accumulator are float32 (core/rl/train_step.py).
    itemsize = 4 if master else None
    trained = per_device_bytes(params, mesh, itemsize) - (vision_param_bytes(params, mesh, vision_params, itemsize)
                                                          if freeze_vision else 0)
    reference = parameters if train_cfg.kl_reference == "initial" else 0
    accumulator = (master or parameters) if micro_batches > 1 else 0
    return LearnerBytes(parameters, 2 * trained, reference, parameters + accumulator, master)


def rows_per_device(rows: int, mesh: Mesh) -> int:
    """A batch dimension's rows on one device: split over the batch axes when they divide it, else all."""
    return rows // mesh.divisor("batch", rows)


def train_activation_bytes(arch: Architecture, shapes: TrainShapes, mesh: Mesh, compute_itemsize: int,
                           remat: str, dense_attention: bool = False) -> int:
    """One micro-batch's activations on one device under the remat policy (see the module docstring). Dense
    attention (`attention_impl=xla`) keeps [heads, L, L] weights and an [L, L] mask; the flash-style kernels
    (chunked, cudnn, splash) keep each query's output and log-sum-exp and one tile of scores at a time."""
    t = arch.text
    c, length, rows = compute_itemsize, shapes.length, rows_per_device(shapes.rows, mesh)
    heads = t.num_heads // mesh.divisor("heads", t.num_heads)
    kv = t.num_kv_heads // mesh.divisor("kv_heads", t.num_kv_heads)
    mlp = t.intermediate_size // mesh.divisor("mlp", t.intermediate_size)
    vocab = t.vocab_size // mesh.divisor("vocab", t.vocab_size)
    e, d = t.hidden_size, t.head_dim
    layer_input = length * e * c
    projections = length * ((heads + 2 * kv) * d + e + 2 * mlp) * c   # q, k, v, o, gate, up
    if dense_attention:
        attention = heads * length * length * c + length * heads * d * c   # softmax weights and output
        scores, mask = heads * length * length * 4, length * length
    else:   # output and float32 log-sum-exp per query; one float32 tile of scores per head while it runs
        attention = length * heads * (d * c + 4)
        scores, mask = heads * min(length, FLASH_TILE[0]) * min(length, FLASH_TILE[1]) * 4, 0
    rest = length * (2 * e + (heads + kv) * d + mlp) * c   # the two norms' outputs, rotated q and k, silu(gate) * up
    saved = {"none": layer_input + projections + attention + rest, "dots": layer_input + projections,
             "full": layer_input}[remat]
    one_layer = layer_input + projections + attention + rest + scores
    logits = 2 * shapes.window * vocab * 4
    return rows * (t.num_layers * saved + one_layer + logits + mask)


def train_image_bytes(arch: Architecture, shapes: TrainShapes, mesh: Mesh, compute_itemsize: int,
                      freeze_vision: bool, remat: str = "none") -> int:
    """The vision part's activations for one micro-batch's images (`VisionPlan.train_bytes`)."""
    if arch.vision is None or not shapes.image_patches:
        return 0
    return arch.vision.train_bytes(rows_per_device(shapes.rows, mesh), shapes.image_patches, compute_itemsize,
                                   freeze_vision, remat)


def kv_cache_bytes(arch: Architecture, rows: int, cache_length: int, mesh: Mesh, compute_itemsize: int) -> int:
    t = arch.text
    kv = t.num_kv_heads // mesh.divisor("kv_heads", t.num_kv_heads)
    return 2 * t.num_layers * rows_per_device(rows, mesh) * cache_length * kv * t.head_dim * compute_itemsize


def prefill_activation_bytes(arch: Architecture, shapes: SamplerShapes, mesh: Mesh, compute_itemsize: int) -> int:
    """One layer's working set for the prompt (no gradient: layers run one after another), flash attention."""
    t = arch.text
    rows = rows_per_device(shapes.prefill_rows, mesh)
    mlp = t.intermediate_size // mesh.divisor("mlp", t.intermediate_size)
    heads = t.num_heads // mesh.divisor("heads", t.num_heads)
    width = 3 * t.hidden_size + 2 * mlp + 2 * heads * t.head_dim
    return rows * shapes.prompt_length * width * compute_itemsize


def sampler_image_bytes(arch: Architecture, shapes: SamplerShapes, compute_itemsize: int) -> int:
    """Every prefilled row's image features and one image through the vision part (`VisionPlan.sampler_bytes`)."""
    if arch.vision is None or not shapes.images_per_row:
        return 0
    return arch.vision.sampler_bytes(shapes.prefill_rows * shapes.images_per_row, shapes.image_tokens,
                                     shapes.patches_per_image, compute_itemsize)
