"""The bundled task set: files equal to their generator, splits, knobs, and (slow) every expert
scoring 1 and doing nothing scoring 0 on a real desktop."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlanything_jax.scenarios.osworld.bundled_tasks import DATA_DIR, SPLITS, bundled_tasks
from rlanything_jax.scenarios.osworld.env import DesktopEnvSettings, OsWorldEnv, make_env_task
from rlanything_jax.scenarios.osworld.episodes import play_tool_calls
from rlanything_jax.scenarios.osworld.task_families import FAMILIES, build_task, rewrite
from rlanything_jax.scenarios.osworld.tasks import load_task_dir, task_from_json
from tests.scenarios.osworld.conftest import require_desktop_packages

WORKERS = 3


def test_the_files_are_the_generators_tasks_and_all_load():
    for split in SPLITS:
        on_disk = {path.stem: json.loads(path.read_text()) for path in (DATA_DIR / split).glob("*.json")}
        generated = {task["id"]: task for task in bundled_tasks(split)}
        assert on_disk == generated, "regenerate with `python -m rlanything_jax.scenarios.osworld.bundled_tasks`"
        loaded = load_task_dir(DATA_DIR / split)
        assert loaded.skipped == {} and len(loaded.tasks) == len(generated)


def test_splits_are_disjoint_and_large_enough():
    train, heldout = ({t["id"] for t in bundled_tasks(s)} for s in SPLITS)
    assert len(train) + len(heldout) >= 40 and not train & heldout
    assert {t["rla_knobs"]["family"] for t in bundled_tasks("heldout")} == {*FAMILIES, "infeasible"}
    instructions = [t["instruction"] for s in SPLITS for t in bundled_tasks(s)]
    assert len(set(instructions)) == len(instructions)


def test_rewrites_move_the_difficulty_knob():
    task = build_task("copy-by-extension", seed=4, n=2)
    harder, easier = rewrite(task, +1), rewrite(task, -1)
    assert harder["rla_knobs"] == {"family": "copy-by-extension", "seed": 4, "n": 3}
    assert len(harder["evaluator"]["expected"]["rules"]["expected"]) == 3
    assert len(easier["evaluator"]["expected"]["rules"]["expected"]) == 1
    assert build_task("sort-lines", 1, 2) == build_task("sort-lines", 1, 2)   # deterministic


def test_below_one_file_easier_rewrites_add_hints_and_harder_ones_take_them_away_first():
    task = build_task("make-dirs", seed=0, n=1)
    command = task["rla_expert"][0]["text"].strip()
    program_hint, command_hint = rewrite(task, -1), rewrite(rewrite(task, -1), -1)
    assert program_hint["id"] == "rla-make-dirs-s0-n1-h1" and program_hint["rla_knobs"]["hint"] == 1
    assert program_hint["instruction"].startswith(task["instruction"]) and "`mkdir`" in program_hint["instruction"]
    assert command_hint["instruction"].endswith(f"then finish: {command})")
    assert rewrite(command_hint, -1) is None                     # nothing easier than the command itself
    assert rewrite(command_hint, +1) == program_hint and rewrite(program_hint, +1) == task
    assert rewrite(task, +1)["id"] == "rla-make-dirs-s0-n2"      # no hint left: more directories
    assert program_hint["rla_expert"] == task["rla_expert"] and program_hint["evaluator"] == task["evaluator"]
    infeasible = build_task("infeasible", 0)
    assert rewrite(infeasible, +1) is None
    hinted = rewrite(infeasible, -1)
    assert "cannot be done" in hinted["instruction"] and rewrite(hinted, -1) is None
    assert rewrite(hinted, +1) == infeasible


@pytest.mark.slow
@pytest.mark.parametrize("split", SPLITS)
def test_every_expert_scores_one_and_doing_nothing_scores_zero(split, desktop_root, tmp_path):
    require_desktop_packages()
    settings = DesktopEnvSettings(runtime_root=desktop_root, cache_root=str(tmp_path), settle_s=0.5)
    tasks = bundled_tasks(split)

    def check(worker: int) -> list:
        # Each worker owns a desktop and plays every third task: an episode mostly waits (terminal
        # start, settling), so three sessions side by side take about a third of the time.
        env, failures = OsWorldEnv(), []
        try:
            for data in tasks[worker::WORKERS]:
                task = make_env_task(task_from_json(data), settings)
                expert = play_tool_calls(env, task, data["rla_expert"])
                nothing = play_tool_calls(env, task, [{"action": "terminate", "status": "success"}])
                if (expert.score, nothing.score) != (1.0, 0.0):
                    failures.append((data["id"], expert.evaluation, nothing.evaluation))
        finally:
            env.close()
        return failures

    with ThreadPoolExecutor(WORKERS) as pool:
        failures = [failure for part in pool.map(check, range(WORKERS)) for failure in part]
    assert failures == []
