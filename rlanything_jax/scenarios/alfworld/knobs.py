"""Difficulty knobs of the generated ALFWorld games, and the procedural harder/easier moves.

The knobs: how many receptacles the room keeps, how many distractor objects, how rare the goal
types are (ranked by how many of the 120 ALFRED rooms contain them), whether the targets start
inside closed receptacles, and how many target instances exist. `harder_knobs` / `easier_knobs`
move the least / most advanced knob one notch, so difficulty climbs evenly.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GameKnobs:
    num_receptacles: int = 10       # receptacle instances kept from the room (the needed ones always stay)
    num_distractors: int = 4        # non-goal objects scattered over the receptacles
    rarity: int = 0                 # goal types drawn from the 0 common / 1 middle / 2 rare third
    hidden_in_closed: bool = False  # targets start inside closed receptacles (drawer, fridge, ...)
    target_instances: int = 2       # instances of the goal object type (pick_two needs at least 2)


# (field, easiest value, hardest value, step): the ladder harder_knobs/easier_knobs climb.
_KNOB_LADDER = (
    ("num_distractors", 0, 20, 3),
    ("num_receptacles", 4, 30, 4),
    ("rarity", 0, 2, 1),
    ("hidden_in_closed", False, True, 1),
    ("target_instances", 3, 1, 1),
)


def _knob_difficulty(knobs: GameKnobs, field: str, easy, hard) -> float:
    value = getattr(knobs, field)
    return min(1.0, max(0.0, (float(value) - float(easy)) / (float(hard) - float(easy))))


def _move_knobs(knobs: GameKnobs, harder: bool) -> GameKnobs:
    """Moves the least (harder) or most (easier) advanced knob one notch, so difficulty climbs evenly."""
    level = {f: _knob_difficulty(knobs, f, e, h) for f, e, h, _ in _KNOB_LADDER}
    movable = [k for k in _KNOB_LADDER if (level[k[0]] < 1.0 if harder else level[k[0]] > 0.0)]
    if not movable:
        return knobs
    field, easy, hard, step = (min if harder else max)(movable, key=lambda k: level[k[0]])
    if isinstance(easy, bool):
        return dataclasses.replace(knobs, **{field: harder})
    direction = (1 if hard > easy else -1) * (1 if harder else -1)
    lo, hi = min(easy, hard), max(easy, hard)
    return dataclasses.replace(knobs, **{field: min(hi, max(lo, getattr(knobs, field) + direction * step))})


def harder_knobs(knobs: GameKnobs) -> GameKnobs:
    return _move_knobs(knobs, harder=True)


def easier_knobs(knobs: GameKnobs) -> GameKnobs:
    return _move_knobs(knobs, harder=False)


def knobs_difficulty(knobs: GameKnobs) -> float:
    """Mean position of the knobs on their ladders: 0 easiest, 1 hardest."""
    return sum(_knob_difficulty(knobs, f, e, h) for f, e, h, _ in _KNOB_LADDER) / len(_KNOB_LADDER)
