"""N processes of M CPU devices on this machine: one distributed JAX run, as a pod's hosts would run it.

    python launchers/local_multiprocess.py --num_processes=2 --devices_per_process=4 \
        -- --config=configs/default.py:smoke

Every process runs `python -m rlanything_jax.main <arguments after -->` (or `--module`) with the
`JAX_COORDINATOR_ADDRESS` family set (`rlanything_jax/core/distributed.py` reads it), JAX on the CPU and
`JAX_NUM_CPU_DEVICES=M`. Each process's output goes to `<log_dir>/process_<i>.log` (a pipe could fill
and stall a process). The first process to fail ends the others (SIGTERM, then SIGKILL after
`--grace_s`); the launcher's exit code is that first failure's, 0 when all succeed. Ctrl-C is passed on.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     usage="%(prog)s [options] -- <arguments of rlanything_jax.main>")
    parser.add_argument("--num_processes", type=int, default=2)
    parser.add_argument("--devices_per_process", type=int, default=4)
    parser.add_argument("--log_dir", default=None, help="default: runs/multiprocess_logs/<time>")
    parser.add_argument("--port", type=int, default=0, help="the coordinator's port (default: a free one)")
    parser.add_argument("--module", default="rlanything_jax.main", help="what each process runs (python -m)")
    parser.add_argument("--grace_s", type=float, default=10.0, help="SIGTERM to SIGKILL, for the others")
    args = parser.parse_args(own)
    if args.num_processes < 1 or args.devices_per_process < 1:
        parser.error("--num_processes and --devices_per_process must be at least 1")
    return args, rest


def process_env(index: int, args: argparse.Namespace, port: int) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(args.devices_per_process),
           "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": str(args.num_processes),
           "JAX_PROCESS_ID": str(index), "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    env.pop("XLA_FLAGS", None)   # a forced device count there would fight JAX_NUM_CPU_DEVICES
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def stop(procs: list[subprocess.Popen], grace_s: float) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(sys.argv[1:] if argv is None else argv)
    log_dir = Path(args.log_dir or ROOT / "runs" / "multiprocess_logs" / time.strftime("%Y%m%d-%H%M%S"))
    log_dir.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port()
    logs = [log_dir / f"process_{i}.log" for i in range(args.num_processes)]
    procs = [subprocess.Popen([sys.executable, "-m", args.module, *rest], env=process_env(i, args, port),
                              stdout=logs[i].open("w"), stderr=subprocess.STDOUT, cwd=os.getcwd())
             for i in range(args.num_processes)]
    print(f"{args.num_processes} processes x {args.devices_per_process} CPU devices, coordinator 127.0.0.1:{port}, "
          f"logs in {log_dir}", flush=True)
    # One waiting thread per process: exits arrive in the order they happened, so the first failure is known
    # even when the others die a moment later (the coordination service stops them).
    exits: queue.Queue = queue.Queue()
    for index, proc in enumerate(procs):
        threading.Thread(target=lambda i=index, p=proc: exits.put((i, p.wait())), daemon=True).start()
    first_failure: tuple[int, int] | None = None   # (process, exit code)
    try:
        for _ in procs:
            index, code = exits.get()
            if code and first_failure is None:
                first_failure = (index, code)
                print(f"process {index} failed (exit {code}); ending the others", flush=True)
                stop(procs, args.grace_s)
    except KeyboardInterrupt:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        stop(procs, args.grace_s)
        return 130
    for index, proc in enumerate(procs):
        print(f"process {index}: exit {proc.returncode} ({logs[index]})", flush=True)
    if first_failure is None:
        return 0
    index, code = first_failure
    print(f"--- the end of process {index}'s log ---\n{tail(logs[index])}", flush=True)
    return code if code > 0 else 128 - code   # a signal's death (-N) as the shell reports it (128 + N)


if __name__ == "__main__":
    sys.exit(main())
