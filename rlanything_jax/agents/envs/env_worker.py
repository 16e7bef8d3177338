"""The worker side of `envs.runner.EnvRunner`: the process that owns environments and runs the
operations the parent sends (start = reset and replay, step, close), one message per call.

Also what both sides share: the shared-memory progress record the parent reads to time
each operation, and the digest a replay must reproduce.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import pickle
import signal
import time
from collections.abc import Sequence
from typing import Any

from rlanything_jax.agents.envs.base import Observation, StepResult, Task, make_env

# ----------------------------------------------------------------------------- shared progress


class Progress:
    """(index of the operation a worker is running, when it started), in shared memory.

    A seqlock rather than a lock: a worker killed while holding a lock would leave the
    parent blocked forever. Written by the parent just before a request and by the worker
    while it runs it, never both at once."""

    def __init__(self, buffer):
        self._buf = buffer      # RawArray("d", 3): sequence number, op index, start time

    def write(self, index: int, started_at: float) -> None:
        b = self._buf
        b[0] += 1
        b[1], b[2] = index, started_at
        b[0] += 1

    def read(self) -> tuple[int, float]:
        b = self._buf
        for _ in range(1000):  # a worker killed mid-write leaves an odd sequence number
            seq, index, started = b[0], b[1], b[2]
            if seq == b[0] and seq % 2 == 0:
                break
        return int(index), started


# ----------------------------------------------------------------------------- worker side


class _SoftTimeout(BaseException):
    """BaseException, so an environment's `except Exception` does not swallow it."""


_alarm_armed = False


def _on_alarm(signum, frame):
    if _alarm_armed:
        raise _SoftTimeout()


@contextlib.contextmanager
def _alarm(seconds: float):
    global _alarm_armed
    _alarm_armed = True
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        _alarm_armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def _digest(result: Observation | StepResult) -> str:
    """What a replay must reproduce: text, actions, done and won (not images or info)."""
    obs = result.observation if isinstance(result, StepResult) else result
    key = (obs.text, obs.admissible_actions, getattr(result, "done", None), getattr(result, "won", None))
    return hashlib.blake2b(repr(key).encode(), digest_size=8).hexdigest()


def _close_quietly(env) -> None:
    if env is not None:
        with contextlib.suppress(Exception):
            env.close()


def _start_episode(envs: dict, episode_id: int, task: Task, actions: Sequence[str]):
    _close_quietly(envs.pop(episode_id, None))
    env = envs[episode_id] = make_env(task.kind)
    result = env.reset(task)
    digests = [_digest(result)]
    for action in actions:
        result = env.step(action)
        digests.append(_digest(result))
    return result, digests


def _run_op(op: tuple, envs: dict, boot_error: str | None) -> tuple[str, Any, float]:
    """(status, pickled value or reason, seconds); status is "ok" or the failure's cause."""
    kind, episode_id, arg, budget_s = op
    started = time.perf_counter()
    try:
        if boot_error:
            raise RuntimeError(boot_error)
        with _alarm(budget_s):
            if kind == "close":
                _close_quietly(envs.pop(episode_id, None))
                value = None
            elif kind == "start":
                value = _start_episode(envs, episode_id, *arg)
            else:
                result = envs[episode_id].step(arg)
                value = result, _digest(result)
        return "ok", pickle.dumps(value), time.perf_counter() - started
    except _SoftTimeout:
        status, reason = "timeout", f"{kind} exceeded its {budget_s:.1f}s timeout"
    except BaseException as e:  # SystemExit included: the env ends, the worker goes on
        status, reason = "exception", f"{kind} raised {type(e).__name__}: {e}"
    _close_quietly(envs.pop(episode_id, None))
    return status, reason, time.perf_counter() - started


def _die_with_parent(parent_pid: int) -> None:
    """A hung worker never reads the EOF of a dead parent: have the kernel kill it then.
    (Linux ties this to the parent *thread* that started the worker.)"""
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def worker_main(conn, progress_buffer, env_modules: Sequence[str], parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    with contextlib.suppress(OSError):
        os.setsid()  # own process group: killing it also kills processes an env started
    progress = Progress(progress_buffer)
    boot_error = None
    for module in env_modules:
        try:
            importlib.import_module(module)
        except BaseException as e:
            boot_error = f"worker could not import env module {module!r}: {type(e).__name__}: {e}"
    signal.signal(signal.SIGALRM, _on_alarm)
    envs: dict[int, Any] = {}
    try:
        while True:
            try:
                ops = conn.recv()
            except EOFError:  # the parent is gone
                return
            if ops is None:
                return
            replies = []
            for index, op in enumerate(ops):
                progress.write(index, time.monotonic())
                replies.append(_run_op(op, envs, boot_error))
            progress.write(len(ops), time.monotonic())
            conn.send(replies)
    finally:
        for env in envs.values():
            _close_quietly(env)
