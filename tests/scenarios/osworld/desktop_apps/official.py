"""Official OSWorld tasks on a local desktop with the real application: the task's own JSON (vendored
under tasks/, from the reference's `evaluation_examples/examples`), its setup steps run as OSWorld runs
them, files the tests create in place of its downloads, an optional scripted solution, then OSWorld's
evaluator (desktop-env's metrics and getters through the project's evaluator)."""

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rlanything_jax.scenarios.osworld.evaluator import DONE, EvaluationOutcome, evaluate
from rlanything_jax.scenarios.osworld.field_evaluators import PACKAGE_HINT, field_evaluators
from rlanything_jax.scenarios.osworld.setup_steps import SetupContext, cached_download_path, run_setup
from tests.scenarios.osworld.conftest import require_desktop_packages

TASKS = Path(__file__).parent / "tasks"
UNO_EDIT = Path(__file__).parent / "uno_edit.py"
INSIDE_UNO_EDIT = "/tmp/uno_edit.py"


def _missing(why: str) -> None:
    if os.environ.get("CI"):   # `bash scripts/setup.sh --test` installs the applications and desktop-env
        pytest.fail("CI must run the desktop application tests, but " + why)
    pytest.skip(why)


def require_apps(*programs: str) -> None:
    """Skips (fails in CI) naming what is missing: the desktop, the applications, OSWorld's evaluators."""
    require_desktop_packages()
    missing = [name for name in programs if shutil.which(name) is None]
    if missing:
        _missing(f"{', '.join(missing)} not installed: `bash scripts/setup.sh --desktop-apps` installs the "
                 "applications")
    if field_evaluators() is None:
        _missing(f"OSWorld's evaluators are not installed: {PACKAGE_HINT}")


def task(domain: str, id_prefix: str) -> dict:
    (path,) = (TASKS / domain).glob(f"{id_prefix}*.json")
    return json.loads(path.read_text())


def download_urls(task_json: dict) -> dict[str, str]:
    """{file name: url} of every `download` step, config and postconfig."""
    steps = task_json["config"] + (task_json["evaluator"].get("postconfig") or [])
    return {os.path.basename(f["path"]): f["url"] for step in steps if step["type"] == "download"
            for f in step["parameters"]["files"]}


def wait_window(client, title: str, timeout_s: float = 90.0) -> None:
    """Until a window whose title contains `title` is on the screen (the application really started)."""
    deadline = time.monotonic() + timeout_s
    while True:
        # wmctrl fails (X error BadWindow) when a window closes while it lists them, as start-up splashes
        # do: that is "not yet", asked again
        listed = client.execute(["wmctrl", "-l"], timeout_s=120)
        if listed.get("returncode") == 0 and title in listed["output"]:
            return
        assert time.monotonic() < deadline, f"no window {title!r} after {timeout_s:.0f} s (last: {listed})"
        time.sleep(0.2)


def play(desktop, task_json: dict, cache_root: Path, window: str, files: dict[str, bytes] | None = None,
         solve: Callable[[object], None] | None = None) -> EvaluationOutcome:
    """A fresh session, the task's setup (its downloads served from `files`, by file name, which also
    fill the task's cloud_file gold files by `dest`), its application's `window` up, `solve(client)` if
    given, and OSWorld's score."""
    desktop.reset()
    context = SetupContext(desktop.client, task_json["id"], str(cache_root))
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    urls = download_urls(task_json)
    for name, data in (files or {}).items():
        target = cached_download_path(context.cache_dir, urls[name], name) if name in urls \
            else context.cache_dir / name
        target.write_bytes(data)
    run_setup(task_json["config"], context)
    wait_window(desktop.client, window)
    if solve is not None:
        solve(desktop.client)
    return evaluate(task_json["evaluator"], context, DONE)


def run(client, command, shell: bool = False) -> str:
    """A command in the session that must succeed; its stdout."""
    result = client.execute(command, shell=shell, timeout_s=120)
    assert result.get("returncode") == 0, result
    return result["output"]


def uno_edit(client, path: str, code: str) -> None:
    """`code` run on the document open in the session's LibreOffice, which then stores it (uno_edit.py)."""
    assert client.upload_file(INSIDE_UNO_EDIT, UNO_EDIT.read_bytes())
    run(client, ["python3", INSIDE_UNO_EDIT, path, code])


_SET_LINES = """
import os, re, sys
path, pattern, line = os.path.expanduser(sys.argv[1]), re.compile(sys.argv[2]), sys.argv[3]
try:
    lines = open(path).read().splitlines()
except FileNotFoundError:
    lines = []
os.makedirs(os.path.dirname(path), exist_ok=True)
open(path, "w").write("\\n".join([kept for kept in lines if not pattern.match(kept)] + [line]) + "\\n")
"""


def wait_file(client, path: str, timeout_s: int = 60) -> None:
    """Until the session's file `path` exists and is not empty (an application wrote its profile)."""
    run(client, f"for i in $(seq {timeout_s * 10}); do [ -s {path} ] && exit 0; sleep 0.1; done; exit 1", shell=True)


def set_config_line(client, path: str, pattern: str, line: str) -> None:
    """In the session's config file `path`: the lines matching `pattern` replaced by `line` (appended)."""
    run(client, ["python3", "-c", _SET_LINES, path, pattern, line])


def stop_app(client, name: str, quit_keys: tuple[str, ...] = (), window: str = "") -> None:
    """Quits the application (its `quit_keys` in its active `window`, as a user would, pressed again while it
    is still starting; else SIGTERM) and waits until it is gone."""
    if not quit_keys:
        run(client, ["pkill", "-x", name])
    deadline = time.monotonic() + 60
    while quit_keys and client.execute(["pgrep", "-x", name])["returncode"] == 0:
        assert time.monotonic() < deadline, f"{name} did not quit on {'+'.join(quit_keys)}"
        # Neither must succeed: the window may close under them (an X BadWindow error), which is the point;
        # the loop asks again until the process is gone or the deadline passes.
        client.execute(["wmctrl", "-a", window])
        press = f"import pyautogui, time; pyautogui.hotkey(*{list(quit_keys)!r}); time.sleep(2)"
        client.execute(["python", "-c", press], timeout_s=120)
    run(client, f"for i in $(seq 300); do pgrep -x {name} >/dev/null || exit 0; sleep 0.1; done; exit 1", shell=True)


_SET_JSON = """
import json, os, sys
path = os.path.expanduser(sys.argv[1])
data = json.load(open(path))
for dotted, value in json.loads(sys.argv[2]).items():
    *parents, key = dotted.split(".")
    node = data
    for name in parents:
        node = node.setdefault(name, {})
    node[key] = value
json.dump(data, open(path, "w"))
"""


def set_json(client, path: str, values: dict) -> None:
    """In the session's JSON file `path`: each `a.b.c` key set to its value."""
    run(client, ["python3", "-c", _SET_JSON, path, json.dumps(values)])
