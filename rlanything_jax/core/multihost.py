"""Moving values between hosts and global arrays, the same way for one process and for many.

A multi-process run is SPMD: every process runs the same host logic and the same jitted programs in
the same order, over a mesh that spans every process's devices. Three things differ from one process:
- a program's array inputs must be global arrays: `to_device` builds them from host values that every
  process holds (each process hands over only the rows of its own devices);
- an output sharded over several processes cannot be read directly: `to_host` gathers it first;
- host work that is split between processes (each drives the environments of its share of the
  episodes) comes back together through `allgather_objects`, so that every process goes on with the
  same values and takes the same decisions.
For a single process these are a `device_put`, an `np.asarray` and a one-element list.
"""

from __future__ import annotations

import pickle
from typing import Any

import jax
import numpy as np


def is_primary() -> bool:
    """Whether this process writes the run's files (metrics, plots, summary, traces): process 0."""
    return jax.process_index() == 0


def to_device(tree: Any, shardings: Any) -> Any:
    """Host values (numpy or Python scalars; every process holds the same) -> global arrays on `shardings`
    (a sharding, or a pytree of them matching `tree`)."""
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def one(value, sharding):
        if isinstance(value, jax.Array) and not value.is_fully_addressable:
            if value.sharding.device_set == sharding.device_set:
                return jax.device_put(value, sharding)   # global to global: resharded on the devices
            return _to_partner_devices(value, sharding)
        host = np.asarray(value)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda value: one(value, shardings), tree)
    return jax.tree.map(one, tree, shardings)


def _to_partner_devices(value: jax.Array, sharding: jax.sharding.NamedSharding) -> jax.Array:
    """A global array moved to another mesh of the same shape whose devices pair up with its own inside
    each process (`placement.build_meshes`): resharded to the target's layout on its own devices, then each
    shard copied to its partner device (JAX's device_put refuses a cross-host move between device sets)."""
    source = value.sharding
    if not (isinstance(source, jax.sharding.NamedSharding) and isinstance(sharding, jax.sharding.NamedSharding)
            and source.mesh.devices.shape == sharding.mesh.devices.shape):
        raise ValueError("moving an array between device groups needs two meshes of the same shape")
    partner = dict(zip(source.mesh.devices.flat, sharding.mesh.devices.flat))
    laid_out = jax.device_put(value, jax.sharding.NamedSharding(source.mesh, sharding.spec))
    shards = []
    for shard in laid_out.addressable_shards:
        target = partner[shard.device]
        if target.process_index != shard.device.process_index:
            raise ValueError(f"device {target} does not belong to the process of {shard.device}")
        shards.append(jax.device_put(shard.data, target))
    return jax.make_array_from_single_device_arrays(value.shape, sharding, shards)


def to_host(tree: Any) -> Any:
    """Global arrays -> numpy arrays, on every process (a collective when an array spans processes: every
    process must call it for the same arrays in the same order)."""
    def one(value):
        if not isinstance(value, jax.Array) or value.is_fully_addressable or value.is_fully_replicated:
            return np.asarray(value)
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(value, tiled=True))

    return jax.tree.map(one, tree)


def allgather_objects(value: Any) -> list[Any]:
    """Every process's `value` (any picklable object), in process order, on every process."""
    if jax.process_count() == 1:
        return [value]
    from jax.experimental import multihost_utils

    payload = np.frombuffer(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.asarray([payload.size], np.int64))).reshape(-1)
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[:payload.size] = payload
    gathered = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
    return [pickle.loads(gathered[i, :int(size)].tobytes()) for i, size in enumerate(sizes)]


def barrier(name: str) -> None:
    """Waits until every process reaches the barrier of this name (no-op for one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
