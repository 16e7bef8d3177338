"""A tiny deterministic environment for runner tests, importable by spawned workers.

Importing this module registers kind "toy". The state is an integer; actions:
  "add <n>"     state += n (the observation shows the whole history, so any divergence shows)
  "raise"       raises inside step (the worker survives)
  "hang"        sleeps forever in Python (the worker's SIGALRM timer interrupts it)
  "hang_hard"   blocks SIGALRM, then sleeps forever (only killing the worker ends it)
  "exit"        os._exit(1), "sigkill" SIGKILLs its own worker process
  "noise"       a random observation: a replay of it diverges
  "finish"      ends the episode, won iff the state is a multiple of 3
Task payload "crash_on_reset": "exit" | "hang_hard" makes reset itself misbehave.
"""

from __future__ import annotations

import os
import signal
import time

from rlanything_jax.agents.envs.base import Observation, StepResult, Task, register_env

ACTIONS = ("add 1", "add 2", "add 5", "finish")


class ToyEnv:
    def __init__(self):
        self.task: Task | None = None
        self.state = 0
        self.history: list[str] = []

    def reset(self, task: Task) -> Observation:
        self.task, self.state, self.history = task, int(task.payload.get("start", 0)), []
        _misbehave(task.payload.get("crash_on_reset"))
        return self._observation()

    def step(self, action: str) -> StepResult:
        _misbehave(action)
        if action == "noise":
            return StepResult(Observation(os.urandom(8).hex(), ACTIONS), done=False, won=False)
        self.history.append(action)
        if action == "finish":
            return StepResult(self._observation(), done=True, won=self.state % 3 == 0, info={"state": self.state})
        if action.startswith("add "):
            self.state += int(action.split()[1])
        return StepResult(self._observation(), done=False, won=False, info={"state": self.state})

    def close(self) -> None:
        self.task = None

    def _observation(self) -> Observation:
        text = f"{self.task.task_id}: state {self.state} after {'/'.join(self.history) or 'nothing'}"
        return Observation(text, ACTIONS)


def _misbehave(action: str | None) -> None:
    if action == "raise":
        raise ValueError("toy env refuses this action")
    if action == "hang":
        time.sleep(1e6)
    if action == "hang_hard":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(1e6)
    if action == "exit":
        os._exit(1)
    if action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)


def toy_task(index: int, start: int = 0, **payload) -> Task:
    return Task(task_id=f"toy-{index}", kind="toy", goal="reach a multiple of 3",
                payload={"start": start, **payload})


register_env("toy", ToyEnv)
