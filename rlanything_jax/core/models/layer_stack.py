"""Layers held as one module whose parameters are stacked on a leading "layers" axis, and run as one scan.

An unrolled model's compiled programs hold every layer's code: compile time (and the planner's) grows
with depth, some 36 copies for an 8B model, each again under differentiation and remat. Stacked, the
programs hold one layer body in a `jax.lax.scan` and their compile time is the same at any depth. The
checkpoint format does not change: `per_layer_items` and `stack_per_layer` translate between a
stacked parameter and its per-layer tensors.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

LAYERS_AXIS = "layers"   # the logical name of the stacking axis (replicated by the default sharding rules)


def stacked_module(make: Callable[[nnx.Rngs], nnx.Module], count: int, rngs: nnx.Rngs) -> nnx.Module:
    """`make(rngs)` built `count` times with independent parameter keys, as one module whose parameters are
    stacked on a leading axis; each parameter's `logical_axes` gain LAYERS_AXIS in front."""
    keys = jax.random.split(rngs.params(), count)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))))
    state = jax.vmap(lambda key: nnx.split(make(nnx.Rngs(params=key)))[1])(keys)
    for _, variable in nnx.to_flat_state(state):
        axes = variable.get_metadata().get("logical_axes")
        if axes is not None:
            variable.set_metadata("logical_axes", (LAYERS_AXIS,) + tuple(axes))
    return nnx.merge(graphdef, state)


def scan_stacked(stacked: nnx.Module, step: Callable[[Any, jax.Array, Any], Any], carry: Any) -> Any:
    """`carry = step(layer, index, carry)` for each layer of a stacked module in order, as one `jax.lax.scan`
    (`index` a traced int32). The parameters are the scan's inputs, so differentiation stacks each layer's
    gradient in place instead of adding into a full-size buffer per layer."""
    graphdef, params = nnx.split(stacked)
    count = jax.tree.leaves(params)[0].shape[0]

    def body(carry, inputs):
        layer_params, index = inputs
        return step(nnx.merge(graphdef, layer_params), index, carry), None

    carry, _ = jax.lax.scan(body, carry, (params, jnp.arange(count, dtype=jnp.int32)))
    return carry


# The modules that hold repeated layers: a decoder's `layers`, a vision tower's `blocks`.
CONTAINERS = ("layers", "blocks")


def _container_at(path: tuple) -> int | None:
    return next((i for i, key in enumerate(path) if key in CONTAINERS), None)


def is_stacked_path(path: tuple) -> bool:
    """Whether a parameter path such as ('layers', 'attn', 'q_proj', 'kernel') or ('visual', 'blocks', 'mlp',
    ...) is a stacked one (an unrolled model's has the layer's index after the container: ('layers', 3, ...))."""
    at = _container_at(path)
    return at is not None and at + 1 < len(path) and not isinstance(path[at + 1], int)


def per_layer_path(path: tuple, index: int) -> tuple:
    """('layers', 'attn', ...) -> ('layers', index, 'attn', ...): the unrolled model's path of one layer."""
    container = _container_at(path)
    assert container is not None, path   # a stacked parameter's path
    at = container + 1
    return tuple(path[:at]) + (index,) + tuple(path[at:])


def per_layer_shapes(path: tuple, shape: tuple[int, ...]) -> list[tuple[tuple, tuple[int, ...]]]:
    """(path, shape) of each layer's slice of a stacked parameter, or [(path, shape)] for any other."""
    if not is_stacked_path(path):
        return [(path, tuple(shape))]
    return [(per_layer_path(path, i), tuple(shape[1:])) for i in range(shape[0])]


def per_layer_getters(path: tuple, value: Any) -> list[tuple[tuple, Callable[[], Any]]]:
    """(path, getter) of each layer's slice of a stacked parameter (sliced when called, so a caller holds one
    layer's copy at a time), or [(path, getter of the value)] for any other."""
    if not is_stacked_path(path):
        return [(path, lambda: value)]
    # (mypy cannot type a lambda whose default binds the loop variable)
    return [(per_layer_path(path, i), lambda i=i: value[i]) for i in range(value.shape[0])]  # type: ignore[misc]


def stack_per_layer(read: Callable[[tuple], np.ndarray], path: tuple, count: int) -> np.ndarray:
    """A stacked parameter assembled on the host from `read(per-layer path)` of each layer."""
    return np.stack([read(per_layer_path(path, i)) for i in range(count)])
