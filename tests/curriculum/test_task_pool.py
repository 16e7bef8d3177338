"""The task pool: sampling, acceptance at the band edges, and a JSON round trip."""

import json

import numpy as np
import pytest

from rlanything_jax.agents.curriculum.task_pool import (
    Candidate,
    TaskPool,
    pool_from_json,
    pool_to_json,
    propose,
    resolve_candidates,
    sample_step_tasks,
)
from rlanything_jax.agents.envs.base import Task


def _task(name: str) -> Task:
    return Task(task_id=name, kind="alfworld", goal=f"put a {name} in fridge.", payload={"path": f"/g/{name}"})


@pytest.fixture
def pool():
    return TaskPool.from_tasks([_task(f"t{i}") for i in range(5)])


def test_sampling_takes_quota_free_slots_and_every_pending(pool):
    pool = propose(pool, 2, Candidate(_task("t2-hard"), "harder", prev_acc=1.0, proposed_at=0))
    picked = sample_step_tasks(pool, quota=3, rng=np.random.default_rng(0))
    assert picked.pending == (2,)
    assert len(picked.active) == 3 and 2 not in picked.active and len(set(picked.active)) == 3
    # Asking for more than there is gives every free slot.
    assert sample_step_tasks(pool, quota=10, rng=np.random.default_rng(0)).active == (0, 1, 3, 4)


def test_one_pending_candidate_per_slot(pool):
    pool = propose(pool, 0, Candidate(_task("a"), "easier", 0.0, 0))
    with pytest.raises(ValueError, match="already has a pending"):
        propose(pool, 0, Candidate(_task("b"), "easier", 0.0, 0))


@pytest.mark.parametrize("goal, prev, now, accepted", [
    ("harder", 1.0, 0.5, True),
    ("harder", 1.0, 0.2, True),      # lower band edge is inside
    ("harder", 1.0, 0.125, False),   # below the band
    ("harder", 0.875, 0.875, False),  # did not get harder
    ("harder", 1.0, 0.0, False),     # unsolvable candidates are never kept
    ("easier", 0.0, 0.8, True),      # upper band edge is inside
    ("easier", 0.0, 0.875, False),
    ("easier", 0.125, 0.125, False),
    ("easier", 0.125, 0.5, True),
])
def test_resolution_follows_the_acceptance_rule(pool, goal, prev, now, accepted):
    pool = propose(pool, 1, Candidate(_task("t1-new"), goal, prev, proposed_at=3))
    new_pool, ok, bad = resolve_candidates(pool, {"t1-new": now}, step=4)
    slot = new_pool.slots[1]
    assert slot.pending is None
    assert slot.active.task_id == ("t1-new" if accepted else "t1")
    assert slot.raw.task_id == "t1"
    assert (ok, bad) == ((["t1-new"], []) if accepted else ([], ["t1-new"]))
    assert slot.history[-1].event == ("accepted" if accepted else "rejected")
    assert new_pool.accepted_count == int(accepted)


def test_unplayed_candidates_stay_pending(pool):
    pool = propose(pool, 1, Candidate(_task("t1-new"), "harder", 1.0, 0))
    new_pool, ok, bad = resolve_candidates(pool, {"t0": 0.5}, step=1)
    assert new_pool == pool and ok == [] and bad == []


def test_json_round_trip(pool):
    pool = propose(pool, 3, Candidate(_task("t3-new"), "easier", 0.125, 7))
    pool, _, _ = resolve_candidates(pool, {"t3-new": 0.5}, step=8)
    pool = propose(pool, 0, Candidate(_task("t0-new"), "harder", 0.875, 8))
    restored = pool_from_json(json.loads(json.dumps(pool_to_json(pool))))
    assert restored == pool
    assert restored.slots[0].pending.task.payload == {"path": "/g/t0-new"}
