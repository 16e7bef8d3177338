"""Parsers for what the policy and the environment model write in the text-game scenarios.

Pure functions that never raise (see `agents.parsers`): each result's `status` says which
rule fired; "ok" means read exactly as the prompt asked.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from rlanything_jax.agents.parsers import MINUS_LOOKALIKES, last_boxed

MAX_INDEX_DIGITS = 9  # longer numbers are out of range anyway; int() of huge strings is slow or refused


@dataclasses.dataclass(frozen=True)
class ActionChoice:
    index: int   # always in [0, num_actions) (0 when there are no actions)
    status: str  # "ok" | "no_boxed" | "unclosed_boxed" | "not_integer" | "out_of_range" | "no_actions"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def parse_action_index(text: Any, num_actions: int) -> ActionChoice:
    """The first integer in the last `\\boxed{}`, clamped into range as in the reference.

    No readable integer gives index 0.
    """
    if num_actions <= 0:
        return ActionChoice(0, "no_actions")
    boxed = last_boxed(text)
    if boxed.content is None:
        return ActionChoice(0, boxed.status)
    match = re.search(r"-?\d+", boxed.content.translate(MINUS_LOOKALIKES))
    if match is None:
        return ActionChoice(0, "not_integer")
    token = match.group()
    negative = token.startswith("-")
    digits = token.lstrip("-").lstrip("0") or "0"
    if negative and digits != "0":
        return ActionChoice(0, "out_of_range")
    if len(digits) > MAX_INDEX_DIGITS or int(digits) >= num_actions:
        return ActionChoice(num_actions - 1, "out_of_range")
    return ActionChoice(int(digits), "ok")


@dataclasses.dataclass(frozen=True)
class FailureSummary:
    summary: str  # "" unless ok
    status: str   # "ok" | "no_boxed" | "unclosed_boxed" | "empty"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def parse_failure_summary(text: Any) -> FailureSummary:
    """The stripped content of the last `\\boxed{}`; the 2-sentence limit is asked, not enforced."""
    boxed = last_boxed(text)
    if boxed.content is None:
        return FailureSummary("", boxed.status)
    summary = boxed.content.strip()
    return FailureSummary(summary, "ok" if summary else "empty")


