"""OSWorld's task lists: `evaluation_examples/train_nochrome.json`, `test_all.json`, ... (OSWORLD.md §2).

A list is a JSON object `{domain: [task id, ...]}`; the task files live at
`<task_dir>/<examples folder>/<domain>/<task id>.json`, where the folder is `examples` (OSWorld's
tasks) or `new_examples` (RLAnything's co-evolved copies of the same ids). The reference trains on
`new_examples/` variants of train_nochrome's ids and evaluates on the same ids from `examples/`.

A list names a file relative to the task directory (`train_nochrome.json`) or by its own path. Lists
and task files are read defensively: a malformed list stops with a message naming it, a listed task
whose file is missing or malformed is reported, not played.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from rlanything_jax.scenarios.osworld.tasks import OsWorldTask, TaskFormatError, load_task

EXAMPLE_FOLDERS = ("examples", "new_examples")
TaskList = dict[str, tuple[str, ...]]   # domain -> task ids


@dataclasses.dataclass(frozen=True)
class ListedTask:
    domain: str
    task: OsWorldTask


@dataclasses.dataclass(frozen=True)
class ListedTasks:
    tasks: tuple[ListedTask, ...]       # in the list's order, domain by domain
    problems: dict[str, str]            # "domain/id" -> why its file could not be used


def list_path(task_dir: str | Path, list_name: str) -> Path:
    """Where a list is: a path of its own, or a file of the task directory."""
    own = Path(list_name).expanduser()
    if own.is_absolute() or own.is_file():
        return own
    return Path(task_dir).expanduser() / list_name


def read_task_list(path: str | Path) -> TaskList:
    """{domain: task ids} of a list file; TaskFormatError names what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TaskFormatError(f"{path}: cannot read a task list: {error}") from None
    if not isinstance(data, dict):
        raise TaskFormatError(f"{path}: a task list is a JSON object {{domain: [task id, ...]}}")
    out = {}
    for domain, ids in data.items():
        if not isinstance(ids, list) or not all(isinstance(i, str) and i and "/" not in i for i in ids):
            raise TaskFormatError(f"{path}: domain {domain!r} must list task ids (strings without '/')")
        if "/" in domain or domain in ("", ".", ".."):
            raise TaskFormatError(f"{path}: {domain!r} is not a domain name")
        out[domain] = tuple(dict.fromkeys(ids))
    return out


def select_domains(listing: TaskList, domains: Sequence[str], where: str) -> TaskList:
    """The list cut to `domains` (all when empty); an unknown domain is an error naming the list's."""
    unknown = sorted(set(domains) - set(listing))
    if unknown:
        raise TaskFormatError(f"{where}: no domain {', '.join(unknown)}; it has {', '.join(listing)}")
    return {d: ids for d, ids in listing.items() if not domains or d in domains}


def load_listed_tasks(task_dir: str | Path, list_name: str, examples: str = "examples",
                      domains: Sequence[str] = ()) -> ListedTasks:
    """The tasks a list names, read from `<task_dir>/<examples>/<domain>/<id>.json`."""
    path = list_path(task_dir, list_name)
    listing = select_domains(read_task_list(path), domains, str(path))
    folder = Path(task_dir).expanduser() / examples
    if not folder.is_dir():
        raise TaskFormatError(f"{folder}: no such folder of task files (the examples folders are "
                              f"{', '.join(EXAMPLE_FOLDERS)})")
    tasks, problems = [], {}
    for domain, ids in listing.items():
        for task_id in ids:
            try:
                task = load_task(folder / domain / f"{task_id}.json")
            except TaskFormatError as error:
                problems[f"{domain}/{task_id}"] = str(error)
                continue
            if task.task_id != task_id:
                problems[f"{domain}/{task_id}"] = f"the file's id is {task.task_id!r}"
                continue
            tasks.append(ListedTask(domain, task))
    return ListedTasks(tuple(tasks), problems)


def interleave_domains(tasks: Iterable[ListedTask]) -> list[ListedTask]:
    """Round robin over domains (in first-seen order), so that the first k tasks span the domains."""
    by_domain: dict[str, list[ListedTask]] = {}
    for listed in tasks:
        by_domain.setdefault(listed.domain, []).append(listed)
    queues = list(by_domain.values())
    out = []
    for index in range(max((len(q) for q in queues), default=0)):
        out += [q[index] for q in queues if index < len(q)]
    return out
