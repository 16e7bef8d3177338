"""Reward-model roles: each registered under the name a scenario declares (`Scenario.reward_model_role`).

A role module calls `register_role(name, factory, prompts_type)` when it is imported;
`make_role(name, prompts, cfg)` builds one from the scenario's reward prompts and the run's
config. The built-in roles are the modules of this package, imported on first use, so
generic code never names one; a role defined elsewhere (a test, a user's package) registers
itself the same way before the run starts.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from rlanything_jax.agents.reward_models.role import Judgments, RewardModel, RewardModelRole

__all__ = ["Judgments", "RewardModel", "RewardModelRole", "make_role", "register_role", "role_names"]


@dataclasses.dataclass(frozen=True)
class _Entry:
    factory: Callable[[Any, Any], RewardModelRole]   # (the scenario's reward prompts, RunConfig or None) -> role
    prompts_type: type | None                        # a runtime-checkable protocol the prompts must satisfy


_REGISTRY: dict[str, _Entry] = {}
_MODULES = ("step_judging", "unit_test_writing")   # the built-in roles


def register_role(name: str, factory: Callable[[Any, Any], RewardModelRole], prompts_type: type | None = None) -> None:
    """Makes `name` usable as a scenario's `reward_model_role`; `factory(prompts, cfg)` builds the role
    (`cfg` None: the defaults)."""
    _REGISTRY[name] = _Entry(factory, prompts_type)


def _load_builtins() -> None:
    for module in _MODULES:
        importlib.import_module(f"{__name__}.{module}")


def role_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def make_role(name: str, prompts: Any, cfg: Any = None) -> RewardModelRole:
    """The registered role `name` over the scenario's reward prompts, with the config's settings."""
    if name not in _REGISTRY:
        _load_builtins()
    if name not in _REGISTRY:
        raise KeyError(f"unknown reward-model role {name!r}; registered: {', '.join(role_names())}")
    entry = _REGISTRY[name]
    if entry.prompts_type is not None and not isinstance(prompts, entry.prompts_type):
        raise TypeError(f"reward-model role {name!r} reads {entry.prompts_type.__name__}; "
                        f"got {type(prompts).__name__}")
    return entry.factory(prompts, cfg)
