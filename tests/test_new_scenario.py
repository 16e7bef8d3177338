"""A new scenario is one package plus one config file, with no edit to generic code.

`tests/walk_scenario/` registers a scenario from outside the package (walk right to a goal), and
`tests/walk_scenario/config.py` configures it; the generic command line plays, judges,
warm-starts, rewrites and trains it. And generic code names no built-in scenario.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlanything_jax.agents.envs.base import InProcessRunner
from rlanything_jax.agents.scenario import TaskCounts
from rlanything_jax.scenarios import make_scenario, scenario_names
from rlanything_jax.system.config import load_config

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "tests" / "walk_scenario" / "config.py")
BUILTIN = re.compile(r"alfworld|textworld|humaneval", re.IGNORECASE)


def test_generic_code_names_no_builtin_scenario():
    package = ROOT / "rlanything_jax"
    offenders = [str(path.relative_to(ROOT)) for path in package.rglob("*.py")
                 if "scenarios" not in path.relative_to(package).parts[:1] and BUILTIN.search(path.read_text())]
    assert offenders == []


def test_the_config_file_registers_and_configures_the_new_scenario(tmp_path):
    cfg = load_config(CONFIG, ["tasks.max_distance=3"])
    assert cfg.scenario == "walk" and "walk" in scenario_names() and cfg.tasks.max_distance == 3
    scenario = make_scenario("walk", cfg.tasks)
    tasks = scenario.build_tasks(TaskCounts(train=4, eval=2, warm_start=1), tmp_path)
    assert [t.payload["distance"] for t in tasks.train] == [2, 3, 2, 3]
    runner = InProcessRunner()
    try:
        __import__(scenario.env_module)
        [task] = tasks.warm_start
        assert runner.reset({0: task})[0].text == f"at 0 of {task.payload['distance']}"
        for action in scenario.expert.plan(task):
            result = runner.step({0: action})[0]
        assert result.won and result.observation.text == f"at {task.payload['distance']} of {task.payload['distance']}"
    finally:
        runner.close()
    with pytest.raises(Exception, match=r"config\.tasks\.max_distance"):
        load_config(CONFIG, ["tasks.max_distance=1"])


@pytest.mark.slow
def test_the_generic_run_trains_the_new_scenario_end_to_end(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    result = subprocess.run([sys.executable, "-m", "rlanything_jax.main", f"--config={CONFIG}",
                             f"--config.workdir={tmp_path / 'run'}"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["scenario"] == "walk" and summary["steps"] == 2
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    for line in lines[1:]:
        assert line["policy/updates"] >= 1 and "reward_model/step_accuracy" in line
        assert 0.0 <= line["reward_model/probe_step_accuracy"] <= 1.0
    assert "warm start" in result.stderr and "Outputs in" in result.stderr
