"""OSWorld task files: loading, RLAnything's variant fields, and what the loader skips (no desktop)."""

import json

import pytest

from rlanything_jax.scenarios.osworld import metrics
from rlanything_jax.scenarios.osworld.tasks import TaskFormatError, load_task, load_task_dir, task_from_json


def _dir_exists_evaluator(name: str) -> dict:
    return {"func": "exact_match",
            "result": {"type": "vm_command_line", "command": f"[ -d ~/Desktop/{name} ] && echo yes || echo no",
                       "shell": True},
            "expected": {"type": "rule", "rules": {"expected": "yes\n"}}}


TWO_VARIANTS = {
    "id": "variant-task",
    "instruction": "Make the folders alpha and beta on the Desktop.",
    "config": [{"type": "execute", "parameters": {"command": "true", "shell": True}}],
    "evaluator": _dir_exists_evaluator("alpha"),
    "current_task": {"evaluator1": "Make the folder alpha on the Desktop."},
    "task_template": {"evaluator1": "Make the folder alpha on the Desktop.",
                      "evaluator2": "Make the folder beta on the Desktop."},
    "evaluator_list": {"evaluator1": _dir_exists_evaluator("alpha"), "evaluator2": _dir_exists_evaluator("beta")},
}


def test_variant_fields_select_the_instruction_and_the_evaluator():
    default = task_from_json(TWO_VARIANTS)   # as the reference's --coevolveenv: current_task's key
    assert default.variant == "evaluator1" and default.variants == ("evaluator1", "evaluator2")
    assert default.instruction == "Make the folder alpha on the Desktop."
    assert "alpha" in default.evaluator["result"]["command"]
    second = task_from_json(TWO_VARIANTS, variant="evaluator2")
    assert second.instruction == "Make the folder beta on the Desktop."
    assert "beta" in second.evaluator["result"]["command"]
    assert second.to_json()["evaluator"] == TWO_VARIANTS["evaluator_list"]["evaluator2"]
    with pytest.raises(TaskFormatError, match="no variant 'evaluator3'"):
        task_from_json(TWO_VARIANTS, variant="evaluator3")
    plain = {key: value for key, value in TWO_VARIANTS.items()
             if key not in ("current_task", "task_template", "evaluator_list")}
    assert task_from_json(plain).instruction == TWO_VARIANTS["instruction"]
    with pytest.raises(TaskFormatError, match="no evaluator_list"):
        task_from_json(plain, variant="evaluator2")


def test_malformed_tasks_are_refused_with_the_place_named():
    for broken, message in (({"instruction": "x", "evaluator": {"func": "exact_match"}}, "`id`"),
                            ({"id": "a", "instruction": "", "evaluator": {"func": "exact_match"}}, "instruction"),
                            ({"id": "a", "instruction": "x", "evaluator": {"func": 3}}, "func"),
                            ({"id": "a", "instruction": "x", "config": [{"parameters": {}}],
                              "evaluator": {"func": "exact_match"}}, r"config\[0\]"),
                            ({"id": "a", "instruction": "x", "evaluator": {"func": ["a", "b"], "result": [{}]}},
                             "one entry per function")):
        with pytest.raises(TaskFormatError, match=message):
            task_from_json(broken)


def test_a_directory_loads_what_runs_and_says_why_it_skipped_the_rest(tmp_path):
    (tmp_path / "os").mkdir()
    (tmp_path / "os" / "good.json").write_text(json.dumps(TWO_VARIANTS))
    chrome = dict(TWO_VARIANTS, id="chrome", config=[{"type": "googledrive", "parameters": {"operation": []}}])
    (tmp_path / "os" / "chrome.json").write_text(json.dumps(chrome))
    # compare_image_text needs easyocr, which neither OSWorld's package (as installed) nor this project runs.
    cloud = {"id": "cloud", "instruction": "x", "evaluator": {
        "func": "compare_image_text", "result": {"type": "vm_file", "path": "a", "dest": "a"},
        "expected": {"type": "no_such_getter", "path": "https://example.invalid/gold.xlsx", "dest": "g"}}}
    (tmp_path / "os" / "cloud.json").write_text(json.dumps(cloud))
    infeasible = {"id": "no", "instruction": "Install Python 9.", "evaluator": {"func": "infeasible"}}
    (tmp_path / "infeasible.json").write_text(json.dumps(infeasible))
    (tmp_path / "broken.json").write_text("{not json")
    loaded = load_task_dir(tmp_path)
    assert sorted(t.task_id for t in loaded.tasks) == ["no", "variant-task"]
    skipped = {path.rsplit("/", 1)[1]: why for path, why in loaded.skipped.items()}
    assert skipped["chrome.json"] == "unsupported: config step 'googledrive'"
    assert skipped["cloud.json"] == "unsupported: expected getter 'no_such_getter', metric 'compare_image_text'"
    assert "cannot read a task" in skipped["broken.json"]
    assert load_task(tmp_path / "os" / "good.json", "evaluator2").variant == "evaluator2"


def test_metrics_score_like_the_reference_and_never_evaluate_vm_text(tmp_path):
    assert metrics.exact_match("a\n", {"expected": "a\n"}) == 1.0
    assert metrics.exact_match("a", {"expected": "a\n"}) == 0.0
    assert metrics.check_include_exclude("x ok y", {"include": ["ok"], "exclude": ["bad"]}) == 1.0
    assert metrics.check_include_exclude(None, {"include": []}) == 0.0
    assert metrics.is_in_list(["a", "b"], {"expected": "b"}) == 1.0
    assert metrics.match_in_list("b", {"expected": ["a", "b"]}) == 1.0
    assert metrics.check_gnome_favorite_apps("['a.desktop', 'b.desktop']\n", {"expected": ["b.desktop", "a.desktop"]})
    hostile = "__import__('os').system('touch " + str(tmp_path / "pwned") + "')"
    assert metrics.check_gnome_favorite_apps(hostile, {"expected": []}) == 0.0
    assert not (tmp_path / "pwned").exists()
    (tmp_path / "a.txt").write_text("Hello  World\n")
    (tmp_path / "b.txt").write_text("hello world")
    assert metrics.compare_text_file(str(tmp_path / "a.txt"), str(tmp_path / "b.txt")) == 0.0
    assert metrics.compare_text_file(str(tmp_path / "a.txt"), str(tmp_path / "b.txt"),
                                     ignore_blanks=True, ignore_case=True) == 1.0
    assert metrics.compare_text_file(None, str(tmp_path / "b.txt")) == 0.0
    assert metrics.check_text_enlarged("1.25\n") == 1.0 and metrics.check_text_enlarged("garbage") == 0.0
