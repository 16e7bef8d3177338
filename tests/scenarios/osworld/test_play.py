"""`python -m rlanything_jax.play --env osworld`: an episode on a local desktop, written out to look at."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scenarios.osworld.conftest import require_desktop_packages

REPO = Path(__file__).resolve().parents[3]


def _play(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlanything_jax.play", "--env", "osworld", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_expert_and_replayed_actions_write_screenshots_a_gif_and_a_trace(tmp_path):
    require_desktop_packages()
    played = _play("--task", "rla-rename-dir-s0-n1", "--expert", "--out", str(tmp_path / "expert"))
    assert played.returncode == 0, played.stderr
    summary = json.loads(played.stdout.strip().splitlines()[-1])
    assert summary["won"] and summary["score"] == 1.0 and summary["steps"] == 2
    files = {p.name for p in (tmp_path / "expert").iterdir()}
    assert {"step_000.png", "step_001.png", "step_002.png", "episode.gif", "trace.html"} <= files
    assert (tmp_path / "expert" / "episode.gif").read_bytes()[:6] == b"GIF89a"
    task = json.loads((REPO / "rlanything_jax/scenarios/osworld/data/tasks/train/rla-infeasible-0.json").read_text())
    (tmp_path / "task.json").write_text(json.dumps(task))
    (tmp_path / "calls.json").write_text(json.dumps([{"action": "wait"}, {"action": "terminate", "status": "failure"}]))
    replayed = _play("--task-file", str(tmp_path / "task.json"), "--actions", str(tmp_path / "calls.json"),
                     "--out", str(tmp_path / "replay"))
    summary = json.loads(replayed.stdout.strip().splitlines()[-1])
    assert summary["won"] and summary["steps"] == 2 and "FAIL" in summary["evaluation"]


def test_bad_requests_exit_with_a_message(tmp_path):
    unknown = _play("--task", "no-such-task", "--expert")
    assert unknown.returncode == 2 and "no bundled task" in unknown.stderr
    plain = {"id": "x", "instruction": "Do it.", "evaluator": {"func": "infeasible"}}
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    no_expert = _play("--task-file", str(tmp_path / "plain.json"), "--expert")
    assert no_expert.returncode == 2 and "no scripted expert" in no_expert.stderr
    model = _play("--task", "rla-rename-dir-s0-n1", "--model", "some/dir")
    assert model.returncode == 2 and "--model" in model.stderr
