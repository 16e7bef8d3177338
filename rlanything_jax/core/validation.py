"""Checks for frozen config dataclasses: an invalid field raises `ConfigError` naming its key.

A dataclass validates its own fields in `__post_init__` with keys relative to itself
("learning_rate"); whoever nests it (the run's config loader) prefixes the section
path with `ConfigError.within`, so the user reads `config.train.policy.learning_rate`.
Core modules (core/rl/, core/sampling/) use this without knowing about the run's config.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any


class ConfigError(ValueError):
    """A config value is missing or invalid; `key` is its dotted path, the message starts with it."""

    def __init__(self, key: str, message: str, value: Any = None, *, show_value: bool = True):
        self.key, self.reason, self.value, self.show_value = key, message, value, show_value
        suffix = f" (got {value!r})" if show_value else ""
        super().__init__(f"config.{key}: {message}{suffix}")

    def within(self, section: str) -> "ConfigError":
        """The same error with `section.` in front of its key."""
        key = f"{section}.{self.key}" if section else self.key
        return ConfigError(key, self.reason, self.value, show_value=self.show_value)


def check(key: str, ok: bool, message: str, value: Any) -> None:
    if not ok:
        raise ConfigError(key, message, value)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive_int(key: str, value: Any) -> None:
    check(key, is_int(value) and value > 0, "must be a positive integer", value)


def non_negative_int(key: str, value: Any) -> None:
    check(key, is_int(value) and value >= 0, "must be a non-negative integer", value)


def positive(key: str, value: Any) -> None:
    check(key, is_number(value) and value > 0, "must be > 0", value)


def non_negative(key: str, value: Any) -> None:
    check(key, is_number(value) and value >= 0, "must be >= 0", value)


def fraction(key: str, value: Any) -> None:
    check(key, is_number(value) and 0 <= value <= 1, "must be in [0, 1]", value)


def number(key: str, value: Any) -> None:
    check(key, is_number(value), "must be a finite number", value)


def boolean(key: str, value: Any) -> None:
    check(key, isinstance(value, bool), "must be true or false", value)


def one_of(key: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    check(key, value in choices, f"must be one of {', '.join(map(str, choices))}", value)


def ordered(low_key: str, low: float, high_key: str, high: float) -> None:
    check(low_key, low <= high, f"must not exceed {high_key} ({high!r})", low)


def fields_checked(checks: Iterable[tuple[str, Callable[[str, Any], None]]], obj: Any) -> None:
    """Runs `checker(name, getattr(obj, name))` for each (name, checker)."""
    for name, checker in checks:
        checker(name, getattr(obj, name))
