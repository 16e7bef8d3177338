"""A hand-written ALFWorld expert: reads the problem's :init and goal, and writes the winning commands.

It knows where everything is (the PDDL is fully observed), so it walks straight to a target,
opens what is closed, takes it, cleans/heats/cools it or fetches the light, and puts it down.
Plans are plain command strings in the game's wording ("take apple 2 from countertop 1").
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.scenarios.alfworld.gen import STATE_CHANGES
from rlanything_jax.scenarios.alfworld.pddl import ProblemFacts


class NoPlan(ValueError):
    """The goal cannot be reached from this :init (the message says why)."""


@dataclasses.dataclass
class _Walker:
    """The expert's running picture of the world while it writes commands."""
    facts: ProblemFacts
    location: str
    opened: set[str]
    contained_in: dict[str, str]
    commands: list[str] = dataclasses.field(default_factory=list)

    def name(self, entity: str) -> str:
        return self.facts.names[entity]

    def go_to(self, receptacle: str) -> None:
        target = self.facts.receptacle_location[receptacle]
        if target != self.location:  # the game offers no "go to" for where the agent stands
            self.commands.append(f"go to {self.name(receptacle)}")
            self.location = target

    def open_if_closed(self, receptacle: str) -> None:
        if receptacle in self.facts.openable and receptacle not in self.opened:
            self.commands.append(f"open {self.name(receptacle)}")
            self.opened.add(receptacle)

    def take(self, obj: str) -> None:
        source = self.contained_in.pop(obj)
        self.go_to(source)
        self.open_if_closed(source)
        self.commands.append(f"take {self.name(obj)} from {self.name(source)}")

    def put(self, obj: str, receptacle: str) -> None:
        self.go_to(receptacle)
        self.open_if_closed(receptacle)
        self.commands.append(f"move {self.name(obj)} to {self.name(receptacle)}")
        self.contained_in[obj] = receptacle


def _first_receptacle(facts: ProblemFacts, rtype: str, why: str) -> str:
    found = facts.receptacles_of_type(rtype)
    if not found:
        raise NoPlan(f"no {rtype} in the room ({why})")
    return found[0]


def _movable(facts: ProblemFacts, otype: str, capability: str | None) -> list[str]:
    """Instances of otype the agent can pick up (and process), those on open surfaces first."""
    found = [o for o in facts.objects_of_type(otype) if facts.has("pickupable", o) and o in facts.contained_in
             and (capability is None or facts.has(capability, o))]
    if not found:
        detail = f" that is {capability}" if capability else ""
        raise NoPlan(f"no pickupable {otype}{detail} in the room")
    return sorted(found, key=lambda o: (facts.contained_in[o] in facts.openable, facts.contained_in[o], o))


def plan_commands(facts: ProblemFacts, task_type: str, object_type: str, receptacle_type: str) -> list[str]:
    """The expert's full walkthrough; raises NoPlan with a reason when the goal is out of reach.

    For look_at_obj_in_light, receptacle_type is the light type (DeskLamp / FloorLamp).
    """
    walker = _Walker(facts, facts.agent_location, set(facts.opened), dict(facts.contained_in))
    if task_type == "look_at_obj_in_light":
        lights = [o for o in facts.objects_of_type(receptacle_type)
                  if facts.has("toggleable", o) and o in facts.contained_in]
        if not lights:
            raise NoPlan(f"no toggleable {receptacle_type} standing in the room")
        target = _movable(facts, object_type, None)[0]
        walker.take(target)
        walker.go_to(facts.contained_in[lights[0]])
        walker.commands.append(f"use {walker.name(lights[0])}")
        return walker.commands

    if (receptacle_type, object_type) not in facts.can_contain:
        raise NoPlan(f"a {receptacle_type} cannot contain a {object_type} (no canContain fact)")
    capability, appliance_type, verb = STATE_CHANGES.get(task_type, (None, None, None))
    appliance = _first_receptacle(facts, appliance_type, f"needed to {verb}") if appliance_type else None
    needed = 2 if task_type == "pick_two_obj_and_place" else 1
    candidates = _movable(facts, object_type, capability)
    destinations = facts.receptacles_of_type(receptacle_type)
    if not destinations:
        raise NoPlan(f"no {receptacle_type} in the room")
    if capability is None:
        # Targets already in a goal receptacle count (pick_two may start with one there): fill the fullest one.
        destination = max(destinations, key=lambda r: sum(facts.contained_in[o] == r for o in candidates))
        already = sum(facts.contained_in[o] == destination for o in candidates)
        if already >= needed:
            raise NoPlan(f"the goal already holds at the start ({already} {object_type} in {facts.names[destination]})")
        movers = [o for o in candidates if facts.contained_in[o] != destination][: needed - already]
        if len(movers) < needed - already:
            raise NoPlan(f"needs {needed} {object_type}, the room has {len(candidates)}")
    else:
        destination, movers = destinations[0], candidates[:1]
    for obj in movers:
        walker.take(obj)
        if appliance:
            walker.go_to(appliance)
            walker.commands.append(f"{verb} {walker.name(obj)} with {walker.name(appliance)}")
        walker.put(obj, destination)
    return walker.commands
