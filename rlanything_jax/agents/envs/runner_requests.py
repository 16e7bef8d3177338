"""What `envs.runner.EnvRunner` keeps of its work: the ops it sends to a worker (a reset with the actions to
replay, a step, a close), each live episode's record (its task, worker and the actions and observation digests
a replay must reproduce), and the reset or step requests a caller waits on."""

from __future__ import annotations

import dataclasses
from typing import Any

from rlanything_jax.agents.envs.base import Task


@dataclasses.dataclass(frozen=True)
class Op:
    kind: str                 # "start" (reset, then replay actions) | "step" | "close"
    episode_id: int
    arg: Any                  # start: (task, actions); step: action; close: None
    budget_s: float
    report: bool = True       # False for background restores the caller did not ask about

    @property
    def label(self) -> str:
        if self.kind == "start" and self.arg[1]:
            return f"restore (reset and replay of {len(self.arg[1])} actions)"
        return "reset" if self.kind == "start" else self.kind

    def wire(self) -> tuple:
        return self.kind, self.episode_id, self.arg, self.budget_s


@dataclasses.dataclass
class Episode:
    task: Task
    slot: int
    group: int = 0
    actions: list[str] = dataclasses.field(default_factory=list)
    digests: list[str] = dataclasses.field(default_factory=list)   # reset, then one per step


@dataclasses.dataclass
class Request:
    """One reset or step call: answered when every batch of it (one per worker, plus restores) has been."""

    order: tuple[int, ...]
    results: dict[int, Any] = dataclasses.field(default_factory=dict)
    outstanding: int = 0      # batches queued or running
