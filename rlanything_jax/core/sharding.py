"""Device mesh and logical-axis sharding.

Parameters and activations are annotated with *logical* axis names ("embed",
"heads", "batch", ...). One rules table, kept in the config, maps each logical name
to zero or more mesh axes; this module turns annotations into `NamedSharding`s.
Nothing here relies on an ambient mesh: every sharding names its mesh explicitly.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

# logical axis -> mesh axes (a name, a tuple of names, or None for replicated).
DEFAULT_LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("norm", None),
    ("length", None),
    ("layers", None),
)

Rules = Sequence[tuple[str, Any]]


def mesh_axis_sizes(shape: Mapping[str, int], num_devices: int) -> dict[str, int]:
    """The size of each mesh axis (data, fsdp, tensor) for `num_devices`; one axis may be -1 (the rest)."""
    unknown = set(shape) - set(MESH_AXES)
    if unknown:
        raise ValueError(f"mesh.shape has unknown axes {sorted(unknown)}; allowed: {MESH_AXES}")
    sizes = [int(shape.get(axis, 1)) for axis in MESH_AXES]
    if sizes.count(-1) > 1:
        raise ValueError("mesh.shape: at most one axis may be -1")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if num_devices % known:
            raise ValueError(f"mesh.shape {dict(zip(MESH_AXES, sizes))}: {num_devices} devices "
                             f"are not divisible by {known}")
        sizes[sizes.index(-1)] = num_devices // known
    if math.prod(sizes) != num_devices:
        raise ValueError(f"mesh.shape {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} devices, "
                         f"but {num_devices} are available")
    return dict(zip(MESH_AXES, sizes))


def build_mesh(shape: Mapping[str, int], devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A mesh over axes (data, fsdp, tensor); one axis may be -1 to take the remaining devices."""
    devices = list(devices if devices is not None else jax.devices())
    sizes = mesh_axis_sizes(shape, len(devices))
    return jax.make_mesh(tuple(sizes.values()), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)


def _mesh_axes_for(name: str | None, rules: Rules) -> tuple[str, ...]:
    if name is None:
        return ()
    for logical, physical in rules:
        if logical == name:
            if physical is None:
                return ()
            return (physical,) if isinstance(physical, str) else tuple(physical)
    raise KeyError(f"logical axis {name!r} has no entry in sharding.logical_axis_rules")


def logical_to_spec(logical_axes: Sequence[str | None], rules: Rules, mesh: Mesh | None = None,
                    shape: Sequence[int] | None = None) -> PartitionSpec:
    """PartitionSpec for an array whose dims carry `logical_axes`.

    A mesh axis is used at most once per array (first dim wins). With `mesh` and
    `shape`, a mesh axis whose size does not divide the dim is dropped, so e.g. 2 kv
    heads on a 4-way tensor axis are replicated rather than failing to shard.
    """
    used: set[str] = set()
    spec = []
    for dim, name in enumerate(logical_axes):
        chosen = []
        for axis in _mesh_axes_for(name, rules):
            if axis in used:
                continue
            if mesh is not None and shape is not None:
                if shape[dim] % (math.prod(mesh.shape[a] for a in chosen) * mesh.shape[axis]):
                    continue
            chosen.append(axis)
            used.add(axis)
        spec.append(None if not chosen else chosen[0] if len(chosen) == 1 else tuple(chosen))
    return PartitionSpec(*spec)


def named_sharding(mesh: Mesh, logical_axes: Sequence[str | None], rules: Rules,
                   shape: Sequence[int] | None = None) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(logical_axes, rules, mesh, shape))


def variable_logical_axes(variable: nnx.Variable) -> tuple[str | None, ...]:
    axes = variable.get_metadata().get("logical_axes")
    ndim = len(variable.shape) if hasattr(variable, "shape") else np.ndim(variable[...])
    if axes is None:
        return (None,) * ndim
    if len(axes) != ndim:
        raise ValueError(f"logical_axes {axes} do not match a variable of rank {ndim}")
    return tuple(axes)


def state_shardings(state: nnx.State, mesh: Mesh, rules: Rules) -> nnx.State:
    """A pytree like `state` whose variable values are the `NamedSharding`s its rules give."""

    def to_sharding(variable: nnx.Variable):
        shape = variable.shape if hasattr(variable, "shape") else np.shape(variable[...])
        return variable.replace(named_sharding(mesh, variable_logical_axes(variable), rules, shape))

    return jax.tree.map(to_sharding, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def place(host_array: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """Puts a host array on devices, sending each device only its own shard."""
    return jax.make_array_from_callback(host_array.shape, sharding, lambda index: host_array[index])


def validate_rules(rules: Iterable[tuple[str, Any]], mesh_axes: Sequence[str] = MESH_AXES) -> None:
    """Fails with the offending entry when a rule names an unknown mesh axis or repeats a logical name."""
    seen: set[str] = set()
    for entry in rules:
        if len(entry) != 2 or not isinstance(entry[0], str):
            raise ValueError(f"sharding.logical_axis_rules entry {entry!r} must be (logical_name, mesh_axes)")
        logical, physical = entry
        if logical in seen:
            raise ValueError(f"sharding.logical_axis_rules names {logical!r} twice")
        seen.add(logical)
        axes = () if physical is None else (physical,) if isinstance(physical, str) else tuple(physical)
        for axis in axes:
            if axis not in mesh_axes:
                raise ValueError(f"sharding.logical_axis_rules[{logical!r}] names mesh axis {axis!r}; "
                                 f"mesh axes are {tuple(mesh_axes)}")
