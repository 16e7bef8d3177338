"""Vectorised environment runner: many live episodes spread over a few worker processes.

The rollout engine asks for one action per live episode and gets every result back in one
call; each worker receives one message per call holding all of its episodes' operations
and steps them in order. Workers are started with `spawn` (the parent runs multithreaded
JAX and must never fork); their side is `envs.env_worker`, and `envs.worker_processes` starts and
kills them. What the parent tracks of episodes, ops and requests is in `envs.runner_requests`.

Failures end only the episode that caused them, as an `EnvError`:
- an exception in `reset`/`step` is caught in the worker, which keeps running;
- a hang first meets a SIGALRM timer in the worker (interrupts Python-level hangs cheaply);
  one that ignores it is killed by the parent `kill_grace_s` later (so envs must leave
  SIGALRM / ITIMER_REAL alone);
- a worker that dies (os._exit, SIGKILL, segfault) or is killed is replaced by a fresh one.
The other episodes of a replaced worker are restored by re-creating their env and
replaying the actions the parent recorded (games are deterministic); a replay whose
observations differ from the recorded ones ends that episode as an EnvError.

A step or reset can also be submitted and its results collected later (`submit_step`,
`submit_reset`, then `.result()`), so the caller can decode other episodes' turns while these
environments step. Each worker runs one request at a time: a request for a busy worker waits
in that worker's queue, so an episode's operations always run in the order they were submitted.

Workers know env kinds through `base.make_env` (built-in families) plus `env_modules`,
modules each worker imports at start so that their `register_env` calls run there too.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rlanything_jax.agents.envs.base import Observation, StepResult, Task
from rlanything_jax.agents.envs.runner_requests import Episode, Op, Request
from rlanything_jax.agents.envs.worker_processes import kill_worker, spawn_worker


@dataclasses.dataclass(frozen=True)
class EnvError:
    """An episode the environment ended abnormally: exclude it from training."""

    episode_id: int
    reason: str
    cause: str    # "exception" | "timeout" | "crash" | "replay" | "worker"

    @property
    def env_error(self) -> bool:
        return True


# ----------------------------------------------------------------------------- parent side


_POLL_S = 0.1


class Submitted:
    """A submitted reset or step of an `EnvRunner`: `result()` waits for its results (id -> result, in the
    submitted order); replies to other requests that arrive meanwhile are filed with those."""

    def __init__(self, runner: EnvRunner, request: Request):
        self._runner, self._request = runner, request

    def result(self) -> dict[int, Any]:
        return self._runner._collect(self._request)


class EnvRunner:
    """Steps many episodes at once on `num_workers` processes (default: one per CPU core).

        with EnvRunner(num_workers=2, env_modules=("my.envs",)) as runner:
            observations = runner.reset({0: task_a, 1: task_b})   # Observation | EnvError
            results = runner.step({0: "go north", 1: "look"})      # StepResult | EnvError
            runner.close_episode(0)

    Not thread-safe: drive it from one long-lived thread (workers, including replacements,
    are killed by the kernel when the thread that started them exits)."""

    def __init__(self, num_workers: int | None = None, step_timeout_s: float = 30.0,
                 reset_timeout_s: float = 60.0, env_modules: Sequence[str] = (),
                 kill_grace_s: float = 2.0, startup_timeout_s: float = 120.0, start_method: str = "spawn"):
        self.step_timeout_s, self.reset_timeout_s = step_timeout_s, reset_timeout_s
        self.kill_grace_s, self.startup_timeout_s = kill_grace_s, startup_timeout_s
        self._env_modules = tuple(env_modules)
        self._ctx = mp.get_context(start_method)
        self._workers = [spawn_worker(self._ctx, self._env_modules) for _ in range(num_workers or os.cpu_count() or 1)]
        self._episodes: dict[int, Episode] = {}
        self._closing: list[list[int]] = [[] for _ in self._workers]
        self._busy: dict[int, tuple[Request, list[Op]]] = {}   # worker slot -> the batch it is running
        self._queued: dict[int, collections.deque] = collections.defaultdict(collections.deque)
        self._orphan_errors: dict[int, EnvError] = {}  # background restores that failed
        self._counts: collections.Counter = collections.Counter()
        self._closed = False

    # -- public API

    def reset(self, tasks: Mapping[int, Task], group: int = 0) -> dict[int, Observation | EnvError]:
        """Starts one episode per (new) id; each goes to the worker with the fewest live episodes of its
        `group` (episodes stepped together: spread, their step takes as long as the busiest worker's share),
        then the fewest of all."""
        return self.submit_reset(tasks, group).result()

    def step(self, actions: Mapping[int, str]) -> dict[int, StepResult | EnvError]:
        """One action per episode (any subset of the live ones). An id whose episode was lost
        while the caller was not stepping it gets its EnvError here."""
        return self.submit_step(actions).result()

    def submit_reset(self, tasks: Mapping[int, Task], group: int = 0) -> Submitted:
        """`reset` without waiting: the observations come from the returned handle's `result()`."""
        for episode_id in tasks:
            if episode_id in self._episodes:
                raise ValueError(f"episode {episode_id} is already live; close it first")
        loads = [[0, 0] for _ in self._workers]   # per worker: live episodes of `group`, of all groups
        for episode in self._episodes.values():
            loads[episode.slot][0] += episode.group == group
            loads[episode.slot][1] += 1
        ops = collections.defaultdict(list)
        for episode_id, task in tasks.items():
            slot = min(range(len(loads)), key=lambda s: (*loads[s], s))
            loads[slot][0] += 1
            loads[slot][1] += 1
            self._orphan_errors.pop(episode_id, None)
            self._episodes[episode_id] = Episode(task, slot, group)
            ops[slot].append(self._start_op(episode_id, task))
        return self._submit(ops, Request(tuple(tasks)))

    def submit_step(self, actions: Mapping[int, str]) -> Submitted:
        """`step` without waiting: the results come from the returned handle's `result()`. Until then the
        caller must not submit these episodes again (other episodes' steps and resets may go meanwhile)."""
        for episode_id in actions:
            if episode_id not in self._episodes and episode_id not in self._orphan_errors:
                raise KeyError(f"episode {episode_id} is not live (never reset, closed, or ended by an error)")
        request = Request(tuple(actions))
        ops = collections.defaultdict(list)
        for episode_id, action in actions.items():
            if episode_id in self._orphan_errors:
                request.results[episode_id] = self._orphan_errors.pop(episode_id)
            else:
                slot = self._episodes[episode_id].slot
                ops[slot].append(Op("step", episode_id, str(action), self.step_timeout_s))
        return self._submit(ops, request)

    def close_episode(self, episode_id: int) -> None:
        """Frees the episode; its env is closed with the worker's next request."""
        self._orphan_errors.pop(episode_id, None)
        episode = self._episodes.pop(episode_id, None)
        if episode is not None:
            self._closing[episode.slot].append(episode_id)

    def worker_of(self, episode_id: int) -> int:
        return self._episodes[episode_id].slot

    @property
    def live_episodes(self) -> list[int]:
        return list(self._episodes)

    @property
    def metrics(self) -> dict[str, float]:
        """Counts since construction: env_steps (caller-visible), resets, replayed_steps,
        env_errors (and env_errors/<cause>), worker_restarts, env_time_s (inside env code),
        wall_s (inside reset/step calls), plus live_episodes."""
        base = {"env_steps": 0, "resets": 0, "replays": 0, "replayed_steps": 0, "env_errors": 0,
                "worker_restarts": 0, "env_time_s": 0.0, "wall_s": 0.0}
        return {**base, **self._counts, "live_episodes": len(self._episodes)}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)
        # Let them close their envs, then kill whatever is left (without reaping first).
        mp_connection.wait([w.process.sentinel for w in self._workers], timeout=5.0)
        for worker in self._workers:
            kill_worker(worker)
        self._episodes.clear()

    def __enter__(self) -> EnvRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests

    def _submit(self, ops_by_slot: Mapping[int, list[Op]], request: Request) -> Submitted:
        if self._closed:
            raise RuntimeError("the runner is closed")
        for slot, ops in ops_by_slot.items():
            request.outstanding += 1
            self._queued[slot].append((request, ops))
            self._dispatch(slot)
        return Submitted(self, request)

    def _collect(self, request: Request) -> dict[int, Any]:
        started = time.perf_counter()
        while request.outstanding:
            if not self._busy:
                raise RuntimeError("a request is outstanding but no worker is running one (runner closed?)")
            self._wait_once()
        self._counts["wall_s"] += time.perf_counter() - started
        return {episode_id: request.results[episode_id] for episode_id in request.order}

    def _dispatch(self, slot: int) -> None:
        """Sends the worker its next queued batch if it is idle."""
        while slot not in self._busy and self._queued[slot]:
            self._send(slot, *self._queued[slot].popleft())

    def _send(self, slot: int, request: Request, ops: list[Op]) -> None:
        closes = [Op("close", e, None, self.step_timeout_s, report=False) for e in self._closing[slot]]
        self._closing[slot] = []
        ops = closes + ops
        worker = self._workers[slot]
        worker.progress.write(-1, time.monotonic())
        try:
            worker.conn.send([op.wire() for op in ops])
        except (OSError, ValueError):  # died while idle
            self._replace_worker(slot, request, ops, "crash")
            return
        self._busy[slot] = (request, ops)

    def _deadline(self, slot: int, ops: list[Op]) -> float:
        worker = self._workers[slot]
        index, started = worker.progress.read()
        if 0 <= index < len(ops):
            budget = ops[index].budget_s
        else:  # not started yet (a fresh worker is still importing) or sending its reply
            budget = self.startup_timeout_s if (index < 0 and worker.fresh) else self.step_timeout_s
        return started + budget + self.kill_grace_s

    def _wait_once(self) -> None:
        waitables = {}
        for slot in self._busy:
            worker = self._workers[slot]
            waitables[worker.conn] = waitables[worker.process.sentinel] = slot
        first_deadline = min(self._deadline(slot, ops) for slot, (_, ops) in self._busy.items())
        # Deadlines move as workers go from op to op (e.g. from start-up to a short step): re-read often.
        timeout = min(max(0.0, first_deadline - time.monotonic()), _POLL_S)
        ready = mp_connection.wait(list(waitables), timeout=timeout)
        for slot in sorted({waitables[r] for r in ready}):
            (request, ops), worker, replies = self._busy.pop(slot), self._workers[slot], None
            with contextlib.suppress(EOFError, OSError):
                if worker.conn.poll():
                    replies = worker.conn.recv()
            if replies is None:
                self._replace_worker(slot, request, ops, "crash")
            else:
                worker.fresh = False
                for op, reply in zip(ops, replies):
                    self._apply(op, *reply, request.results)
                request.outstanding -= 1
            self._dispatch(slot)
        now = time.monotonic()
        for slot, (request, ops) in list(self._busy.items()):
            if now > self._deadline(slot, ops):
                del self._busy[slot]
                self._replace_worker(slot, request, ops, "timeout")
                self._dispatch(slot)

    def _apply(self, op: Op, status: str, data: Any, seconds: float, results: dict) -> None:
        self._counts["env_time_s"] += seconds
        if op.kind == "close":
            return
        if status != "ok":
            return self._fail(op, EnvError(op.episode_id, data, status), results)
        try:
            value = pickle.loads(data)
        except Exception as e:
            error = EnvError(op.episode_id, f"result could not be unpickled: {e!r}", "exception")
            return self._fail(op, error, results)
        episode = self._episodes[op.episode_id]
        if op.kind == "step":
            result, digest = value
            episode.actions.append(op.arg)
            episode.digests.append(digest)
            self._counts["env_steps"] += 1
        else:
            result, digests = value
            recorded, actions = episode.digests, list(op.arg[1])
            if digests[:len(recorded)] != recorded:
                at = next(i for i, (a, b) in enumerate(zip(digests, recorded)) if a != b)
                reason = f"replay diverged from the recorded episode at step {at} (0 = reset)"
                return self._fail(op, EnvError(op.episode_id, reason, "replay"), results)
            replayed = max(len(recorded) - 1, 0)
            self._counts["resets" if not recorded else "replays"] += 1
            self._counts["replayed_steps"] += replayed
            self._counts["env_steps"] += len(actions) - replayed
            episode.actions, episode.digests = actions, list(digests)
        if op.report:
            results[op.episode_id] = result

    def _fail(self, op: Op, error: EnvError, results: dict) -> None:
        self._episodes.pop(op.episode_id, None)
        self._counts["env_errors"] += 1
        self._counts[f"env_errors/{error.cause}"] += 1
        if op.report:
            results[op.episode_id] = error
        else:
            self._orphan_errors[op.episode_id] = error

    def _replace_worker(self, slot: int, request: Request, ops: list[Op], cause: str) -> None:
        """Kills the worker, ends the episode it was running and restores the others: this batch of `request`
        is over, and a restore batch (if any) takes its place."""
        worker = self._workers[slot]
        index, _ = worker.progress.read()
        exit_code = kill_worker(worker)
        self._workers[slot] = spawn_worker(self._ctx, self._env_modules)
        self._counts["worker_restarts"] += 1
        culprit = ops[index] if 0 <= index < len(ops) else None
        # A fresh worker that fails before running anything would fail again: give up on its work.
        hopeless = culprit is None and worker.fresh
        what = "hung" if cause == "timeout" else f"died (exit code {exit_code})"
        # Episodes whose reset still waits in this worker's queue start there anyway.
        named = {op.episode_id for op in ops} | {op.episode_id for _, queued in self._queued[slot]
                                                 for op in queued if op.kind == "start"}
        background = [self._start_op(e, ep.task, ep.actions, report=False)
                      for e, ep in self._episodes.items() if ep.slot == slot and e not in named]
        restore = []
        for op in [op for op in ops if op.kind != "close"] + background:
            if op is culprit:
                error = EnvError(op.episode_id, f"worker {what} during this episode's {op.label}", cause)
                self._fail(op, error, request.results)
            elif hopeless:
                self._fail(op, EnvError(op.episode_id, f"a fresh worker {what} before running it", "worker"),
                           request.results)
            else:
                restore.append(self._restore_op(op))
        if restore:   # in this batch's place
            self._send(slot, request, restore)
        else:
            request.outstanding -= 1

    def _start_op(self, episode_id: int, task: Task, actions: Sequence[str] = (), report: bool = True) -> Op:
        budget = self.reset_timeout_s + len(actions) * self.step_timeout_s
        return Op("start", episode_id, (task, tuple(actions)), budget, report)

    def _restore_op(self, op: Op) -> Op:
        """The op that rebuilds the episode in a fresh worker, ending where `op` would have."""
        episode = self._episodes[op.episode_id]
        actions = (*episode.actions, op.arg) if op.kind == "step" else op.arg[1]
        return self._start_op(op.episode_id, episode.task, actions, op.report)
