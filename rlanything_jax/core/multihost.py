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

import functools
import itertools
import pickle
from collections.abc import Iterable
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


def barrier(name: str, timeout_s: float = 3600) -> None:
    """Waits until every process reaches the barrier of this name (no-op for one process). The coordination
    service's barrier, not a collective: a group of devices' first collective waits only 30 s for its peers
    (`form_collective_groups`), and a barrier exists to wait for slow work. A lost peer ends the wait sooner
    (the heartbeat)."""
    if jax.process_count() > 1:
        _coordination_client().wait_at_barrier(f"{name}/{next(_barriers)}", int(timeout_s * 1000))


def form_collective_groups(meshes: Iterable[jax.sharding.Mesh], timeout_s: float = 3600) -> int:
    """Connects, once and behind a barrier, every group of devices that programs on `meshes` (and this
    module's gathers) may reduce or gather over. Returns how many groups it used.

    On CPU, JAX's collectives (gloo) connect a group at its first collective and wait only 30 s, gloo's fixed
    rendezvous timeout, for the group's other processes: a process that compiles the first program using a
    group that much later than its peers (oversubscribed cores, one process's cold compilation cache) fails
    the run with "Gloo context initialization failed". A connected group lasts as long as the process, and
    a collective on it waits for its peers as long as XLA's collective timeout (minutes). GPUs and TPUs
    connect their groups otherwise: nothing to do there.

    The groups: XLA's partitioner also splits a mesh axis (an array dimension that 8 devices do not divide
    may be gathered over 2 x 4 of them), so each axis is cut into its prime factors and every set of those
    factors is one psum."""
    if jax.process_count() == 1 or jax.default_backend() != "cpu":
        return 0
    from jax.experimental import multihost_utils

    barrier("collective groups", timeout_s)
    groups = 0
    for mesh in dict.fromkeys(meshes):   # the learners' and the samplers' may be one mesh
        factors = [factor for size in mesh.devices.shape for factor in _prime_factors(size)]
        names = tuple(f"factor{i}" for i in range(len(factors)))
        factored = jax.sharding.Mesh(mesh.devices.reshape(factors), names)
        spec = jax.sharding.PartitionSpec(names)
        ones = jax.make_array_from_callback((factored.size,), jax.sharding.NamedSharding(factored, spec),
                                            lambda index: np.ones(1, np.float32))
        for subset in itertools.chain.from_iterable(itertools.combinations(names, n) for n in range(1, len(names) + 1)):
            summed = jax.shard_map(functools.partial(jax.lax.psum, axis_name=subset), mesh=factored,
                                   in_specs=spec, out_specs=spec)
            jax.block_until_ready(jax.jit(summed)(ones))
            groups += 1
    multihost_utils.process_allgather(np.zeros(1, np.float32))   # its own mesh: processes x local devices
    return groups + 1


def _prime_factors(n: int) -> list[int]:
    factors, divisor = [], 2
    while n > 1:
        while n % divisor == 0:
            factors.append(divisor)
            n //= divisor
        divisor += 1
    return factors


def _coordination_client():
    # JAX's coordination service client, reached as orbax reaches it.
    from jax._src import distributed

    return distributed.global_state.client


_barriers = itertools.count()   # every process passes the same barriers in the same order
