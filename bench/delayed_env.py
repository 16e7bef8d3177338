"""A slow environment for bench/rollout.py: a registered game whose every step also waits a fixed time.

Importing this module registers kind "delayed". A delayed task carries the inner game's kind and the wait
in its payload (`delayed`); the wait stands for what a desktop spends outside the game logic (an action,
the settle wait, a screenshot: OSWORLD.md measures 0.2 s + settle + 0.12-0.3 s), so that the environment's
share of a rollout can be set against the sampler's.
"""

from __future__ import annotations

import dataclasses
import time

from rlanything_jax.agents.envs.base import Observation, StepResult, Task, make_env, register_env


def delayed(task: Task, step_s: float) -> Task:
    return dataclasses.replace(task, kind="delayed", payload={**task.payload, "inner_kind": task.kind,
                                                             "step_s": step_s})


class DelayedEnv:
    def __init__(self):
        self.inner, self.step_s = None, 0.0

    def reset(self, task: Task) -> Observation:
        self.inner, self.step_s = make_env(task.payload["inner_kind"]), float(task.payload["step_s"])
        return self.inner.reset(dataclasses.replace(task, kind=task.payload["inner_kind"]))

    def step(self, action: str) -> StepResult:
        time.sleep(self.step_s)
        return self.inner.step(action)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


register_env("delayed", DelayedEnv)
