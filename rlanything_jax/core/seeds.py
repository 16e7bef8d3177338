"""One seed scheme for the whole run: a seed for each purpose, derived from the run's seed.

`derive_seed(seed, "rollout", step)` feeds the run's seed and the purpose's parts (strings
hashed stably, integers as they are) to numpy's `SeedSequence`, so every purpose gets an
independent, reproducible 31-bit seed, and no two purposes share one by accident (as
`seed * prime + step` schemes can).
"""

from __future__ import annotations

import hashlib

import numpy as np


def _entropy(part: int | str) -> int:
    if isinstance(part, (int, np.integer)) and not isinstance(part, bool):
        return int(part) & 0xFFFFFFFFFFFFFFFF
    return int.from_bytes(hashlib.sha256(str(part).encode()).digest()[:8], "big")


def derive_seed(seed: int, *purpose: int | str) -> int:
    """A 31-bit seed for `purpose` (e.g. "rollout", step), independent of every other purpose's."""
    sequence = np.random.SeedSequence([_entropy(seed), *(_entropy(p) for p in purpose)])
    return int(sequence.generate_state(1, np.uint32)[0] & 0x7FFFFFFF)


def derive_rng(seed: int, *purpose: int | str) -> np.random.Generator:
    """A numpy generator for `purpose` (see `derive_seed`)."""
    return np.random.default_rng(derive_seed(seed, *purpose))
