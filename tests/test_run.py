"""A whole run end to end on generated ALFWorld games with scratch-built models, killed and resumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--config=configs/alfworld.py:scratch", "--config.env.num_train_tasks=4", "--config.env.num_eval_tasks=2",
         "--config.warm_start.num_tasks=4", "--config.warm_start.policy_epochs=1", "--config.rollout.tasks_per_step=2",
         "--config.rollout.group_size=2", "--config.rollout.max_turns=3", "--config.eval.max_turns=3",
         "--config.eval.group_size=1", "--config.loop.eval_every=2", "--config.env.workers=1",
         "--config.model.scratch.num_layers=1", "--config.model.scratch.vocab_size=512"]


def _main(workdir, steps, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}   # one CPU device, as a user runs it
    return subprocess.Popen([sys.executable, "-m", "rlanything_jax.main", *SMALL, f"--config.workdir={workdir}",
                             f"--config.loop.total_steps={steps}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


def _lines(workdir):
    return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_run_is_killed_and_resumes_with_nothing_lost_or_repeated(tmp_path):
    workdir = tmp_path / "run"
    process = _main(workdir, steps=3)
    deadline = time.time() + 900
    while time.time() < deadline:   # kill -9 once step 1 is checkpointed
        if (workdir / "checkpoints" / "1").is_dir() and (workdir / "metrics.jsonl").exists() \
                and len(_lines(workdir)) >= 2:
            break
        time.sleep(1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = max(line["step"] for line in _lines(workdir))
    assert done_before >= 1
    resumed = _main(workdir, steps=3)
    output, _ = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, output[-3000:]
    assert "resumed from step" in output
    steps = [line["step"] for line in _lines(workdir)]
    assert steps == [0, 1, 2, 3]
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["held_out_success_end"] is not None
    assert (workdir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert list((workdir / "tensorboard").iterdir())
    for line in _lines(workdir)[1:]:
        assert "rollout/success_rate" in line and "time/step_s" in line
    for line in _lines(workdir):   # the fixed probe of the reward model, after the warm start and every step
        assert 0.0 <= line["reward_model/probe_step_accuracy"] <= 1.0


@pytest.mark.slow
def test_a_finished_run_says_so_and_changes_nothing_when_run_again(tmp_path):
    workdir = tmp_path / "smoke"
    command = [sys.executable, "-m", "rlanything_jax.main", "--config=configs/default.py:smoke",
               f"--config.workdir={workdir}"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    first = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"Outputs in {workdir}" in first.stderr   # the run ends by saying where its outputs are
    before = {p: p.stat().st_mtime_ns for p in workdir.rglob("*") if p.is_file()}
    summary = (workdir / "summary.json").read_text()
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already complete" in again.stderr and str(workdir) in again.stderr
    assert (workdir / "summary.json").read_text() == summary
    assert {p: p.stat().st_mtime_ns for p in workdir.rglob("*") if p.is_file()} == before   # no file touched


@pytest.mark.slow
def test_ctrl_c_before_the_first_checkpoint_says_nothing_was_saved(tmp_path):
    workdir = tmp_path / "interrupted"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    process = subprocess.Popen([sys.executable, "-m", "rlanything_jax.main", "--config=configs/default.py:smoke",
                                "--config.warm_start.enabled=true", "--config.warm_start.policy_epochs=50",
                                f"--config.workdir={workdir}"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in process.stderr:   # interrupt once the warm start is under way
        lines.append(line)
        if "warm start policy: epoch 1/" in line:
            process.send_signal(signal.SIGINT)
            break
    output = "".join(lines) + process.stderr.read()
    assert process.wait(timeout=300) == 130, output[-3000:]
    assert "nothing was saved, so re-running starts over" in output and "Traceback" not in output
    assert not (workdir / "checkpoints").exists() or not any((workdir / "checkpoints").iterdir())
