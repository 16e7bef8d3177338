"""Difficulty direction and candidate acceptance at the band edges (ALGORITHM.md 4.1-4.2)."""

import jax
import numpy as np
import pytest

from rlanything_jax.agents.curriculum.adaptation import EASIER, HARDER, KEEP, accept_candidate, difficulty_direction


def test_difficulty_direction_band_edges():
    acc = np.array([0.0, 0.2, 0.2001, 0.5, 0.7999, 0.8, 1.0])
    np.testing.assert_array_equal(difficulty_direction(acc), [EASIER, EASIER, KEEP, KEEP, KEEP, HARDER, HARDER])
    # The coding scenario makes a task easier only below 0.2.
    np.testing.assert_array_equal(difficulty_direction(acc, easier_inclusive=False),
                                  [EASIER, KEEP, KEEP, KEEP, KEEP, HARDER, HARDER])


@pytest.mark.parametrize("goal,prev,now,accepted", [
    ("harder", 0.9, 0.2, True),     # at the low edge
    ("harder", 0.9, 0.19, False),   # below the band
    ("harder", 0.9, 0.9, False),    # not harder
    ("harder", 0.9, 0.5, True),
    ("harder", 0.25, 0.0, False),   # unsolvable
    ("easier", 0.1, 0.8, True),     # at the high edge
    ("easier", 0.1, 0.81, False),   # too easy now
    ("easier", 0.1, 0.1, False),    # not easier
    ("easier", 0.0, 0.5, True),
    ("keep", 0.5, 0.6, False),
])
def test_accept_candidate(goal, prev, now, accepted):
    assert bool(accept_candidate(goal, prev, now)) is accepted


def test_accept_candidate_vectorised_under_jit():
    goals = np.array([HARDER, EASIER, HARDER, EASIER])
    prev = np.array([1.0, 0.0, 0.875, 0.125])
    now = np.array([0.625, 0.25, 0.125, 0.875])
    out = jax.jit(accept_candidate)(goals, prev, now)
    np.testing.assert_array_equal(out, [True, True, False, False])
    with pytest.raises(ValueError, match="goal"):
        accept_candidate("sideways", 0.5, 0.5)
