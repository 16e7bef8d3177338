"""A process of tests/test_distributed.py's late-peer run: 2 processes x 2 CPU devices connect their device
groups (`multihost.form_collective_groups`), then process 1 reaches the first program that reduces over a
group the mesh's axes do not name (its fsdp axis cut in two) 35 s after process 0: beyond gloo's 30 s for
connecting a group, well within the time a connected group waits for a late peer."""

import sys
import time

from rlanything_jax.core import distributed, multihost, sharding

LATE_S = 35


def group_keys() -> set[str]:
    """The device groups gloo has connected: its keys in the coordination service, cpu:gloo/<devices>/<rank>."""
    return {key.split("/")[1] for key, _ in multihost._coordination_client().key_value_dir_get_bytes("cpu:gloo/")}


def main() -> None:
    info = distributed.initialize(distributed.DistributedConfig(heartbeat_timeout_s=5, init_timeout_s=60))
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = sharding.build_mesh({"fsdp": -1})
    groups = multihost.form_collective_groups([mesh]) if sys.argv[1:] == ["form"] else 0
    formed = group_keys()
    if info.index == 1:
        time.sleep(LATE_S)
    halves = jax.sharding.Mesh(mesh.devices.reshape(2, 2), ("outer", "inner"))   # fsdp = outer x inner
    spec = PartitionSpec(("outer", "inner"))
    ones = jax.make_array_from_callback((4,), NamedSharding(halves, spec), lambda index: np.ones(1, np.float32))
    summed = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "outer"), mesh=halves, in_specs=spec, out_specs=spec))
    total = float(multihost.to_host(summed(ones)).sum())
    multihost.barrier("done")
    print(f"[{info.tag}] {groups} groups formed; sum {total}; groups connected later: "
          f"{sorted(group_keys() - formed)}", flush=True)


if __name__ == "__main__":
    main()
