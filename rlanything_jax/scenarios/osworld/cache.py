"""The file cache OSWorld tasks read: `download` steps' inputs and `cloud_file` gold files.

    python -m rlanything_jax.scenarios.osworld.cache --task_dir=evaluation_examples --tasks=train_nochrome.json \\
        --out=cache            # downloads what is missing (online)
    python -m rlanything_jax.scenarios.osworld.cache ... --check     # says what is missing (offline)

Episodes never download: a `download` step uploads `<cache_root>/<task id>/<uuid5(url)>_<file name>`
(OSWorld's controller's cache name) and a `cloud_file` getter reads `<cache_root>/<task id>/<dest>`
(OSWorld's getter, `field_evaluators`), with `tasks.cache_root` naming the folder. This command fills
that folder for every task of a list, in both example folders (RLAnything's variants may name other
gold files), every evaluator variant included. It ends with a JSON line of the counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlanything_jax.scenarios.osworld.setup_steps import cached_download_path
from rlanything_jax.scenarios.osworld.task_lists import EXAMPLE_FOLDERS, load_listed_tasks

DOWNLOAD_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    url: str
    relative_path: str        # under the cache root: <task id>/<file name>


def _safe_name(name: Any) -> str | None:
    base = os.path.basename(str(name or ""))
    return base if base not in ("", ".", "..") else None


def _download_entries(task_id: str, steps: Iterable[Any]) -> list[CacheEntry]:
    out = []
    for step in steps:
        if not isinstance(step, dict) or step.get("type") != "download":
            continue
        for entry in (step.get("parameters") or {}).get("files") or []:
            url, path = entry.get("url"), entry.get("path")
            if isinstance(url, str) and isinstance(path, str) and url and path:
                name = cached_download_path("", url, path).name
                out.append(CacheEntry(url, f"{task_id}/{name}"))
    return out


def _cloud_entries(task_id: str, evaluator: Any) -> list[CacheEntry]:
    if not isinstance(evaluator, dict):
        return []
    out = []
    for key in ("result", "expected"):
        specs = evaluator.get(key)
        for spec in specs if isinstance(specs, list) else [specs]:
            if not isinstance(spec, dict) or spec.get("type") != "cloud_file":
                continue
            urls = spec.get("path") if spec.get("multi") else [spec.get("path")]
            dests = spec.get("dest") if spec.get("multi") else [spec.get("dest")]
            for url, dest in zip(urls or [], dests or []):
                name = _safe_name(dest)
                if isinstance(url, str) and url and name:
                    out.append(CacheEntry(url, f"{task_id}/{name}"))
    return out


def needed_files(task: dict[str, Any]) -> list[CacheEntry]:
    """Every file a task's setup and evaluators read from the cache (each evaluator variant's too)."""
    task_id = str(task.get("id", ""))
    evaluators = [task.get("evaluator"), *((task.get("evaluator_list") or {}).values())]
    entries = _download_entries(task_id, task.get("config") or [])
    for evaluator in evaluators:
        if isinstance(evaluator, dict):
            entries += _download_entries(task_id, evaluator.get("postconfig") or [])
            entries += _cloud_entries(task_id, evaluator)
    return list(dict.fromkeys(entries))


def fetch(entry: CacheEntry, root: Path, timeout_s: float = DOWNLOAD_TIMEOUT_S) -> None:
    """Downloads one file into the cache (written whole, then renamed: never a partial file)."""
    target = root / entry.relative_path
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with urllib.request.urlopen(entry.url, timeout=timeout_s) as response, open(partial, "wb") as out:
        while chunk := response.read(1 << 20):
            out.write(chunk)
    partial.replace(target)


def tasks_of(task_dir: str, list_name: str, folders: Sequence[str]) -> list[dict[str, Any]]:
    tasks = []
    for folder in folders:
        if (Path(task_dir) / folder).is_dir():
            listed = load_listed_tasks(task_dir, list_name, folder)
            tasks += [json.loads(Path(t.task.source_path).read_text(encoding="utf-8")) for t in listed.tasks]
    return tasks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task_dir", required=True, help="OSWorld's evaluation_examples")
    parser.add_argument("--tasks", required=True, help="a task list of task_dir (train_nochrome.json) or a path")
    parser.add_argument("--out", required=True, help="the cache root (tasks.cache_root)")
    parser.add_argument("--check", action="store_true", help="download nothing: report what is missing")
    args = parser.parse_args(argv)
    root = Path(args.out)
    entries = list(dict.fromkeys(e for task in tasks_of(args.task_dir, args.tasks, EXAMPLE_FOLDERS)
                                 for e in needed_files(task)))
    present = [e for e in entries if (root / e.relative_path).is_file()]
    missing = [e for e in entries if not (root / e.relative_path).is_file()]
    failed = []
    if not args.check:
        for entry in missing:
            try:
                fetch(entry, root)
            except (OSError, ValueError) as error:   # URLError and HTTPError are OSErrors
                failed.append(entry)
                print(f"cache: {entry.url} -> {entry.relative_path}: {error}", file=sys.stderr)
        missing = failed
    for entry in missing[:20]:
        print(f"missing: {entry.relative_path} ({entry.url})")
    print(json.dumps({"files": len(entries), "present_before": len(present),
                      "downloaded": 0 if args.check else len(entries) - len(present) - len(failed),
                      "missing": len(missing)}))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
