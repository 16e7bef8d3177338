"""The coverage command on a directory in OSWorld's layout: per-domain counts of fully supported tasks (all and
feasible), the parts that block the rest, and a final JSON line with the same figures."""

import json

from rlanything_jax.scenarios.osworld import coverage
from rlanything_jax.scenarios.osworld.tasks import unsupported_parts
from tests.scenarios.osworld.official_layout import write_official_layout


def test_coverage_counts_supported_tasks_per_domain_and_names_what_blocks_the_rest(tmp_path, capsys):
    task_dir = write_official_layout(tmp_path / "evaluation_examples")
    assert coverage.main([f"--task_dir={task_dir}", "--list=test_all.json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    result = json.loads(lines[-1])
    # test_all's os: the rename (supported) and an id without a file; vlc: one task.
    vlc_supported = not unsupported_parts(coverage.load_listed_tasks(task_dir, "test_all.json").tasks[1].task)
    assert result["domains"]["os"] == {"tasks": 2, "supported": 1, "feasible": 2, "feasible_supported": 1}
    assert result["domains"]["vlc"]["tasks"] == 1 and result["domains"]["vlc"]["supported"] == vlc_supported
    assert result["blocking"][coverage.MISSING] == 1
    assert any(line.split()[:2] == ["os", "1/2"] for line in lines)

    assert coverage.main([f"--task_dir={task_dir}", "--list=train_nochrome.json", "--examples=new_examples",
                          "--domains=os,chrome"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    # os: the rename and an infeasible request (scored on FAIL alone: supported, not feasible).
    assert result["domains"]["os"] == {"tasks": 2, "supported": 2, "feasible": 1, "feasible_supported": 1}
    assert result["domains"]["chrome"] == {"tasks": 1, "supported": 0, "feasible": 1, "feasible_supported": 0}
    assert result["blocking"]["config step 'login'"] == 1


def test_a_malformed_list_stops_the_command_with_its_name(tmp_path, capsys):
    (tmp_path / "list.json").write_text('{"os": 3}')
    assert coverage.main([f"--task_dir={tmp_path}", "--list=list.json"]) == 2
    error = capsys.readouterr().err
    assert "list.json" in error and "task ids" in error
