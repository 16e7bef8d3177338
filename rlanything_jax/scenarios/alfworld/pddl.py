"""Reading ALFWorld PDDL problems: the :init facts, the goal's types, the names the game shows,
and the English summary of :init that the environment-model LLM reads.

Works on the problem text alone (generated or rewritten), so the expert and the goal rewrite
never depend on how a game was made.
"""

from __future__ import annotations

import collections
import dataclasses
import re

from rlanything_jax.scenarios.alfworld.gen import LIGHT_TYPES, STATE_CHANGES, alfred_constants

_FACT = re.compile(r"\(\s*([A-Za-z][\w-]*)((?:\s+[^\s()]+)*)\s*\)")
_GOAL_OBJECT_TYPE = re.compile(r"\(\s*objectType\s+\?\w+\s+(\w+?)Type\s*\)")
_GOAL_RECEPTACLE_TYPE = re.compile(r"\(\s*receptacleType\s+\?\w+\s+(\w+?)Type\s*\)")
CAPABILITIES = ("pickupable", "cleanable", "heatable", "coolable", "sliceable", "toggleable")


def block(text: str, head: str) -> tuple[int, int]:
    """(start, end) of the balanced `(:head ...)` block; raises if absent."""
    start = text.find(f"(:{head}")
    if start < 0:
        raise ValueError(f"no (:{head} ...) block in the PDDL problem")
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return start, i + 1
    raise ValueError(f"unbalanced (:{head} ...) block")


def replace_goal(problem: str, new_goal: str) -> str:
    start, end = block(problem, "goal")
    return problem[:start] + new_goal + problem[end:]


def goal_types(problem: str) -> tuple[list[str], list[str]]:
    """Object and receptacle types named in :goal, in order of appearance ("Apple", not "AppleType")."""
    start, end = block(problem, "goal")
    goal = problem[start:end]
    return (list(dict.fromkeys(_GOAL_OBJECT_TYPE.findall(goal))),
            list(dict.fromkeys(_GOAL_RECEPTACLE_TYPE.findall(goal))))


def display_names(entity_ids) -> dict[str, str]:
    """Names the game shows ("apple 2", "sinkbasin 1") for PDDL ids.

    ALFWorld's demangler numbers the instances of each class (the id before the first `_bar_`,
    with "basin" appended for sink and bathtub basins) in reverse order of the lowercased ids.
    The engine lowercases names, so the ids are lowercased first.
    """
    by_class = collections.defaultdict(list)
    for eid in sorted({e.lower() for e in entity_ids}):
        head, sep, _ = eid.partition("_bar_")
        if sep:
            by_class[head + ("basin" if "basin" in eid else "")].append(eid)
    names = {}
    for cls, ids in by_class.items():
        for number, eid in enumerate(reversed(ids), start=1):
            names[eid] = f"{cls} {number}"
    return {e: names.get(e.lower(), e.lower()) for e in entity_ids}


@dataclasses.dataclass(frozen=True)
class ProblemFacts:
    object_type: dict[str, str]           # object id -> "Apple"
    receptacle_type: dict[str, str]       # receptacle id -> "Fridge"
    receptacle_location: dict[str, str]   # receptacle id -> location id
    contained_in: dict[str, str]          # object id -> receptacle id it starts in
    openable: frozenset[str]
    opened: frozenset[str]
    capabilities: dict[str, frozenset[str]]  # "cleanable" -> object ids
    can_contain: frozenset[tuple[str, str]]  # (receptacle type, object type) pairs
    agent_location: str
    names: dict[str, str]                 # id -> name in the game ("fridge 1")

    def objects_of_type(self, otype: str) -> list[str]:
        return sorted(o for o, t in self.object_type.items() if t == otype)

    def receptacles_of_type(self, rtype: str) -> list[str]:
        return sorted(r for r, t in self.receptacle_type.items() if t == rtype)

    def has(self, capability: str, obj: str) -> bool:
        return obj in self.capabilities.get(capability, frozenset())


def _strip_type(name: str) -> str:
    return name.removesuffix("Type")


def parse_problem(problem: str) -> ProblemFacts:
    start, end = block(problem, "init")
    facts = [(m.group(1), m.group(2).split()) for m in _FACT.finditer(problem[start + len("(:init"):end - 1])]
    by_pred = collections.defaultdict(list)
    for pred, args in facts:
        by_pred[pred].append(args)
    agent_locations = [a[1] for a in by_pred["atLocation"]]
    entities = {x for _, args in facts for x in args}
    return ProblemFacts(
        object_type={o: _strip_type(t) for o, t in by_pred["objectType"]},
        receptacle_type={r: _strip_type(t) for r, t in by_pred["receptacleType"]},
        receptacle_location={r: loc for r, loc in by_pred["receptacleAtLocation"]},
        contained_in={o: r for o, r in by_pred["inReceptacle"]},
        openable=frozenset(a[0] for a in by_pred["openable"]),
        opened=frozenset(a[0] for a in by_pred["opened"]),
        capabilities={c: frozenset(a[0] for a in by_pred[c]) for c in CAPABILITIES},
        can_contain=frozenset((_strip_type(r), _strip_type(o)) for r, o in by_pred["canContain"]),
        agent_location=agent_locations[0] if agent_locations else "",
        names=display_names(entities),
    )


# ---------------------------------------------------------------- English summary of :init

def _room_kind(facts: ProblemFacts) -> str:
    rtypes = set(facts.receptacle_type.values())
    for kind, marks in (("kitchen", {"Fridge", "Microwave", "StoveBurner"}), ("bathroom", {"Toilet", "BathtubBasin"}),
                        ("bedroom", {"Bed"}), ("living room", {"Sofa", "TVStand"})):
        if rtypes & marks:
            return kind
    return "room"


def summarize_facts(facts: ProblemFacts, task_type: str, goal_object: str, goal_receptacle: str,
                    goal_sentence: str = "") -> str:
    """What the environment model needs to propose a new goal: types present, where, capabilities,
    which receptacle type can hold which object type, and the current goal."""
    names = facts.names
    lines = [f"The game is a {_room_kind(facts)}. The agent starts in the middle of the room, holding nothing."]

    lines.append("\nReceptacle types present (instances):")
    rtypes = sorted(set(facts.receptacle_type.values()))
    for rtype in rtypes:
        instances = facts.receptacles_of_type(rtype)
        closed = sum(r in facts.openable and r not in facts.opened for r in instances)
        note = f"; openable, {closed} closed at start" if any(r in facts.openable for r in instances) else ""
        lines.append(f"- {rtype}: {', '.join(sorted(names[r] for r in instances))}{note}")

    lines.append("\nObject types present (count: where each instance starts; capabilities):")
    otypes = sorted(set(facts.object_type.values()))
    for otype in otypes:
        instances = facts.objects_of_type(otype)
        where = ", ".join(sorted(f"{names[o]} in {names[facts.contained_in[o]]}" if o in facts.contained_in
                                 else names[o] for o in instances))
        caps = [c for c in CAPABILITIES if any(facts.has(c, o) for o in instances)]
        lines.append(f"- {otype} ({len(instances)}): {where}; {', '.join(caps) or 'no capabilities'}")

    lines.append("\nWhich present receptacle types can contain each pickupable object type (canContain):")
    for otype in otypes:
        holders = sorted(r for r in rtypes if (r, otype) in facts.can_contain)
        if otype not in LIGHT_TYPES:
            lines.append(f"- {otype}: {', '.join(holders) or 'none'}")

    lines.append("\nAppliances: clean in SinkBasin, heat in Microwave, cool in Fridge; a DeskLamp/FloorLamp "
                 "is used (toggled) to look at an object under it.")
    for _, appliance, verb in STATE_CHANGES.values():
        lines.append(f"- {verb}: {appliance} {'present' if appliance in rtypes else 'absent'}")
    lights = sorted(o for o, t in facts.object_type.items() if t in LIGHT_TYPES)
    lines.append("- lights: " + (", ".join(f"{names[o]} in {names[facts.contained_in[o]]}" for o in lights
                                           if o in facts.contained_in) or "none"))

    second = "light type" if task_type == "look_at_obj_in_light" else "receptacle type"
    lines.append(f"\nCurrent goal ({task_type}): object type {goal_object}, {second} {goal_receptacle}"
                 + (f' — "{goal_sentence}"' if goal_sentence else "") + ".")
    return "\n".join(lines)


def known_type(name: str) -> str | None:
    """Canonical ALFWorld type for "apple", "Apple" or "AppleType"; None when unknown."""
    key = _strip_type(name.strip()).replace(" ", "").lower()
    return _TYPES_BY_KEY.get(key)


_TYPES_BY_KEY = {t.lower(): t for t in set(alfred_constants.OBJECTS) | set(alfred_constants.RECEPTACLES)
                 if "Sliced" not in t}
