"""The bundled offline task set: every family of `task_families` at three seeds (difficulty n = 1, 2, 3)
plus the infeasible requests, split into training and held-out tasks (seed 2 of each family and
the last two infeasible requests are held out). The JSON files under `data/tasks/<split>/` are these
tasks written out (`write_bundled_tasks`; a test keeps them equal), usable with any OSWorld loader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlanything_jax.scenarios.osworld.task_families import FAMILIES, INFEASIBLE, build_task

SPLITS = ("train", "heldout")
SEEDS = (0, 1, 2)
HELDOUT_SEED = 2
HELDOUT_INFEASIBLE = 2          # the last requests of INFEASIBLE
DATA_DIR = Path(__file__).parent / "data" / "tasks"


def bundled_tasks(split: str) -> list[dict[str, Any]]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    held_out = split == "heldout"
    tasks = [build_task(family, seed, n=seed + 1) for family in FAMILIES for seed in SEEDS
             if (seed == HELDOUT_SEED) == held_out]
    first_heldout = len(INFEASIBLE) - HELDOUT_INFEASIBLE
    tasks += [build_task("infeasible", seed) for seed in range(len(INFEASIBLE)) if (seed >= first_heldout) == held_out]
    return tasks


def write_bundled_tasks(directory: Path = DATA_DIR) -> list[Path]:
    """Writes every split's tasks as `<directory>/<split>/<id>.json`; returns the paths."""
    paths = []
    for split in SPLITS:
        (directory / split).mkdir(parents=True, exist_ok=True)
        for task in bundled_tasks(split):
            path = directory / split / f"{task['id']}.json"
            path.write_text(json.dumps(task, indent=1, ensure_ascii=False) + "\n")
            paths.append(path)
    return paths


if __name__ == "__main__":
    print(f"wrote {len(write_bundled_tasks())} task files under {DATA_DIR}")
