"""OSWorld task files (OSWORLD.md §2), including RLAnything's variant fields.

A task JSON has `id`, `instruction`, `config` (setup steps `{type, parameters}`) and `evaluator`
(`{func, conj, result, expected, options, postconfig}`). RLAnything's co-evolved copies add
`task_template {key: instruction}`, `evaluator_list {key: evaluator}` and `current_task {key:
instruction}` (one entry): the reference's `--coevolveenv` plays `current_task`'s key, with that
instruction and `evaluator_list[key]`. Any other key of `task_template` is selectable by name.

`load_task_dir` loads the tasks this project can run (every setup step, evaluator function and
getter supported) and says which it skipped and why.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlanything_jax.scenarios.osworld.evaluator import getter_function, metric_function
from rlanything_jax.scenarios.osworld.setup_steps import STEP_TYPES


class TaskFormatError(ValueError):
    """A task file that is not an OSWorld task (or names a variant it does not have)."""


@dataclasses.dataclass(frozen=True)
class OsWorldTask:
    task_id: str
    instruction: str
    config: tuple[dict[str, Any], ...]      # setup steps, in order
    evaluator: dict[str, Any] = dataclasses.field(hash=False)
    variant: str = ""                       # the evaluator_list key in use; "" for a plain task
    variants: tuple[str, ...] = ()          # every key the file offers
    snapshot: str = ""
    related_apps: tuple[str, ...] = ()
    source_path: str = ""

    def to_json(self) -> dict[str, Any]:
        """The task as the reference plays it (instruction and evaluator of the selected variant)."""
        return {"id": self.task_id, "snapshot": self.snapshot, "instruction": self.instruction,
                "config": [copy.deepcopy(step) for step in self.config], "related_apps": list(self.related_apps),
                "evaluator": copy.deepcopy(self.evaluator)}


def _require(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise TaskFormatError(f"{where}: {message}")


def _check_steps(steps: Any, where: str) -> tuple[dict[str, Any], ...]:
    _require(isinstance(steps, list), where, "must be a list of {type, parameters}")
    for index, step in enumerate(steps):
        _require(isinstance(step, dict) and isinstance(step.get("type"), str), f"{where}[{index}]",
                 "a step needs a string `type`")
        _require(isinstance(step.get("parameters", {}), dict), f"{where}[{index}]", "`parameters` must be an object")
    return tuple(copy.deepcopy(steps))


def _check_evaluator(evaluator: Any, where: str) -> dict[str, Any]:
    _require(isinstance(evaluator, dict), where, "must be an object")
    func = evaluator.get("func")
    _require(isinstance(func, str) or (isinstance(func, list) and func and all(isinstance(f, str) for f in func)),
             where, "`func` must be a name or a non-empty list of names")
    _require(evaluator.get("conj", "and") in ("and", "or"), where, "`conj` must be 'and' or 'or'")
    if isinstance(func, list):
        for key in ("result", "expected", "options"):
            value = evaluator.get(key)
            per_function = isinstance(value, list) and len(value) == len(func)
            _require(value is None or value == {} or value == [] or per_function, where,
                     f"`{key}` must list one entry per function")
    _check_steps(evaluator.get("postconfig", []), f"{where}.postconfig")
    return copy.deepcopy(evaluator)


def task_from_json(data: Mapping[str, Any], variant: str | None = None, source_path: str = "") -> OsWorldTask:
    """The task, with `variant` (an evaluator_list key; default: current_task's) when the file has variants."""
    where = source_path or str(data.get("id", "task"))
    _require(isinstance(data, Mapping), where, "a task must be a JSON object")
    task_id = data.get("id")
    _require(isinstance(task_id, str) and task_id != "", where, "`id` must be a non-empty string")
    instruction, evaluator, variants = data.get("instruction"), data.get("evaluator"), ()
    if "evaluator_list" in data:
        evaluator_list = data["evaluator_list"]
        templates = data.get("task_template") or {}
        current = data.get("current_task") or {}
        _require(isinstance(evaluator_list, dict) and evaluator_list, where,
                 "`evaluator_list` must be a non-empty object")
        _require(isinstance(templates, dict) and isinstance(current, dict), where,
                 "`task_template` and `current_task` must be objects")
        variants = tuple(evaluator_list)
        variant = variant or next(iter(current), None) or variants[0]
        _require(variant in evaluator_list, where, f"no variant {variant!r}; it has {', '.join(variants)}")
        instruction = current.get(variant, templates.get(variant, instruction))
        evaluator = evaluator_list[variant]
    elif variant:
        raise TaskFormatError(f"{where}: asked for variant {variant!r}, but the task has no evaluator_list")
    _require(isinstance(instruction, str) and instruction.strip() != "", where,
             "`instruction` must be a non-empty string")
    return OsWorldTask(
        task_id=task_id, instruction=instruction, config=_check_steps(data.get("config", []), f"{where}.config"),
        evaluator=_check_evaluator(evaluator, f"{where}.evaluator"), variant=variant or "", variants=variants,
        snapshot=str(data.get("snapshot", "")), related_apps=tuple(map(str, data.get("related_apps", []) or [])),
        source_path=source_path)


def load_task(path: str | Path, variant: str | None = None) -> OsWorldTask:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TaskFormatError(f"{path}: cannot read a task: {error}") from None
    return task_from_json(data, variant, str(path))


def unsupported_parts(task: OsWorldTask) -> list[str]:
    """Why this project cannot run `task` (empty when it can)."""
    reasons = []
    for where, steps in (("config", task.config), ("postconfig", task.evaluator.get("postconfig", []))):
        for step in steps:
            if step["type"] not in STEP_TYPES:
                reasons.append(f"{where} step {step['type']!r}")
    funcs = task.evaluator["func"]
    for func in [funcs] if isinstance(funcs, str) else funcs:
        if func != "infeasible" and metric_function(func) is None:
            reasons.append(f"metric {func!r}")
    if funcs == "infeasible":
        return sorted(set(reasons))
    for key in ("result", "expected"):
        specs = task.evaluator.get(key)
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, dict) and spec and getter_function(str(spec.get("type"))) is None:
                reasons.append(f"{key} getter {spec.get('type')!r}")
    return sorted(set(reasons))


@dataclasses.dataclass(frozen=True)
class TaskDirectory:
    tasks: list[OsWorldTask]
    skipped: dict[str, str]     # file path -> why it was skipped


def load_task_dir(directory: str | Path, variant: str | None = None) -> TaskDirectory:
    """Every runnable task in `directory` (recursively, `*.json`, sorted by path), and the skipped ones."""
    tasks, skipped = [], {}
    for path in sorted(Path(directory).rglob("*.json")):
        try:
            task = load_task(path, variant)
        except TaskFormatError as error:
            skipped[str(path)] = str(error)
            continue
        reasons = unsupported_parts(task)
        if reasons:
            skipped[str(path)] = "unsupported: " + ", ".join(reasons)
        else:
            tasks.append(task)
    return TaskDirectory(tasks, skipped)
