"""Difficulty direction and the acceptance test for rewritten tasks (ALGORITHM.md 4.1-4.2).

Directions are integers so they live in arrays: HARDER = 1, EASIER = -1, KEEP = 0.
"""

from __future__ import annotations

import jax.numpy as jnp

HARDER, KEEP, EASIER = 1, 0, -1
DIRECTIONS = ("harder", "easier")  # what a task generator is asked for
_GOALS = {"harder": HARDER, "easier": EASIER, "keep": KEEP}


def difficulty_direction(acc: jnp.ndarray, low: float = 0.2, high: float = 0.8,
                         easier_inclusive: bool = True) -> jnp.ndarray:
    """HARDER for accuracy >= high, EASIER for accuracy <= low (< low with
    easier_inclusive=False, the coding scenario's rule), KEEP otherwise."""
    acc = jnp.asarray(acc, jnp.float32)
    easier = acc <= low if easier_inclusive else acc < low
    return jnp.where(acc >= high, HARDER, jnp.where(easier, EASIER, KEEP)).astype(jnp.int32)


def goal_code(goal) -> jnp.ndarray:
    """'harder' / 'easier' / 'keep', or their integer codes, as an int32 array."""
    if isinstance(goal, str):
        if goal not in _GOALS:
            raise ValueError(f"goal must be one of {sorted(_GOALS)}, got {goal!r}")
        return jnp.asarray(_GOALS[goal], jnp.int32)
    return jnp.asarray(goal, jnp.int32)


def accept_candidate(goal, prev_acc: jnp.ndarray, now_acc: jnp.ndarray, low: float = 0.2,
                     high: float = 0.8) -> jnp.ndarray:
    """Keep a rewritten task when its measured accuracy moved the intended way and stays useful:
    now > 0, and harder: low <= now < prev; easier: prev < now <= high."""
    goal = goal_code(goal)
    prev_acc = jnp.asarray(prev_acc, jnp.float32)
    now_acc = jnp.asarray(now_acc, jnp.float32)
    harder_ok = (goal == HARDER) & (now_acc < prev_acc) & (now_acc >= low)
    easier_ok = (goal == EASIER) & (now_acc > prev_acc) & (now_acc <= high)
    return (now_acc > 0) & (harder_ok | easier_ok)
