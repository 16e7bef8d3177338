"""Which bundled tasks a run plays: the `tasks.families` choice, the warm start on the pool's families, and
endpoint lists checked when the config is read (no desktop needed)."""

import pytest

from rlanything_jax.agents.scenario import TaskCounts
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import make_scenario, scenario_options


def _family(task) -> str:
    return task.payload["source"]["rla_knobs"]["family"]


def test_the_cpu_runs_families_give_disjoint_pool_warm_start_and_held_out_tasks(tmp_path):
    families = "make-dirs,rename-dir,write-file,infeasible"
    options = scenario_options("osworld", {"provider": "local", "families": families})
    tasks = make_scenario("osworld", options).build_tasks(TaskCounts(train=4, eval=4, warm_start=6), tmp_path)
    pool, warm, held_out = ([t.task_id for t in ts] for ts in (tasks.train, tasks.warm_start, tasks.eval))
    # Seed by seed (families in `task_families.FAMILIES` order), a seed's infeasible request after its feasible tasks.
    assert sorted(pool[:3]) == ["rla-make-dirs-s0-n1", "rla-rename-dir-s0-n1", "rla-write-file-s0-n1"]
    assert pool[3] == "rla-infeasible-0"
    assert sorted(warm[:3]) == ["rla-make-dirs-s1-n2", "rla-rename-dir-s1-n2", "rla-write-file-s1-n2"]
    assert warm[3:] == ["rla-infeasible-1", "rla-infeasible-2", "rla-infeasible-3"]
    assert {_family(t) for t in tasks.warm_start} == {_family(t) for t in tasks.train}
    assert sorted(held_out[:3]) == ["rla-make-dirs-s2-n3", "rla-rename-dir-s2-n3", "rla-write-file-s2-n3"]
    assert held_out[3] == "rla-infeasible-4"

def test_unknown_families_and_malformed_endpoints_stop_at_start_up():
    with pytest.raises(ConfigError, match="tasks.families.*make-dir\\b"):
        scenario_options("osworld", {"provider": "local", "families": "make-dir"})
    with pytest.raises(ConfigError, match="tasks.endpoints.*vm:port"):
        scenario_options("osworld", {"endpoints": "vm1:5000,vm:port"})
    options = scenario_options("osworld", {"endpoints": " vm1:5000 , vm2:5001 "})
    assert options.settings().endpoints == "vm1:5000,vm2:5001"
