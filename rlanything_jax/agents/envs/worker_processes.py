"""`envs.runner.EnvRunner`'s worker processes as the parent holds them: start one (its side runs
`envs.env_worker.worker_main`) and kill one together with the processes its environments started."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Sequence
from typing import Any

from rlanything_jax.agents.envs.env_worker import Progress, worker_main


@dataclasses.dataclass
class Worker:
    process: Any
    conn: Any
    progress: Progress
    fresh: bool = True        # has not answered a request yet


def spawn_worker(ctx: Any, env_modules: Sequence[str]) -> Worker:
    """A worker process started in the multiprocessing context `ctx`, importing `env_modules` first."""
    parent_conn, child_conn = ctx.Pipe()
    buffer = ctx.RawArray("d", 3)
    process = ctx.Process(target=worker_main, args=(child_conn, buffer, tuple(env_modules), os.getpid()),
                          daemon=True, name="env-worker")
    process.start()
    child_conn.close()
    return Worker(process, parent_conn, Progress(buffer))


def kill_worker(worker: Worker) -> int | None:
    """SIGKILLs the worker's process group (with any processes its envs started); returns its exit code."""
    pid = worker.process.pid
    with contextlib.suppress(ChildProcessError, ProcessLookupError, PermissionError):
        # Raises once reaped: only an unreaped pid is sure to still name our group.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        worker.process.kill()
    worker.process.join(timeout=5.0)
    worker.conn.close()
    return worker.process.exitcode
