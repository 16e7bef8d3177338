"""Whole-system checkpoints: round trip, pruning, a corrupt latest step, and resume in a new process,
also after a SIGKILL inside an asynchronous save."""

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from rlanything_jax.core.checkpoint import SystemCheckpointer, abstract_like

ROOT = Path(__file__).resolve().parent.parent


class Counter:
    def __init__(self, value=0):
        self.value = value

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def _arrays(seed: int) -> dict:
    key = jax.random.key(seed)
    return {"policy": {"w": jax.random.normal(key, (4, 3)), "step": np.int32(seed)},
            "rng": jax.random.key_data(key)}


def test_round_trip_with_registered_json_state(tmp_path):
    counter = Counter(7)
    checkpointer = SystemCheckpointer(tmp_path, max_to_keep=2)
    checkpointer.register("counter", counter)
    checkpointer.save(1, _arrays(1), {"note": "first"})
    counter.value = 9
    checkpointer.save(2, _arrays(2), {"note": "second"})
    checkpointer.save(3, _arrays(3))
    checkpointer.wait()
    assert checkpointer.steps() == [2, 3]  # keeps the last two

    counter.value = 0
    restored = checkpointer.restore_latest(abstract_like(_arrays(0)))
    assert restored.step == 3 and counter.value == 9
    np.testing.assert_array_equal(restored.arrays["policy"]["w"], _arrays(3)["policy"]["w"])
    np.testing.assert_array_equal(restored.arrays["rng"], _arrays(3)["rng"])
    checkpointer.close()


def test_a_chosen_step_restores_that_step_and_a_missing_one_says_which_there_are(tmp_path):
    checkpointer = SystemCheckpointer(tmp_path, max_to_keep=3)
    for step in (1, 2):
        checkpointer.save(step, _arrays(step), {"note": step})
    restored = checkpointer.restore_latest(abstract_like(_arrays(0)), step=1)
    assert restored.step == 1 and restored.json["note"] == 1
    np.testing.assert_array_equal(restored.arrays["policy"]["w"], _arrays(1)["policy"]["w"])
    with pytest.raises(FileNotFoundError, match=r"no checkpoint of step 5 .* steps \[1, 2\]"):
        checkpointer.restore_latest(abstract_like(_arrays(0)), step=5)
    checkpointer.close()


def test_empty_directory_restores_nothing(tmp_path):
    assert SystemCheckpointer(tmp_path).restore_latest(abstract_like(_arrays(0))) is None


def test_a_truncated_latest_step_is_skipped_with_a_warning(tmp_path, caplog):
    checkpointer = SystemCheckpointer(tmp_path, max_to_keep=3)
    checkpointer.save(1, _arrays(1))
    checkpointer.save(2, _arrays(2))
    checkpointer.close()
    for file in (tmp_path / "2" / "arrays").rglob("*"):
        if file.is_file() and file.stat().st_size > 0:
            file.write_bytes(file.read_bytes()[: file.stat().st_size // 3])  # truncate every data file
    with caplog.at_level(logging.WARNING):
        restored = SystemCheckpointer(tmp_path).restore_latest(abstract_like(_arrays(0)))
    assert restored.step == 1
    np.testing.assert_array_equal(restored.arrays["policy"]["w"], _arrays(1)["policy"]["w"])
    assert any("step 2" in record.getMessage() and "unreadable" in record.getMessage() for record in caplog.records)


WORKER_ENV = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")
ORBAX_TEMPORARY = ".orbax-checkpoint-tmp"   # orbax writes step N into "N.orbax-checkpoint-tmp", then renames it


def _worker_args(directory: Path, total: int, out: Path, stop_after: int | None = None) -> list[str]:
    args = [sys.executable, "-m", "tests.resume_worker", str(directory), str(total), str(out)]
    return args + (["--stop-after", str(stop_after)] if stop_after is not None else [])


def _worker(directory: Path, total: int, out: Path, stop_after: int | None = None) -> str:
    result = subprocess.run(_worker_args(directory, total, out, stop_after), cwd=ROOT, env=WORKER_ENV,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _assert_same_state(straight_npz: Path, resumed_npz: Path) -> None:
    """Every leaf of the final train state (update count, params, optimizer moments) bit for bit, and the
    data iterator's position."""
    straight, resumed = np.load(straight_npz), np.load(resumed_npz)
    assert straight.files == resumed.files
    assert any("opt_state" in name and "mu" in name for name in straight.files)   # Adam's moments are there
    for name in straight.files:
        a, b = straight[name], resumed[name]
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), name


@pytest.mark.slow   # 20-90 s on a 2-core CPU (fast-tier budget)
def test_resume_in_a_new_process_equals_an_uninterrupted_run(tmp_path):
    _worker(tmp_path / "straight", 5, tmp_path / "straight.npz")
    _worker(tmp_path / "resumed", 5, tmp_path / "first.npz", stop_after=3)
    assert "resumed at step 3" in _worker(tmp_path / "resumed", 5, tmp_path / "resumed.npz")
    _assert_same_state(tmp_path / "straight.npz", tmp_path / "resumed.npz")
    straight = np.load(tmp_path / "straight.npz")
    assert int(straight[".step"]) == 5 and int(straight["data_position"]) == 5
    first = np.load(tmp_path / "first.npz")
    assert int(first[".step"]) == 3
    weights = ".params['embed'].value"
    assert not np.array_equal(first[weights], straight[weights])


def _new_temporary_dir(directory: Path, from_step: int, since_ns: int) -> str | None:
    for name in os.listdir(directory) if directory.is_dir() else []:
        step = name[:-len(ORBAX_TEMPORARY)]
        try:
            if name.endswith(ORBAX_TEMPORARY) and int(step) >= from_step \
                    and os.stat(directory / name).st_ctime_ns >= since_ns:
                return name
        except FileNotFoundError:   # renamed in between: that save just ended
            continue
    return None


def _kill_inside_a_save(directory: Path, total: int, out: Path, from_step: int) -> str | None:
    """Starts the worker and SIGKILLs it as soon as the temporary directory of a checkpoint of step
    >= from_step appears; returns that directory's name if the kill left it unfinished (None if the save
    ended first, or the worker did)."""
    started_ns = time.time_ns()   # a temporary directory an earlier kill left is older: not this run's save
    process = subprocess.Popen(_worker_args(directory, total, out), cwd=ROOT, env=WORKER_ENV,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    saving = None
    try:
        while process.poll() is None and saving is None:
            saving = _new_temporary_dir(directory, from_step, started_ns)
            time.sleep(0.0005)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=300)
    return saving if saving is not None and (directory / saving).is_dir() else None


@pytest.mark.slow
def test_a_kill_inside_an_async_save_resumes_from_the_step_before_and_ends_equal(tmp_path):
    total, directory = 12, tmp_path / "killed"
    _worker(tmp_path / "straight", total, tmp_path / "straight.npz")
    unfinished = None
    for from_step in (3, 5, 7, 9):   # a save the kill missed (it ended first) is tried again later
        unfinished = _kill_inside_a_save(directory, total, tmp_path / "unused.npz", from_step)
        if unfinished is not None:
            break
    assert unfinished is not None, "no kill landed inside a save"
    saved = int(unfinished[:-len(ORBAX_TEMPORARY)])
    assert not (directory / str(saved)).exists()   # orbax never shows a half-written step
    committed = max(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    assert committed == saved - 1   # a save starts once the one before it has ended
    output = _worker(directory, total, tmp_path / "resumed.npz")
    assert f"resumed at step {saved - 1}" in output
    assert not any(p.name.endswith(ORBAX_TEMPORARY) for p in directory.iterdir())   # step `saved` saved again
    _assert_same_state(tmp_path / "straight.npz", tmp_path / "resumed.npz")


def test_register_twice_is_an_error(tmp_path):
    checkpointer = SystemCheckpointer(tmp_path)
    checkpointer.register("x", Counter())
    with pytest.raises(ValueError, match="already registered"):
        checkpointer.register("x", Counter())
