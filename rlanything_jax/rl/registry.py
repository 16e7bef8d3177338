"""Small name -> function registries, so configs can pick an advantage estimator or a loss."""

from __future__ import annotations

from typing import Callable

ADVANTAGE_ESTIMATORS: dict[str, Callable] = {}
POLICY_LOSSES: dict[str, Callable] = {}


def _register(table: dict[str, Callable], kind: str, name: str):
    def decorator(fn: Callable) -> Callable:
        if name in table:
            raise ValueError(f"{kind} {name!r} is already registered")
        table[name] = fn
        return fn

    return decorator


def register_advantage_estimator(name: str):
    return _register(ADVANTAGE_ESTIMATORS, "advantage estimator", name)


def register_policy_loss(name: str):
    return _register(POLICY_LOSSES, "policy loss", name)


def lookup(table: dict[str, Callable], name: str) -> Callable:
    if name not in table:
        raise KeyError(f"unknown name {name!r}; registered: {', '.join(sorted(table))}")
    return table[name]
