"""What a stage did, by name: the counts it returns beside its records.

A stage (rollouts, judging, examples, a training phase, the curriculum's proposals) returns
`(records, counts)`; the loop adds the counts of its stages into the step's metrics. No stage
writes into a dict it was handed, so a stage's counts are its own and a call reports only itself.
"""

from __future__ import annotations

from collections.abc import Mapping

Counts = Mapping[str, float]   # read-only for whoever receives them


def add_counts(*parts: Counts) -> dict[str, float]:
    """The parts added key by key (a key in several parts: the sum of its values)."""
    total: dict[str, float] = {}
    for part in parts:
        for name, value in part.items():
            total[name] = total.get(name, 0) + value
    return total
