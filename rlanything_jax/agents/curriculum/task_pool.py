"""The task pool: slots holding a raw task, its active version, at most one pending candidate, and history.

Pure functions over frozen records: every update returns a new pool, and the pool
round-trips through JSON (it is part of the system checkpoint). One pool for the
whole run, not one per host: acceptance statistics are never split by node count.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from rlanything_jax.agents.curriculum.adaptation import accept_candidate
from rlanything_jax.agents.envs.base import Task


@dataclasses.dataclass(frozen=True)
class Candidate:
    task: Task
    goal: str          # "harder" or "easier"
    prev_acc: float    # the active task's accuracy when the rewrite was asked for
    proposed_at: int   # RL step


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    step: int
    task_id: str
    event: str         # "accepted" or "rejected"
    goal: str
    prev_acc: float
    now_acc: float | None


@dataclasses.dataclass(frozen=True)
class Slot:
    raw: Task                       # the original task: rewrites always start from it
    active: Task
    pending: Candidate | None = None
    history: tuple[HistoryEntry, ...] = ()


@dataclasses.dataclass(frozen=True)
class TaskPool:
    slots: tuple[Slot, ...]

    @classmethod
    def from_tasks(cls, tasks: Sequence[Task]) -> "TaskPool":
        ids = [t.task_id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids in a pool must be unique")
        return cls(tuple(Slot(raw=t, active=t) for t in tasks))

    @property
    def accepted_count(self) -> int:
        return sum(h.event == "accepted" for s in self.slots for h in s.history)


@dataclasses.dataclass(frozen=True)
class StepTasks:
    active: tuple[int, ...]     # slot indices whose active task is played this step
    pending: tuple[int, ...]    # slot indices whose pending candidate is played this step


def sample_step_tasks(pool: TaskPool, quota: int, rng: np.random.Generator) -> StepTasks:
    """`quota` random active slots without a pending candidate, plus every pending candidate."""
    pending = tuple(i for i, s in enumerate(pool.slots) if s.pending is not None)
    free = [i for i, s in enumerate(pool.slots) if s.pending is None]
    chosen = rng.choice(len(free), size=min(quota, len(free)), replace=False) if free else []
    return StepTasks(active=tuple(sorted(free[int(c)] for c in chosen)), pending=pending)


def resolve_candidates(pool: TaskPool, accuracy: Mapping[str, float | None], step: int,
                       low: float = 0.2, high: float = 0.8) -> tuple[TaskPool, list[str], list[str]]:
    """Accepts or rejects every pending candidate whose accuracy was measured this step.

    Accepted candidates become their slot's active task; rejected ones are dropped.
    Candidates that were not played (no accuracy) stay pending. Returns the new pool
    and the accepted and rejected task ids (rejected rollouts are not trained on).
    """
    accepted, rejected, slots = [], [], []
    for slot in pool.slots:
        candidate = slot.pending
        now = accuracy.get(candidate.task.task_id) if candidate else None
        if candidate is None or now is None:
            slots.append(slot)
            continue
        ok = bool(accept_candidate(candidate.goal, candidate.prev_acc, now, low, high))
        entry = HistoryEntry(step=step, task_id=candidate.task.task_id, event="accepted" if ok else "rejected",
                             goal=candidate.goal, prev_acc=candidate.prev_acc, now_acc=float(now))
        (accepted if ok else rejected).append(candidate.task.task_id)
        slots.append(dataclasses.replace(slot, active=candidate.task if ok else slot.active, pending=None,
                                         history=slot.history + (entry,)))
    return TaskPool(tuple(slots)), accepted, rejected


def propose(pool: TaskPool, slot_index: int, candidate: Candidate) -> TaskPool:
    """Makes `candidate` the slot's pending task (a slot holds at most one)."""
    slot = pool.slots[slot_index]
    if slot.pending is not None:
        raise ValueError(f"slot {slot_index} already has a pending candidate")
    slots = list(pool.slots)
    slots[slot_index] = dataclasses.replace(slot, pending=candidate)
    return TaskPool(tuple(slots))


# ---------------------------------------------------------------------- JSON

def _task_to_json(task: Task) -> dict[str, Any]:
    return {"task_id": task.task_id, "kind": task.kind, "goal": task.goal, "payload": dict(task.payload)}


def _task_from_json(data: Mapping[str, Any]) -> Task:
    return Task(task_id=data["task_id"], kind=data["kind"], goal=data["goal"], payload=dict(data["payload"]))


def pool_to_json(pool: TaskPool) -> dict[str, Any]:
    def slot_json(slot: Slot) -> dict[str, Any]:
        pending = None
        if slot.pending is not None:
            pending = dataclasses.asdict(slot.pending) | {"task": _task_to_json(slot.pending.task)}
        return {"raw": _task_to_json(slot.raw), "active": _task_to_json(slot.active), "pending": pending,
                "history": [dataclasses.asdict(h) for h in slot.history]}
    return {"slots": [slot_json(s) for s in pool.slots]}


def pool_from_json(data: Mapping[str, Any]) -> TaskPool:
    slots = []
    for s in data["slots"]:
        pending = None
        if s["pending"] is not None:
            pending = Candidate(**(dict(s["pending"]) | {"task": _task_from_json(s["pending"]["task"])}))
        slots.append(Slot(raw=_task_from_json(s["raw"]), active=_task_from_json(s["active"]), pending=pending,
                          history=tuple(HistoryEntry(**h) for h in s["history"])))
    return TaskPool(tuple(slots))
