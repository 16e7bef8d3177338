"""Setup steps and evaluators through the real protocol, on a real local desktop."""

import pytest

from rlanything_jax.scenarios.osworld.evaluator import FAIL, evaluate
from rlanything_jax.scenarios.osworld.setup_steps import (
    SetupContext,
    SetupError,
    UnsupportedSetupStep,
    cached_download_path,
    run_setup,
)
from rlanything_jax.scenarios.osworld.tasks import task_from_json
from tests.scenarios.osworld.conftest import open_terminal


@pytest.fixture
def context(desktop, tmp_path):
    return SetupContext(desktop.client, task_id="task-1", cache_root=str(tmp_path / "cache"))


def _step(kind: str, **parameters) -> dict:
    return {"type": kind, "parameters": parameters}


def test_execute_substitutes_placeholders_and_keeps_stdout(context):
    run_setup([_step("execute", command="echo {CLIENT_PASSWORD} | sudo -S mkdir -p ~/Desktop/setup_made && "
                                          "echo {SCREEN_WIDTH_HALF}x{SCREEN_HEIGHT}", shell=True, stdout="out.txt"),
               _step("command", command=["python", "-c", "print({SCREEN_WIDTH} + {SCREEN_HEIGHT_HALF})"],
                     stdout="sum.txt")], context)
    assert (context.cache_dir / "out.txt").read_text() == "960x1080\n"
    assert (context.cache_dir / "sum.txt").read_text() == "2460\n"
    assert context.client.list_directory("~/Desktop/setup_made") is not None


def test_until_polls_the_command_until_it_matches(context):
    counter = "~/Documents/until_count"
    run_setup([_step("execute", command=f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); "
                                        f"echo $n > {counter}; echo round $n", shell=True,
                     until={"stdout": "round 3"})], context)
    assert context.client.get_file(counter) == b"3\n"


def test_download_reads_only_the_offline_cache_and_upload_file_sends_local_files(context, tmp_path):
    url = "https://example.invalid/files/report.txt"
    cached = cached_download_path(context.cache_dir, url, "/home/user/Documents/report.txt")
    assert cached.name.endswith("_report.txt") and cached.parent == context.cache_dir
    download = _step("download", files=[{"url": url, "path": "/home/user/Documents/report.txt"}])
    with pytest.raises(SetupError, match="not in the offline cache"):
        run_setup([download], context)
    cached.parent.mkdir(parents=True)
    cached.write_text("cached report\n")
    local = tmp_path / "cache" / "local.txt"
    local.write_text("from the host\n")
    run_setup([download, _step("upload_file", files=[{"local_path": "local.txt", "path": "~/Documents/local.txt"}]),
               _step("sleep", seconds=0.01)], context)
    outside = _step("upload_file", files=[{"local_path": "/etc/hostname", "path": "~/Documents/stolen"}])
    with pytest.raises(SetupError, match="outside the task cache"):
        run_setup([outside], context)
    assert context.client.get_file("/home/user/Documents/report.txt") == b"cached report\n"
    assert context.client.get_file("~/Documents/local.txt") == b"from the host\n"


def test_an_unsupported_step_is_named(context):
    with pytest.raises(UnsupportedSetupStep, match="'googledrive' is not supported .it signs in to a Google Drive"):
        run_setup([_step("googledrive", operation=["delete"])], context)
    with pytest.raises(UnsupportedSetupStep, match="'act' is not supported .supported: activate_window, "):
        run_setup([_step("act")], context)
    with pytest.raises(SetupError, match="unexpected keyword"):
        run_setup([_step("sleep", second=1)], context)


RENAME_TASK = {
    "id": "rename-folder",
    "instruction": "Rename the folder 'drafts_old' on the Desktop to 'drafts_new'.",
    "config": [_step("execute", command="echo {CLIENT_PASSWORD} | sudo -S mkdir ~/Desktop/drafts_old", shell=True)],
    "evaluator": {"func": "exact_match",
                  "result": {"type": "vm_command_line", "shell": True,
                             "command": "[ -d ~/Desktop/drafts_new ] && [ ! -d ~/Desktop/drafts_old ] && echo renamed"},
                  "expected": {"type": "rule", "rules": {"expected": "renamed\n"}}},
}


def test_a_task_scores_zero_untouched_and_one_after_the_agent_works_in_a_terminal(context):
    task = task_from_json(RENAME_TASK)
    run_setup(task.config, context)
    assert evaluate(task.evaluator, context, last_action=None).score == 0.0
    open_terminal(context.client)
    action = "pyautogui.typewrite('mv ~/Desktop/drafts_old ~/Desktop/drafts_new\\n'); time.sleep(0.5)"
    assert context.client.execute_pyautogui(action)["returncode"] == 0
    outcome = evaluate(task.evaluator, context, last_action="DONE")
    assert outcome.score == 1.0 and outcome.success and outcome.detail == "exact_match=1"
    assert evaluate(task.evaluator, context, last_action=FAIL).score == 0.0   # FAIL on a feasible task


def test_infeasible_scores_only_fail(context):
    evaluator = {"func": "infeasible"}
    assert evaluate(evaluator, context, FAIL).score == 1.0
    assert evaluate(evaluator, context, "DONE").score == 0.0
    assert evaluate(evaluator, context, None).score == 0.0


def test_conj_files_and_missing_files(context):
    context.client.upload_file("~/Documents/poem.txt", b"roses are red\n")
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    (context.cache_dir / "gold.txt").write_text("Roses  are red")
    compare = {"func": "compare_text_file", "options": {"ignore_blanks": True, "ignore_case": True},
               "result": {"type": "vm_file", "path": "/home/user/Documents/poem.txt", "dest": "poem.txt"},
               "expected": {"type": "cache_file", "path": "gold.txt"}}
    assert evaluate(compare, context, "DONE").score == 1.0
    absent_on_vm = dict(compare, result={"type": "vm_file", "path": "~/Documents/absent.txt", "dest": "a.txt"})
    assert evaluate(absent_on_vm, context, "DONE").score == 0.0
    absent_gold = dict(compare, expected={"type": "cache_file", "path": "missing_gold.txt"})
    outcome = evaluate(absent_gold, context, "DONE")
    assert outcome.score == 0.0 and "file not found" in outcome.detail
    escape = dict(compare, expected={"type": "cache_file", "path": "../../../../etc/hostname"})
    assert evaluate(escape, context, "DONE").score == 0.0
    yes = {"type": "vm_command_line", "command": "echo yes", "shell": True}
    rule = {"type": "rule", "rules": {"expected": "yes\n"}}
    wrong = {"type": "rule", "rules": {"expected": "no\n"}}
    both = {"func": ["exact_match", "exact_match"], "result": [yes, yes], "expected": [rule, wrong]}
    assert evaluate(dict(both, conj="and"), context, "DONE").score == 0.0
    assert evaluate(dict(both, conj="or"), context, "DONE").score == 1.0
    for name in ("a.jpg", "b.jpg"):
        context.client.upload_file(f"~/Pictures/{name}", b"\xff\xd8\xff")
    moved = {"func": "check_moved_jpgs", "result": {"type": "list_directory", "path": "~/Pictures"},
             "expected": {"type": "rule", "rules": {"expected": ["b.jpg", "a.jpg"]}}}
    assert evaluate(moved, context, "DONE").score == 1.0
    context.client.upload_file("~/Pictures/c.jpg", b"\xff\xd8\xff")
    assert evaluate(moved, context, "DONE").score == 0.0
    size = {"func": "exact_match", "result": {"type": "vm_screen_size"},
            "expected": {"type": "rule", "rules": {"expected": {"width": 1920, "height": 1080}}}}
    assert evaluate(size, context, "DONE").score == 1.0
    postconfig = {"func": "exact_match", "postconfig": [_step("execute", command="echo post > ~/Documents/post.txt",
                                                              shell=True)],
                  "result": {"type": "vm_command_line", "command": "cat ~/Documents/post.txt", "shell": True},
                  "expected": {"type": "rule", "rules": {"expected": "post\n"}}}
    assert evaluate(postconfig, context, "DONE").score == 1.0
