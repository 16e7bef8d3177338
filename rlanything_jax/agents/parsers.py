"""Parsers for what the policy, the reward model and the environment model write
in the text-game scenarios (ALFWorld/TextWorld), the shared `\\boxed{}` reader and
`ParseCounter`; the coding scenario's parsers are in `coding_parsers.py`.

Every parser is a pure function that never raises: any input (None, huge, odd
unicode) gives a small frozen result whose `status` says which rule fired, so
callers can count fallbacks (`ParseCounter`). `status == "ok"` is the only
status that means "read exactly as the prompt asked"; each docstring lists the
others. The rules follow the reference implementation (ALGORITHM.md 3.1, 3.4,
4.3, 5.2, 5.3); where it differs, a comment says why.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

_BOXED = "\\boxed{"
_BRACE = re.compile(r"[{}]")
_INTEGER = re.compile(r"[-+]?\d+")
# The look-behind makes each digit run start a match only once: linear time on long digit strings.
_FRACTION = re.compile(r"(?<!\d)\d+\s*/\s*\d")
_MINUS_LOOKALIKES = str.maketrans({"\u2212": "-", "\u2013": "-"})
_MAX_INDEX_DIGITS = 9  # longer numbers are out of range anyway; int() of huge strings is slow or refused


def as_text(value: Any) -> str:
    """Any parser input as a string (None -> "")."""
    if isinstance(value, str):
        return value
    try:
        return "" if value is None else str(value)
    except Exception:  # noqa: BLE001 -- an object whose __str__ fails reads as nothing, as promised
        return ""


@dataclasses.dataclass(frozen=True)
class Boxed:
    content: str | None
    status: str  # "ok" | "no_boxed" | "unclosed_boxed"


def last_boxed(text: Any) -> Boxed:
    """Content of the last `\\boxed{...}`, braces balanced (nested `{}` kept).

    As in the reference, an unclosed last box is not replaced by an earlier one:
    a truncated final answer is a failure, not a reason to read a draft.
    """
    text = as_text(text)
    start = text.rfind(_BOXED)
    if start < 0:
        return Boxed(None, "no_boxed")
    depth = 1
    begin = start + len(_BOXED)
    for match in _BRACE.finditer(text, begin):
        depth += 1 if match.group() == "{" else -1
        if depth == 0:
            return Boxed(text[begin:match.start()], "ok")
    return Boxed(None, "unclosed_boxed")


# ---------------------------------------------------------------- policy: action index


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
    match = re.search(r"-?\d+", boxed.content.translate(_MINUS_LOOKALIKES))
    if match is None:
        return ActionChoice(0, "not_integer")
    token = match.group()
    negative = token.startswith("-")
    digits = token.lstrip("-").lstrip("0") or "0"
    if negative and digits != "0":
        return ActionChoice(0, "out_of_range")
    if len(digits) > _MAX_INDEX_DIGITS or int(digits) >= num_actions:
        return ActionChoice(num_actions - 1, "out_of_range")
    return ActionChoice(int(digits), "ok")


# ---------------------------------------------------------------- reward model: judgment


@dataclasses.dataclass(frozen=True)
class Judgment:
    score: int   # +1, -1, or 0 when invalid
    valid: bool  # the vote counts as S in {-1, +1}; invalid votes get the RM's penalty
    status: str  # "ok" | "extracted" | "fraction" | "invalid" | "no_boxed" | "unclosed_boxed"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _is_unit(token: str) -> int:
    """+1 / -1 for an integer token equal to +-1 (leading zeros allowed), else 0."""
    sign = -1 if token.startswith("-") else 1
    return sign if token.lstrip("+-").lstrip("0") == "1" else 0


def parse_judgment(text: Any) -> Judgment:
    """The reference's binary judgment rule on the last `\\boxed{}`.

    "1"/"+1" -> +1 and "-1" -> -1 ("ok"); a fraction such as "1/8" -> 0 ("fraction");
    otherwise the vote when exactly one integer equal to +-1 appears ("extracted"),
    else 0 ("invalid"). A score written without a box is not read.
    """
    boxed = last_boxed(text)
    if boxed.content is None:
        return Judgment(0, False, boxed.status)
    content = boxed.content.strip().translate(_MINUS_LOOKALIKES)
    if content in ("1", "+1"):
        return Judgment(1, True, "ok")
    if content == "-1":
        return Judgment(-1, True, "ok")
    if _FRACTION.search(content):
        return Judgment(0, False, "fraction")
    votes = [v for v in map(_is_unit, _INTEGER.findall(content)) if v]
    if len(votes) == 1:
        return Judgment(votes[0], True, "extracted")
    return Judgment(0, False, "invalid")


# ---------------------------------------------------------------- environment model (ALFWorld)


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


# ---------------------------------------------------------------- metrics


class ParseCounter:
    """Tallies parse statuses per parser name, for fallback metrics."""

    def __init__(self) -> None:
        self._counts: dict[str, collections.Counter[str]] = {}

    def record(self, parser: str, result: Any) -> Any:
        """Counts `result.status` (or `result` itself when it is a status string); returns `result`."""
        status = result if isinstance(result, str) else getattr(result, "status", "unknown")
        self._counts.setdefault(parser, collections.Counter())[status] += 1
        return result

    def merge(self, other: ParseCounter) -> None:
        for parser, counts in other._counts.items():
            self._counts.setdefault(parser, collections.Counter()).update(counts)

    def counts(self) -> dict[str, dict[str, int]]:
        return {parser: dict(counts) for parser, counts in self._counts.items()}

    def total(self, parser: str) -> int:
        return sum(self._counts.get(parser, {}).values())

    def fallback_rate(self, parser: str) -> float:
        """Share of results whose status is not "ok" (0.0 before any result)."""
        total = self.total(parser)
        return 0.0 if total == 0 else 1.0 - self._counts[parser]["ok"] / total

    def metrics(self, prefix: str = "parse") -> dict[str, float]:
        """Flat `{prefix}/{parser}/{status}` counts plus `{prefix}/{parser}/fallback_rate`."""
        out: dict[str, float] = {}
        for parser in sorted(self._counts):
            for status, count in sorted(self._counts[parser].items()):
                out[f"{prefix}/{parser}/{status}"] = float(count)
            out[f"{prefix}/{parser}/fallback_rate"] = self.fallback_rate(parser)
        return out
