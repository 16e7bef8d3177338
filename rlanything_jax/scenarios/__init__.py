"""Scenario plugins: each is one package registered under its name.

A scenario package calls `register_scenario(name, factory, options_type)` when it is
imported; `make_scenario(name, options)` builds one from the config's `tasks` section.
The built-in scenarios live in `rlanything_jax.scenarios.<name>` and are imported on
first use, so generic code never names one. A scenario defined elsewhere (a test, a
user's package) registers itself the same way before the run starts.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

from rlanything_jax.agents.scenario import Scenario
from rlanything_jax.core.validation import ConfigError


@dataclasses.dataclass(frozen=True)
class _Entry:
    factory: Callable[[Any], Scenario]
    options_type: type   # a frozen dataclass; validates itself in __post_init__


_REGISTRY: dict[str, _Entry] = {}


def register_scenario(name: str, factory: Callable[[Any], Scenario], options_type: type) -> None:
    """Makes `name` usable as `config.scenario`; `factory(options)` builds the scenario."""
    if not dataclasses.is_dataclass(options_type):
        raise TypeError(f"scenario {name!r}: options_type must be a dataclass, got {options_type!r}")
    _REGISTRY[name] = _Entry(factory, options_type)


def _builtin_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and not m.name.startswith("_"))


def _entry(name: str) -> _Entry:
    if name not in _REGISTRY and name in _builtin_names():
        importlib.import_module(f"{__name__}.{name}")
    if name not in _REGISTRY:
        raise ConfigError("scenario", f"unknown scenario; registered: {', '.join(scenario_names())}", name)
    return _REGISTRY[name]


def scenario_names() -> list[str]:
    """The names `config.scenario` accepts: built-in packages that register one, and registered ones."""
    for name in _builtin_names():
        if name not in _REGISTRY:
            importlib.import_module(f"{__name__}.{name}")
    return sorted(_REGISTRY)


def scenario_options(name: str, values: Mapping[str, Any] | None = None) -> Any:
    """The scenario's options dataclass from the config's `tasks` section (defaults where absent).

    Raises ConfigError naming `tasks.<key>` for an unknown or invalid key."""
    options_type = _entry(name).options_type
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(options_type)}
    for key in values:
        if key not in known:
            raise ConfigError(f"tasks.{key}", f"not an option of scenario {name!r}; options: "
                              f"{', '.join(sorted(known))}", values[key])
    try:
        return options_type(**values)
    except ConfigError as error:
        raise error.within("tasks") from None


def make_scenario(name: str, options: Any = None) -> Scenario:
    """The registered scenario `name`, built from its options (a dataclass, a mapping, or None)."""
    entry = _entry(name)
    if options is None or isinstance(options, Mapping):
        options = scenario_options(name, options)
    return entry.factory(options)
