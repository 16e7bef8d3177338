"""`python -m rlanything_jax.play`: transcripts and the JSON summary on the last line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _play(*args, tmp_path):
    result = subprocess.run([sys.executable, "-m", "rlanything_jax.play", *args, "--out-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    return result


@pytest.mark.parametrize("args", [
    ("--scenario", "alfworld", "--seed", "2", "--task-type", "pick_heat_then_place_in_recep"),
    ("--scenario", "coding", "--seed", "1", "--task-type", "stdio"),
    ("--scenario", "coding", "--seed", "7"),
])
def test_expert_plays_and_wins(args, tmp_path):
    result = _play(*args, "--expert", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["won"] is True and summary["steps"] >= 1 and summary["task_id"]
    assert "--- observation" in result.stdout


def test_bad_task_type_is_a_clear_error(tmp_path):
    result = _play("--scenario", "alfworld", "--task-type", "juggle", "--expert", tmp_path=tmp_path)
    assert result.returncode == 2 and "task types: pick_and_place_simple" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_scenario_is_a_clear_error(tmp_path):
    result = _play("--scenario", "chess", "--expert", tmp_path=tmp_path)
    assert result.returncode == 2 and "unknown scenario" in result.stderr and "alfworld" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["alfworld", "textworld", "coding"])
def test_model_plays_one_task_of_each_text_scenario(scenario, smollm2_dir, monkeypatch, capsys, tmp_path):
    """`play --model package:...` as its --help shows it: the packaged model plays a few short turns."""
    from rlanything_jax import play

    monkeypatch.setenv("RLANYTHING_CACHE", str(smollm2_dir.parent))  # the session's conversion
    status = play.main(["--scenario", scenario, "--seed", "5", "--model", "package:smollm2-135m-instruct",
                        "--max-steps", "2", "--max-new-tokens", "12", "--max-context-tokens", "2048",
                        "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert 1 <= summary["steps"] <= 2 and summary["task_id"] and summary["won"] in (True, False)
    assert "--- policy 1 (" in out and "--- action 1" in out
