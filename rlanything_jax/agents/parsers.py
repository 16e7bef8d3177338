"""The shared `\\boxed{}` reader, the reference's reading of a reward model's +1/-1 judgment, and
`ParseCounter`; scenarios keep their own parsers (`scenarios/<name>/parsers.py`).

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
MINUS_LOOKALIKES = str.maketrans({"\u2212": "-", "\u2013": "-"})


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
    content = boxed.content.strip().translate(MINUS_LOOKALIKES)
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
