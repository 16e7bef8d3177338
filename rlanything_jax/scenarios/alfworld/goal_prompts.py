"""The environment model's ALFWorld goal-rewrite prompt and its answer's parser (ALGORITHM.md 4.3).

The wording follows the reference (`goal_brief_and_instruction`): the raw game's :init
summary, failure summaries of recent rollouts, the difficulty goal, and the task type's
framework; the model answers with two type names in `\\boxed{TYPE_A,TYPE_B}`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.curriculum.adaptation import DIRECTIONS
from rlanything_jax.agents.parsers import last_boxed
from rlanything_jax.scenarios.text_games.prompts import chat

ALFWORLD_TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# task type -> (framework, original goal with {a}/{b}, lines after the output example)
_GOAL_FRAMEWORKS = {
    "pick_and_place_simple": (
        "place an object type into/on a receptacle type.",
        "**Original goal**: place an object of type **{a}** into/on a receptacle of type **{b}**.",
        ("**Design instruction**: Output exactly **two tokens** \u2014 `<OBJ_TYPE> <REC_TYPE>`.",
         "- Constraints: pair must satisfy `canContain(REC_TYPE, OBJ_TYPE)`."),
    ),
    "look_at_obj_in_light": (
        "a light object type is present at the agent\u2019s location; the agent **holds** an object type.",
        ("**Original goal (Example)**: a **toggleable and toggled** light object of type **{a}** is present; "
         "agent **holds** type **{b}**."),
        ("**Design instruction**: Output exactly **two tokens** \u2014 `<LIGHT_OBJ_TYPE> <HOLD_OBJ_TYPE>`.",
         "- Constraints: LIGHT must have `toggleable`; HOLD should have `pickupable` instance in INIT."),
    ),
    "pick_clean_then_place_in_recep": (
        "**clean** an object type and place it into/on a receptacle type.",
        "**Original goal**: clean type **{a}** then place into/on type **{b}**.",
        ("- Constraints: OBJ must be cleanable; canContain(REC,OBJ).",),
    ),
    "pick_heat_then_place_in_recep": (
        "**heat** an object type and place it into/on a receptacle type.",
        "**Original goal**: heat type **{a}** then place into/on type **{b}**.",
        ("- Constraints: OBJ must be heatable; canContain(REC,OBJ).",),
    ),
    "pick_cool_then_place_in_recep": (
        "**cool** an object type and place it into/on a receptacle type.",
        "**Original goal**: cool type **{a}** then place into/on type **{b}**.",
        ("- Constraints: OBJ must be coolable; canContain(REC,OBJ).",),
    ),
    "pick_two_obj_and_place": (
        "place **two distinct objects** (same type) into/on a receptacle type.",
        "**Original goal**: place two objects of type **{a}** into/on type **{b}**.",
        ("- Constraints: >=2 instances of OBJ_TYPE; canContain(REC,OBJ).",),
    ),
}


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def goal_brief(task_type: str, goal_object_types: Sequence[str], goal_receptacle_types: Sequence[str],
               direction: str, prev_acc: float) -> str:
    """The difficulty advice and the task type's goal framework (reference: goal_brief_and_instruction)."""
    _check_direction(direction)
    lines = [f"### Difficulty goal: **{direction.upper()}** (prev_acc={prev_acc})"]
    if direction == "harder":
        lines += ["- Prefer types with *fewer* available instances (rarer) while keeping constraints satisfied.",
                  "- Prefer combinations likely requiring more search/steps, but still solvable in this environment."]
    else:
        lines += ["- Prefer types with *more* available instances (more common) while keeping constraints satisfied.",
                  "- Prefer combinations likely easier to find/complete, but still valid."]
    if task_type not in _GOAL_FRAMEWORKS:
        return "\n".join(lines + ["**Original goal**: (unknown task type)."])
    framework, original, instructions = _GOAL_FRAMEWORKS[task_type]
    # look_at_obj_in_light's goal names two object types; the others an object and a receptacle type.
    second = goal_object_types[1:2] if task_type == "look_at_obj_in_light" else goal_receptacle_types[:1]
    a = goal_object_types[0] if goal_object_types else "<?>"
    b = second[0] if second else "<?>"
    lines += [f"**Overall Framework**: {framework}", original.format(a=a, b=b),
              f"The final output example is \\boxed{{{a}, {b}}}", *instructions]
    return "\n".join(lines)


def goal_rewrite_messages(init_summary: str, task_type: str, goal_object_types: Sequence[str],
                          goal_receptacle_types: Sequence[str], direction: str, prev_acc: float,
                          failure_summaries: Sequence[tuple[int, str]] = (),
                          attempt: int | None = None, num_attempts: int = 8) -> list[Message]:
    """Asks the env model for two new goal types, `\\boxed{TYPE_A,TYPE_B}`, for a harder/easier task.

    `init_summary` is the English summary of the game's PDDL :init; `failure_summaries`
    are (rollout index, summary) of this task's failed rollouts. `attempt` (1-based)
    adds "(Attempt i/n)" so repeated prompts differ; the reference put it in the
    assistant turn, here it ends the user turn.
    """
    _check_direction(direction)
    text = ("Review the following details about an interactive environment. A related task will follow.\n"
            + init_summary + "\n\n---\n")
    if failure_summaries:
        text += "### Failure summaries from recent rollouts (failed rollouts only)\n"
        for rollout, summary in sorted(failure_summaries, key=lambda item: item[0]):
            text += f"- Rollout {rollout}: {summary.strip()}\n"
        text += "\n"
    text += (
        f"### Your job is to propose a new goal that makes the task **{direction.upper()}**.\n"
        f"- The parent rollout accuracy (prev_acc) is {prev_acc}.\n"
        "- The new goal must be different from the original and follow the instructions.\n"
        "- The overall framework of the goal cannot be changed; you may only modify two tokens "
        "within this framework.\n"
        "Represent the new goal by outputting two tokens, placed inside \\boxed{} and separated by a comma, "
        "e.g., \\boxed{TOKEN_A,TOKEN_B}.\n"
        "You need to think step by step then provide final result in \\boxed{}.\n\n"
        + goal_brief(task_type, goal_object_types, goal_receptacle_types, direction, prev_acc)
    )
    if attempt is not None:
        text += f"\n\n(Attempt {attempt}/{num_attempts})"
    return chat(text)


# ---------------------------------------------------------------- the answer


@dataclasses.dataclass(frozen=True)
class GoalTypes:
    types: tuple[str, str] | None  # raw tokens as written; callers add the "Type" suffix if missing
    status: str  # "ok" | "space_separated" (read, not comma-separated) | "no_boxed" | "unclosed_boxed"
    #              | "not_two_tokens"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_OUTER_BRACKETS = re.compile(r"^[\[({<\s]+|[\])}>\s]+$")
_QUOTES = "'\"`"


def parse_goal_types(text: Any) -> GoalTypes:
    """`\\boxed{TYPE_A,TYPE_B}` -> ("TYPE_A", "TYPE_B"); extra tokens after two are ignored.

    Full-width commas count as commas; brackets and quotes around tokens are dropped.
    """
    boxed = last_boxed(text)
    if boxed.content is None:
        return GoalTypes(None, boxed.status)
    content = boxed.content.replace("\uff0c", ",").replace("\u3001", ",")
    content = _OUTER_BRACKETS.sub("", content.strip())
    parts = [p.strip().strip(_QUOTES).strip() for p in content.split(",")]
    parts = [p for p in parts if p]
    if len(parts) >= 2:
        return GoalTypes((parts[0], parts[1]), "ok")
    # The prompt's design line says "`<OBJ_TYPE> <REC_TYPE>`", so two bare words are read too
    # (the reference rejected them).
    words = [w.strip(_QUOTES) for w in content.split()]
    if "," not in content and len(words) == 2 and all(words):
        return GoalTypes((words[0], words[1]), "space_separated")
    return GoalTypes(None, "not_two_tokens")


