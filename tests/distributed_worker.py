"""A process of a 2-process test run (tests/test_distributed.py): starts the distributed system from the
JAX_COORDINATOR_ADDRESS family, sums each process's index over all of them, then maybe fails."""

import sys

from rlanything_jax.core import distributed


def main() -> None:
    fail_in = int(sys.argv[1])   # the process that raises after the start (-1: none)
    lines = []
    # A long shutdown timeout: without the fail-fast hooks the survivor would wait it out.
    info = distributed.initialize(distributed.DistributedConfig(heartbeat_timeout_s=5, shutdown_timeout_s=100,
                                                                init_timeout_s=60), log=lines.append)
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    total = multihost_utils.process_allgather(np.array([info.index + 1]), tiled=True).sum()
    print(f"[{info.tag}] {lines[0]} | sum of indices+1 = {total}", flush=True)
    if info.index == fail_in:
        raise RuntimeError("a deliberate failure in one process")
    multihost_utils.sync_global_devices("done")   # the other process waits here for the failing one
    print(f"[{info.tag}] finished, {jax.device_count()} devices", flush=True)


if __name__ == "__main__":
    main()
