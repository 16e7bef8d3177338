"""OSWorld's task lists (`tasks.task_list`, `tasks.examples`, `tasks.domains`, `tasks.eval_task_list`) over a
directory in the official layout: training plays RLAnything's `new_examples/` variants, evaluation OSWorld's
`examples/` copies of the same ids (the reference's protocol), each task tagged with its domain."""

import json

import pytest

from rlanything_jax.agents.envs.base import TASK_GROUP
from rlanything_jax.agents.scenario import TaskCounts
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import make_scenario, scenario_options
from rlanything_jax.scenarios.osworld.field_evaluators import field_evaluators
from rlanything_jax.scenarios.osworld.task_lists import load_listed_tasks, read_task_list
from rlanything_jax.scenarios.osworld.tasks import TaskFormatError
from rlanything_jax.system import assemble
from rlanything_jax.system.config import load_config
from tests.scenarios.osworld.official_layout import (
    INFEASIBLE_ID,
    MISSING_ID,
    RENAME,
    RENAME_ID,
    VLC_ID,
    write_official_layout,
)


@pytest.fixture()
def task_dir(tmp_path):
    return write_official_layout(tmp_path / "evaluation_examples")


def _sets(task_dir, tmp_path, counts=TaskCounts(train=2, eval=2, warm_start=0), **tasks):
    options = scenario_options("osworld", {"provider": "local", "task_dir": str(task_dir), **tasks})
    return make_scenario("osworld", options).build_tasks(counts, tmp_path)


def test_the_reference_protocol_trains_on_variants_and_evaluates_on_the_same_ids_from_examples(task_dir, tmp_path):
    sets = _sets(task_dir, tmp_path, task_list="train_nochrome.json", domains="os,chrome")
    # Runnable tasks only (chrome's signs in: no `login` step): the os domain's two, in list order.
    assert [t.task_id for t in sets.train] == [f"{RENAME_ID}:evaluator1", f"{INFEASIBLE_ID}:evaluator1"]
    assert sets.train[0].goal == RENAME["instruction"] + " Please."          # the variant's current_task
    assert [t.task_id for t in sets.eval] == [RENAME_ID, INFEASIBLE_ID]    # OSWorld's own files
    assert sets.eval[0].goal == RENAME["instruction"]
    assert {t.payload[TASK_GROUP] for t in sets.train + sets.eval} == {"os"}
    assert [t.task_id for t in sets.split("eval_list")] == [RENAME_ID, INFEASIBLE_ID]


def test_an_evaluation_list_of_its_own_domains_and_caps(task_dir, tmp_path):
    sets = _sets(task_dir, tmp_path, TaskCounts(train=1, eval=1, warm_start=1), task_list="train_nochrome.json",
                 eval_task_list="test_all.json", examples="examples", domains="os")
    assert [t.task_id for t in sets.train] == [RENAME_ID] and [t.task_id for t in sets.warm_start] == [INFEASIBLE_ID]
    assert [t.task_id for t in sets.eval] == [RENAME_ID]   # test_all's os: the rename, and an id with no file
    with pytest.raises(ConfigError, match="env.num_train_tasks.*need 3 training tasks; the task set has 2"):
        _sets(task_dir, tmp_path, TaskCounts(train=2, eval=1, warm_start=1), task_list="train_nochrome.json",
              domains="os,chrome")


def test_domains_are_interleaved_and_vlc_runs_where_osworlds_getters_are_installed(task_dir, tmp_path):
    vlc = [f"{VLC_ID}:evaluator1"] if field_evaluators() is not None else []   # vlc_config: OSWorld's getter
    sets = _sets(task_dir, tmp_path, TaskCounts(train=2 + len(vlc), eval=0, warm_start=0),
                 task_list="train_nochrome.json", eval_task_list="test_all.json")
    assert [t.task_id for t in sets.train] == [f"{RENAME_ID}:evaluator1", *vlc, f"{INFEASIBLE_ID}:evaluator1"]
    assert [t.payload[TASK_GROUP] for t in sets.train] == ["os", *["vlc"] * len(vlc), "os"]


def test_listed_tasks_report_missing_files_and_lists_are_read_defensively(task_dir, tmp_path):
    listed = load_listed_tasks(task_dir, "test_all.json", "examples")
    assert [(t.domain, t.task.task_id) for t in listed.tasks][:1] == [("os", RENAME_ID)]
    assert list(listed.problems) == [f"os/{MISSING_ID}"] and "cannot read a task" in listed.problems[f"os/{MISSING_ID}"]
    assert read_task_list(task_dir / "train_nochrome.json")["os"] == (RENAME_ID, INFEASIBLE_ID)
    for bad in ('["a"]', '{"os": "a"}', '{"os": ["../x"]}', '{"..": ["a"]}', "{"):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(TaskFormatError, match="bad.json"):
            read_task_list(tmp_path / "bad.json")
    with pytest.raises(TaskFormatError, match="no domain gimp; it has os, vlc, chrome"):
        load_listed_tasks(task_dir, "train_nochrome.json", domains=["gimp"])


def test_task_list_options_are_checked_at_start_up(task_dir, tmp_path):
    with pytest.raises(ConfigError, match="tasks.task_list.*no domain gimp"):
        _sets(task_dir, tmp_path, task_list="train_nochrome.json", domains="gimp")
    (task_dir / "examples").rename(task_dir / "elsewhere")
    with pytest.raises(ConfigError, match="tasks.task_list.*examples: no such folder"):
        _sets(task_dir, tmp_path, task_list="train_nochrome.json")
    (task_dir / "elsewhere").rename(task_dir / "examples")
    with pytest.raises(ConfigError, match="tasks.examples"):
        scenario_options("osworld", {"task_dir": str(task_dir), "task_list": "t.json", "examples": "mine"})
    with pytest.raises(ConfigError, match="tasks.task_list"):
        scenario_options("osworld", {"task_dir": str(task_dir), "domains": "os"})
    with pytest.raises(ConfigError, match="tasks.task_dir"):
        scenario_options("osworld", {"task_list": "train_nochrome.json"})


def test_play_picks_a_listed_task_by_domain(task_dir, tmp_path):
    options = scenario_options("osworld", {"provider": "local", "task_dir": str(task_dir),
                                           "task_list": "train_nochrome.json"})
    task = make_scenario("osworld", options).play_task(1, "os", tmp_path)
    assert task.task_id == f"{INFEASIBLE_ID}:evaluator1"
    assert json.loads(json.dumps(task.payload))[TASK_GROUP] == "os"


def test_the_paper_config_with_a_task_list_trains_on_new_examples_and_evaluates_on_examples(task_dir, tmp_path):
    cfg = load_config("configs/osworld.py:paper", [
        f"tasks.task_dir={task_dir}", "tasks.task_list=train_nochrome.json", "tasks.endpoints=vm1:5000",
        "tasks.reset_command=true", "env.num_train_tasks=2", "env.num_eval_tasks=2"])
    assert (cfg.eval.temperature, cfg.eval.group_size, cfg.eval.max_turns) == (0.0, 3, 30)   # the reference's
    sets = assemble.build_tasks(cfg, assemble.build_scenario(cfg), tmp_path)
    runnable = [RENAME_ID, *([VLC_ID] if field_evaluators() is not None else []), INFEASIBLE_ID]
    assert [t.task_id for t in sets.train] == [f"{i}:evaluator1" for i in runnable][:2]
    assert [t.task_id for t in sets.split("eval_list")] == runnable
    assert sets.train[0].payload["settings"]["reset_wait_s"] == 60.0
