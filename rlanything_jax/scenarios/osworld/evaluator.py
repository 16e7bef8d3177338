"""A task's evaluator, with `DesktopEnv.evaluate()`'s semantics (OSWORLD.md §2).

- run `postconfig`;
- `func == "infeasible"` scores 1 iff the last action was FAIL; for any other func a final FAIL
  scores 0;
- `metric(result, expected, **options)` (or `metric(result, **options)` without `expected`), with
  `result`/`expected` from getters by `type`;
- a list of funcs: `conj: "and"` returns 0 at the first 0, else the mean; `"or"` returns 1 at the
  first 1, else the max;
- a getter that raises FileNotFoundError scores 0.

Metrics are OSWorld's own (`field_evaluators`, from the desktop-env package) where it is installed,
else this project's (`system/metrics.py`); getters are this project's where it has one, else OSWorld's
through an adapter over the client. `metric_function` and `getter_function` say which runs (None:
none, and `tasks.unsupported_parts` names it).

RLAnything counts score > 0 as success. A VM that stops answering raises `VmUnavailable` (an
environment error), never a score. Anything else a getter or metric raises on the VM's
(agent-controlled) state scores 0, with the reason in the outcome.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rlanything_jax.scenarios.osworld.client import VmUnavailable
from rlanything_jax.scenarios.osworld.field_evaluators import FieldEnv, field_evaluators
from rlanything_jax.scenarios.osworld.metrics import METRICS
from rlanything_jax.scenarios.osworld.setup_steps import SetupContext, run_setup

FAIL, DONE, WAIT = "FAIL", "DONE", "WAIT"


@dataclasses.dataclass(frozen=True)
class EvaluationOutcome:
    score: float
    detail: str                    # why, in a few words: which metric gave what

    @property
    def success(self) -> bool:
        return self.score > 0


# --- getters: (context, config) -> value -------------------------------------------------------


def _safe_dest(config: dict[str, Any], key: str = "dest") -> str:
    """A cache file name from the task (never a path out of the cache directory)."""
    name = os.path.basename(str(config.get(key) or "file"))
    return name if name not in ("", ".", "..") else "file"


def get_vm_file(context: SetupContext, config: dict[str, Any]) -> Any:
    """Fetches the VM file(s) into the cache; the host path, or None when the VM has no such file."""
    multi = config.get("multi", False)
    paths = config["path"] if multi else [config["path"]]
    dests = config["dest"] if multi else [config["dest"]]
    gives = set(config.get("gives", [0]))
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    given: list[str | None] = []
    for index, (path, dest) in enumerate(zip(paths, dests)):
        data = context.client.get_file(path)
        local = context.cache_dir / _safe_dest({"dest": dest})
        if data is not None:
            local.write_bytes(data)
        if index in gives:
            given.append(str(local) if data is not None else None)
    return given[0] if len(given) == 1 else given


def _command_result(context: SetupContext, config: dict[str, Any]) -> dict[str, Any]:
    return context.client.execute(config["command"], shell=config.get("shell", False))


def get_vm_command_line(context: SetupContext, config: dict[str, Any]) -> Any:
    result = _command_result(context, config)
    return result.get("output") if result.get("status") == "success" else None


def get_vm_command_error(context: SetupContext, config: dict[str, Any]) -> Any:
    result = _command_result(context, config)
    return result.get("error") if result.get("status") == "success" else None


def get_vm_terminal_output(context: SetupContext, config: dict[str, Any]) -> Any:
    return context.client.terminal_output()


def get_list_directory(context: SetupContext, config: dict[str, Any]) -> Any:
    return context.client.list_directory(config["path"])


def get_vm_screen_size(context: SetupContext, config: dict[str, Any]) -> Any:
    size = context.client.screen_size()
    return None if size is None else {"width": size[0], "height": size[1]}


def get_rule(context: SetupContext, config: dict[str, Any]) -> Any:
    return config["rules"]


def get_cache_file(context: SetupContext, config: dict[str, Any]) -> str:
    """A file the task ships in its cache directory (gold files)."""
    path = context.cache_dir / str(config["path"])
    if not path.resolve().is_relative_to(context.cache_dir.resolve()) or not path.is_file():
        raise FileNotFoundError(str(path))
    return str(path)


def get_cloud_file(context: SetupContext, config: dict[str, Any]) -> Any:
    """OSWorld's cloud_file from the task's cache only (`python -m rlanything_jax.scenarios.osworld.cache` fills
    it): OSWorld's getter downloads a missing file, and a task's URL (possibly a model's rewrite) must not make
    the host fetch anything during an episode. A missing file raises FileNotFoundError (the metric scores 0)."""
    multi = config.get("multi", False)
    dests = config["dest"] if multi else [config["dest"]]
    gives = set(config.get("gives", [0]))
    given = []
    for index, dest in enumerate(dests):
        local = context.cache_dir / _safe_dest({"dest": dest})
        if index in gives:
            if not local.is_file():
                raise FileNotFoundError(f"{local}: not in the task cache (fill it with the cache command)")
            given.append(str(local))
    return given[0] if len(given) == 1 else given


GETTERS = {"vm_file": get_vm_file, "cloud_file": get_cloud_file, "vm_command_line": get_vm_command_line,
           "vm_command_error": get_vm_command_error,
           "vm_terminal_output": get_vm_terminal_output, "list_directory": get_list_directory,
           "vm_screen_size": get_vm_screen_size, "rule": get_rule, "cache_file": get_cache_file}


def metric_function(name: str) -> Any:
    """OSWorld's metric `name` where desktop-env is installed, else ours; None when neither has it."""
    field = field_evaluators()
    return (field.metrics.get(name) if field else None) or METRICS.get(name)


def getter_function(kind: str) -> Any:
    """(context, config) -> value: our getter of `kind`, else OSWorld's over `FieldEnv`; None when neither."""
    if kind in GETTERS:
        return GETTERS[kind]
    field = field_evaluators()
    if field is None or kind not in field.getters:
        return None
    getter = field.getters[kind]

    def run(context: SetupContext, config: dict[str, Any]) -> Any:
        context.cache_dir.mkdir(parents=True, exist_ok=True)
        return getter(FieldEnv.over(context.client, str(context.cache_dir)), _in_cache(config))
    return run


def _in_cache(config: dict[str, Any]) -> dict[str, Any]:
    """The getter's config with `dest` cut to file names: OSWorld's getters join it to the cache directory,
    and a task (possibly a model's rewrite) must not make the host read or write elsewhere."""
    dest = config.get("dest")
    if isinstance(dest, list):
        return {**config, "dest": [_safe_dest({"dest": d}) for d in dest]}
    return {**config, "dest": _safe_dest(config)} if dest is not None else config


# --- evaluation --------------------------------------------------------------------------------


def _listed(value: Any, count: int) -> list[Any]:
    if isinstance(value, list):
        return value
    return [value if value is not None else {}] * count


def _score_one(context: SetupContext, func: str, result_spec: Any, expected_spec: Any,
               options: dict[str, Any]) -> tuple[float, str]:
    """One metric's score; FileNotFoundError of a getter is 0 (the reference's rule)."""
    try:
        result = getter_function(result_spec["type"])(context, result_spec) if result_spec else None
        expected = getter_function(expected_spec["type"])(context, expected_spec) if expected_spec else None
    except FileNotFoundError as error:
        return 0.0, f"{func}: file not found ({error})"
    except VmUnavailable:
        raise
    except Exception as error:   # a malformed VM state or task value
        return 0.0, f"{func}: getter raised {type(error).__name__}: {error}"
    try:
        metric = metric_function(func)
        score = metric(result, expected, **options) if expected_spec else metric(result, **options)
        return float(score), f"{func}={float(score):g}"
    except VmUnavailable:
        raise
    except Exception as error:
        return 0.0, f"{func}: metric raised {type(error).__name__}: {error}"


def evaluate(evaluator: dict[str, Any], context: SetupContext, last_action: str | None) -> EvaluationOutcome:
    """The task's score after an episode whose last action was `last_action` (FAIL/DONE/code/None)."""
    run_setup(evaluator.get("postconfig", []) or [], context)
    func = evaluator["func"]
    if func == "infeasible":
        failed = last_action == FAIL
        return EvaluationOutcome(float(failed), "infeasible: " + ("the agent said FAIL" if failed else "no FAIL"))
    if last_action == FAIL:
        return EvaluationOutcome(0.0, "the agent said FAIL on a feasible task")
    if isinstance(func, str):
        score, detail = _score_one(context, func, evaluator.get("result"), evaluator.get("expected"),
                                   evaluator.get("options") or {})
        return EvaluationOutcome(score, detail)
    conj = evaluator.get("conj", "and")
    results = _listed(evaluator.get("result"), len(func))
    expecteds = _listed(evaluator.get("expected"), len(func))
    options = [o or {} for o in _listed(evaluator.get("options"), len(func))]
    scores, details = [], []
    for index, name in enumerate(func):
        score, detail = _score_one(context, name, results[index], expecteds[index], options[index])
        details.append(detail)
        if conj == "and" and score == 0.0:
            return EvaluationOutcome(0.0, "and: " + "; ".join(details))
        if conj == "or" and score == 1.0:
            return EvaluationOutcome(1.0, "or: " + "; ".join(details))
        scores.append(score)
    total = sum(scores) / len(scores) if conj == "and" else max(scores)
    return EvaluationOutcome(total, f"{conj}: " + "; ".join(details))

