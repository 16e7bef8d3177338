"""One run over many processes (hosts): starting JAX's distributed system, failing fast, and saying who speaks.

`initialize(cfg.distributed)` starts `jax.distributed` when the config or the environment asks for
several processes, and does nothing for a single-process run:
- the config: `distributed.coordinator=host:port`, `num_processes`, `process_id`;
- the `JAX_COORDINATOR_ADDRESS` family: `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`;
- a cluster JAX detects by itself: Slurm (`srun` with more than one task), Open MPI (`mpirun -n N`, N > 1),
  Cloud TPU pods on GKE (`TPU_WORKER_HOSTNAMES` with several hosts); `distributed.mode=on` asks JAX to
  detect any other (a TPU VM slice through its metadata server, Kubernetes).

Failing fast (MULTIHOST.md section 4): an uncaught exception in one process would otherwise leave every
process waiting in JAX's shutdown barrier for `shutdown_timeout_s`, still heartbeating. `initialize` sets
short heartbeat and shutdown timeouts and installs exception hooks that print the traceback and end the
process at once (`os._exit`), so that the coordination service sees it gone and stops the others within
about one heartbeat timeout. `exit_now(code)` does the same for an orderly non-zero exit.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping

from rlanything_jax.core import validation

MODES = ("auto", "on", "off")
PEER_FAILURES = ("JaxRuntimeError", "XlaRuntimeError")   # what a collective raises when a peer is gone


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    mode: str = "auto"          # auto: start when the config or environment names several processes; on; off
    coordinator: str = ""       # host:port of process 0's coordination service ("": from the environment)
    num_processes: int = 0      # 0: from the environment
    process_id: int = -1        # -1: from the environment
    heartbeat_timeout_s: int = 10   # a dead or hung peer stops the others after about this long
    shutdown_timeout_s: int = 15
    init_timeout_s: int = 300       # processes of a pod can start minutes apart

    def __post_init__(self):
        validation.one_of("mode", self.mode, MODES)
        for key in ("heartbeat_timeout_s", "shutdown_timeout_s", "init_timeout_s"):
            validation.positive_int(key, getattr(self, key))
        validation.non_negative_int("num_processes", self.num_processes)
        if self.process_id < -1:
            raise validation.ConfigError("process_id", "must be -1 (from the environment) or a process index",
                                         self.process_id)
        if self.num_processes and self.process_id >= self.num_processes:
            raise validation.ConfigError("process_id", f"must be below num_processes={self.num_processes}",
                                         self.process_id)


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    index: int = 0
    count: int = 1

    @property
    def tag(self) -> str:
        """What every log line carries in a multi-process run ("" for one process)."""
        return f"p{self.index}/{self.count}" if self.count > 1 else ""


_current = ProcessInfo()


def current() -> ProcessInfo:
    return _current


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    return int(value) if value.lstrip("-").isdigit() else None


def cluster_in_environment(env: Mapping[str, str]) -> str | None:
    """The multi-process launcher the environment shows, or None (a single process, as far as it says)."""
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    if all(k in env for k in ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
                              "SLURM_LOCALID")) and (_int(env, "SLURM_NTASKS") or 1) > 1:
        return "Slurm"
    if "OMPI_MCA_orte_hnp_uri" in env and (_int(env, "OMPI_COMM_WORLD_SIZE") or 1) > 1:
        return "Open MPI"
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if len(hosts) > 1:
        return "Cloud TPU (GKE)"
    return None


def initialize_arguments(cfg: DistributedConfig, env: Mapping[str, str]) -> dict | None:
    """The keyword arguments for `jax.distributed.initialize`, or None when this run is one process."""
    if cfg.mode == "off":
        return None
    explicit = bool(cfg.coordinator) or cfg.num_processes > 1
    if cfg.mode == "auto" and not explicit and cluster_in_environment(env) is None:
        return None
    arguments = dict(initialization_timeout=cfg.init_timeout_s, heartbeat_timeout_seconds=cfg.heartbeat_timeout_s,
                     shutdown_timeout_seconds=cfg.shutdown_timeout_s)
    coordinator = cfg.coordinator or env.get("JAX_COORDINATOR_ADDRESS", "")
    num_processes = cfg.num_processes or _int(env, "JAX_NUM_PROCESSES")
    process_id = cfg.process_id if cfg.process_id >= 0 else _int(env, "JAX_PROCESS_ID")
    if coordinator:   # otherwise JAX's cluster detection supplies all three
        if num_processes is None or process_id is None:
            raise validation.ConfigError("distributed.coordinator", "with a coordinator address, give "
                                         "distributed.num_processes and distributed.process_id (or JAX_NUM_PROCESSES "
                                         "and JAX_PROCESS_ID)", coordinator)
        arguments.update(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
    return arguments


def initialize(cfg: DistributedConfig, log: Callable[[str], None] = print,
               env: Mapping[str, str] | None = None) -> ProcessInfo:
    """Starts the distributed system when asked (before any other JAX call) and returns this process's place."""
    global _current
    arguments = initialize_arguments(cfg, os.environ if env is None else env)
    if arguments is None:
        return _current
    import jax

    jax.distributed.initialize(**arguments)
    _current = ProcessInfo(index=jax.process_index(), count=jax.process_count())
    install_fail_fast(cfg.heartbeat_timeout_s)
    log(f"distributed: process {_current.index} of {_current.count}, {jax.local_device_count()} local of "
        f"{jax.device_count()} devices")
    return _current


def exit_now(code: int) -> None:
    """Ends this process at once (flushing its output) when it is one of several: the others then stop after
    one heartbeat timeout instead of waiting for the shutdown barrier. Returns for a single process."""
    if _current.count <= 1:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def install_fail_fast(heartbeat_timeout_s: float = 10) -> None:
    def on_exception(kind, value, tb) -> None:
        text = "".join(traceback.format_exception(kind, value, tb))
        sys.stderr.write(f"[{_current.tag}] uncaught exception, ending this process:\n{text}")
        if _current.count > 1 and kind.__name__ in PEER_FAILURES:
            # A collective failed, most likely because another process is gone (its sockets closed at once).
            # The coordination service notices within a heartbeat timeout and then ends this process with a
            # message naming the lost one; ending it now would leave only "connection reset" in the logs.
            sys.stderr.write(f"[{_current.tag}] a collective failed: another process is probably lost; waiting "
                             f"up to {heartbeat_timeout_s + 5:.0f} s for the coordination service to name it\n")
            sys.stderr.flush()
            time.sleep(heartbeat_timeout_s + 5)
        exit_now(1)
        sys.__excepthook__(kind, value, tb)

    def on_thread_exception(args) -> None:
        on_exception(args.exc_type, args.exc_value, args.exc_traceback)

    sys.excepthook = on_exception
    threading.excepthook = on_thread_exception
