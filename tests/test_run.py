"""Whole runs end to end on generated ALFWorld games with scratch-built models: killed with SIGKILL at
seeded points (one inside an asynchronous checkpoint save) and resumed, a run ends exactly where an
uninterrupted one does; a finished run is left alone; Ctrl-C before the first checkpoint says so."""

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from rlanything_jax.system.metrics import read_metrics
from rlanything_jax.system.run import finished_step

ROOT = Path(__file__).resolve().parent.parent
TOTAL_STEPS = 3
# configs/default.py:smoke, changed so that both models train at every step (their optimizer moments
# then carry real state across a resume): the accuracy bands admit the tasks a scratch policy never
# wins, and a short, strong warm start teaches the reward model to write parseable judgments (with
# none parseable, every judgment of a step scores alike and its advantages are all zero). An environment
# step's time limit far above its seconds keeps a busy machine's slowness out of the outcomes.
RESUMABLE_RUN = ["--config=configs/default.py:smoke", f"--config.loop.total_steps={TOTAL_STEPS}",
                 "--config.loop.save_every=1", "--config.loop.eval_every=2", "--config.eval.judge_probe_tasks=1",
                 "--config.train.policy_acc_low=0", "--config.train.policy_acc_high=1",
                 "--config.reward.band_low=0", "--config.reward.band_high=1", "--config.reward.num_judgments=4",
                 "--config.warm_start.enabled=true", "--config.warm_start.num_tasks=4",
                 "--config.warm_start.policy_epochs=1", "--config.warm_start.reward_epochs=2",   # unsure: both train
                 "--config.warm_start.learning_rate=1e-2", "--config.warm_start.batch_size=8",
                 "--config.env.step_timeout_s=600"]
KILL_SEED = 46   # a plan with a kill in the warm start, one inside the save of step 1, one after step 2's metrics
# Metrics two processes cannot agree on, so left out of the comparison (every other key must be equal):
WALL_CLOCK_PREFIX = "time/"                                 # seconds of each phase and step
WALL_CLOCK_KEYS = {"time/rollout_env_s", "time/rollout_sampling_s", "time/judge_sampling_s",   # within phases
                   "time/adaptation_s"}
PROCESS_LOCAL_KEYS = {"sampler/policy_compilations",        # XLA compilations so far in this process:
                      "sampler/reward_compilations",        # a resumed process starts again from zero
                      "memory/host_rss_gib", "memory/host_peak_rss_gib",   # this process's memory
                      "memory/live_arrays_gib", "memory/host_released_gib"}
ORBAX_TEMPORARY = ".orbax-checkpoint-tmp"   # orbax writes step N into "N.orbax-checkpoint-tmp", then renames it
RUN_TIMEOUT_S = 1500


def _command(workdir: Path) -> list[str]:
    return [sys.executable, "-m", "rlanything_jax.main", *RESUMABLE_RUN, f"--config.workdir={workdir}"]


def _user_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}   # one CPU device, as a user runs it


@dataclasses.dataclass(frozen=True)
class KillPoint:
    """Where to SIGKILL a run: `delay_s` after its log prints `text`, or (`save_of` set) as soon as the
    temporary directory of the checkpoint of step `save_of` or later appears, while orbax writes it."""

    text: str = ""
    save_of: int | None = None
    delay_s: float = 0.0


def kill_points(total: int) -> list[KillPoint]:
    """Every kill point of one uninterrupted run, in the order the run reaches them."""
    points = [KillPoint("warm start:"), KillPoint("warm start policy: epoch"), KillPoint("step 0 (start)"),
              KillPoint(save_of=0)]
    for step in range(1, total + 1):
        points += [KillPoint(f"step {step} rollout:"), KillPoint(f"step {step} judge:"),
                   KillPoint(f"step {step} policy update:"), KillPoint(f"step {step}/{total} "),
                   KillPoint(save_of=step)]
    return points


def kill_plan(rng: random.Random, total: int) -> list[KillPoint]:
    """Up to three kills in run order: one inside the save of a step before the last (a missed one falls to
    a later step's save) and two anywhere, each log-triggered one up to half a second after its line."""
    points = kill_points(total)
    saves = [i for i, p in enumerate(points) if p.save_of is not None and 1 <= p.save_of < total]
    chosen = sorted({rng.choice(saves), *rng.sample(range(len(points)), 2)})
    return [points[i] if points[i].save_of is not None else dataclasses.replace(points[i], delay_s=rng.uniform(0, 0.5))
            for i in chosen]


@dataclasses.dataclass(frozen=True)
class Attempt:
    point: KillPoint | None
    killed: bool
    returncode: int
    output: str
    committed: int | None        # the newest complete checkpoint left behind
    killed_while_saving: str | None   # the unfinished checkpoint directory of a kill inside a save


def _temporary_dirs(checkpoints: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(checkpoints) if entry.name.endswith(ORBAX_TEMPORARY))
    except FileNotFoundError:
        return []


def _save_under_way(checkpoints: Path, from_step: int, since_ns: int) -> str | None:
    """The temporary directory of a checkpoint of step >= from_step made since `since_ns` (one a kill left
    unfinished before is older: orbax removes and makes it again when it saves that step again)."""
    for name in _temporary_dirs(checkpoints):
        step = name[:-len(ORBAX_TEMPORARY)]
        with contextlib.suppress(FileNotFoundError):
            if step.isdigit() and int(step) >= from_step and os.stat(checkpoints / name).st_ctime_ns >= since_ns:
                return name
    return None


def run_once(workdir: Path, point: KillPoint | None) -> Attempt:
    """Runs the command in its own process group until it ends, or kills the whole group (the run and its
    environment workers) with SIGKILL at `point`."""
    checkpoints, started_ns = workdir / "checkpoints", time.time_ns()
    process = subprocess.Popen(_command(workdir), cwd=ROOT, env=_user_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines, printed = [], threading.Event()

    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            if point is not None and point.text and point.text in line:
                printed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline, killed, saving = time.monotonic() + RUN_TIMEOUT_S, False, None
    while process.poll() is None and point is not None:
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"no kill point {point} within {RUN_TIMEOUT_S} s:\n{''.join(lines)[-3000:]}")
        if point.save_of is not None:
            saving = _save_under_way(checkpoints, point.save_of, started_ns)
        if printed.is_set() or saving is not None:
            time.sleep(point.delay_s)
            with contextlib.suppress(ProcessLookupError):   # it may have just ended
                os.killpg(process.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.001)
    returncode = process.wait(timeout=RUN_TIMEOUT_S)
    reader.join(timeout=60)
    unfinished = saving if saving is not None and (checkpoints / saving).is_dir() else None
    return Attempt(point, killed, returncode, "".join(lines), finished_step(workdir), unfinished)


def resumed_until_done(workdir: Path, plan: list[KillPoint]) -> list[Attempt]:
    """Kills the run at each point of `plan` in turn (starting it again each time), then lets it finish."""
    attempts = []
    for point in [*plan, None]:
        attempt = run_once(workdir, point)
        attempts.append(attempt)
        if not attempt.killed:
            assert attempt.returncode == 0, attempt.output[-3000:]
            return attempts
    raise AssertionError("unreachable: the last attempt has no kill point")


def comparable_metrics(workdir: Path) -> list[dict]:
    return [{key: value for key, value in line.items() if not key.startswith(WALL_CLOCK_PREFIX)
             and key not in WALL_CLOCK_KEYS | PROCESS_LOCAL_KEYS} for line in read_metrics(workdir / "metrics.jsonl")]


def metric_differences(straight: list[dict], resumed: list[dict]) -> list[str]:
    differences = []
    for a, b in zip(straight, resumed):
        for key in sorted(a.keys() | b.keys()):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                differences.append(f"step {a.get('step')} {key}: {a.get(key, '<absent>')} != {b.get(key, '<absent>')}")
    return differences + ([f"{len(straight)} lines != {len(resumed)} lines"] if len(straight) != len(resumed) else [])


def load_checkpoint(workdir: Path, step: int) -> tuple[dict, dict]:
    """The arrays (as saved, no restore target) and the JSON state of one checkpoint, read with orbax."""
    manager = ocp.CheckpointManager(workdir / "checkpoints", options=ocp.CheckpointManagerOptions(read_only=True))
    try:
        restored = manager.restore(step, args=ocp.args.Composite(arrays=ocp.args.StandardRestore(),
                                                                 json=ocp.args.JsonRestore()))
    finally:
        manager.close()
    return restored["arrays"], restored["json"]


def leaf_differences(straight: dict, resumed: dict) -> list[str]:
    """Leaves whose path, dtype, shape or bytes differ (bitwise: -0.0 against 0.0 and NaN payloads count)."""
    a = {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(straight)}
    b = {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(resumed)}
    differences = [f"{path}: only in one run" for path in sorted(a.keys() ^ b.keys())]
    for path in sorted(a.keys() & b.keys()):
        x, y = a[path], b[path]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            diff = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.shape == y.shape else None
            differences.append(f"{path}: {x.dtype}{x.shape} != {y.dtype}{y.shape} (max |diff| {diff})")
    return differences


def portable_json(state: dict, workdir: Path) -> str:
    """The JSON state with the run's own directory (in the game files' paths) written as <workdir>."""
    return json.dumps(state, sort_keys=True, indent=1).replace(str(workdir), "<workdir>")


@pytest.mark.slow
def test_a_run_killed_at_seeded_points_resumes_to_exactly_the_uninterrupted_run(tmp_path):
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    with (tmp_path / "straight.log").open("w") as log:   # the uninterrupted run, alongside
        straight = subprocess.Popen(_command(straight_dir), cwd=ROOT, env=_user_env(), stdout=log,
                                    stderr=subprocess.STDOUT, text=True)
        try:
            plan = kill_plan(random.Random(KILL_SEED), TOTAL_STEPS)
            attempts = resumed_until_done(resumed_dir, plan)
        finally:
            assert straight.wait(timeout=RUN_TIMEOUT_S) == 0, (tmp_path / "straight.log").read_text()[-3000:]
    record = "\n".join(f"{a.point} killed={a.killed} rc={a.returncode} committed={a.committed} "
                       f"killed while saving={a.killed_while_saving}" for a in attempts)

    # The kills happened where planned: at least two, one of them while orbax was writing a checkpoint.
    kills = [a for a in attempts if a.killed]
    assert len(kills) >= 2, record
    assert any(a.killed_while_saving for a in kills), record
    # Each start resumed from the newest complete checkpoint the kill before it left (none: a fresh start).
    for before, after in zip(attempts, attempts[1:]):
        if before.committed is None:
            assert "resumed from step" not in after.output, record
        else:
            assert f"resumed from step {before.committed} " in after.output, record
    assert _temporary_dirs(resumed_dir / "checkpoints") == [], record   # each killed save was made again

    # Metrics: the same lines, every key but the wall-clock and per-process ones.
    straight_lines, resumed_lines = comparable_metrics(straight_dir), comparable_metrics(resumed_dir)
    assert [line["step"] for line in resumed_lines] == list(range(TOTAL_STEPS + 1)), record
    differences = metric_differences(straight_lines, resumed_lines)
    assert not differences, "\n".join([*differences[:40], record])
    every_key = set().union(*(line.keys() for line in read_metrics(straight_dir / "metrics.jsonl")))
    assert WALL_CLOCK_KEYS | PROCESS_LOCAL_KEYS <= every_key   # the list is not stale
    for line in straight_lines[1:]:   # both models trained at every step, so their moments matter
        assert line["policy/updates"] >= 1 and line["reward_model/updates"] >= 1, line
    for line in straight_lines:
        assert 0.0 <= line["reward_model/probe_step_accuracy"] <= 1.0

    # Checkpoints: every array (params, optimizer moments, update counts of both models), bit for bit,
    # and the JSON state (step, task pool: active tasks, pending candidates, history), at every kept step.
    steps = sorted(int(p.name) for p in (straight_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == sorted(int(p.name) for p in (resumed_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert steps[-1] == TOTAL_STEPS
    for step in steps:
        straight_arrays, straight_json = load_checkpoint(straight_dir, step)
        resumed_arrays, resumed_json = load_checkpoint(resumed_dir, step)
        differences = leaf_differences(straight_arrays, resumed_arrays)
        assert not differences, "\n".join([f"checkpoint {step}:", *differences[:40], record])
        assert portable_json(resumed_json, resumed_dir) == portable_json(straight_json, straight_dir), step
    assert int(straight_arrays["policy"]["step"]) == int(straight_arrays["reward"]["step"]) == TOTAL_STEPS
    slots = straight_json["pool"]["slots"]
    assert any(slot["pending"] is not None for slot in slots) and any(slot["history"] for slot in slots)

    straight_summary = json.loads((straight_dir / "summary.json").read_text())
    resumed_summary = json.loads((resumed_dir / "summary.json").read_text())
    for summary in (straight_summary, resumed_summary):
        summary.pop("seconds_this_session")   # wall clock
        split = summary.pop("time_split_s")
        assert {"rollout", "rollout_env", "rollout_sampling", "judge", "judge_sampling", "adaptation", "policy_update",
                "reward_model_update", "step", "checkpoint_save"} <= set(split), split
    assert resumed_summary == straight_summary
    assert (resumed_dir / "curves.png").read_bytes()[:4] == b"\x89PNG" and list((resumed_dir / "tensorboard").iterdir())
    for step in range(1, TOTAL_STEPS + 1):   # loop.traces_per_step episodes per step
        assert len(list((straight_dir / "traces" / f"step_{step:04d}").glob("*/trace.html"))) == 2, step

def _check_exported_policy(workdir: Path) -> None:
    """loop.export_at_end: the last checkpoint's policy, which transformers runs with our model's logits."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlanything_jax.system import model_export as export

    for role in ("policy", "reward"):
        assert (workdir / "export" / role / "config.json").is_file()
        assert (workdir / "export" / role / "tokenizer_config.json").is_file()
    step, models = export.restore_models(export.run_config_of(workdir), workdir)
    assert step == finished_step(workdir)
    ids = np.array([[5, 9, 12, 7, 30, 2]], np.int32)
    mask = np.ones_like(ids)
    ours = np.asarray(models["policy"][0](ids, mask))
    reloaded = AutoModelForCausalLM.from_pretrained(workdir / "export" / "policy", torch_dtype=torch.float32,
                                                    attn_implementation="eager")
    with torch.no_grad():
        theirs = reloaded(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_a_finished_run_says_so_and_changes_nothing_when_run_again(tmp_path):
    workdir = tmp_path / "smoke"
    command = [sys.executable, "-m", "rlanything_jax.main", "--config=configs/default.py:smoke",
               f"--config.workdir={workdir}", "--config.loop.export_at_end=true"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    first = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"Outputs in {workdir}" in first.stderr   # the run ends by saying where its outputs are
    _check_exported_policy(workdir)
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



_SWALLOWED_INTERRUPT = """
import gc, sys, time
from rlanything_jax.main import _StickyInterrupt

def busy_callback(phase, info):   # Python code the collector runs: an exception raised in it is dropped
    end = time.time() + 0.05
    while time.time() < end:
        pass

with _StickyInterrupt() as interrupt:
    gc.callbacks.append(busy_callback)
    try:
        print("ready", flush=True)
        start = time.time()
        while time.time() - start < 5:
            [[] for _ in range(1000)]   # allocations: the collector (and its callback) runs most of the time
        print("the loop ran to its end", flush=True)
        interrupt.log("next phase")
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


def test_a_ctrl_c_swallowed_by_a_finalizer_still_stops_the_run_at_its_next_log_line():
    # Under a busy train loop, Python runs JAX's finalizers and collector callbacks much of the time, and drops a
    # KeyboardInterrupt raised inside one: a run then went on to its end (seen on a loaded CI machine).
    process = subprocess.Popen([sys.executable, "-c", _SWALLOWED_INTERRUPT], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert out.strip().splitlines()[-1] == "interrupted", (out, err[-2000:])
