"""Whole-system checkpoints: round trip, pruning, a corrupt latest step, and resume in a new process."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from rlanything_jax.checkpoint import SystemCheckpointer, abstract_like

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


def _worker(directory: Path, total: int, out: Path, stop_after: int | None = None) -> str:
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")
    args = [sys.executable, "-m", "tests.resume_worker", str(directory), str(total), str(out)]
    if stop_after is not None:
        args += ["--stop-after", str(stop_after)]
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_resume_in_a_new_process_equals_an_uninterrupted_run(tmp_path):
    _worker(tmp_path / "straight", 5, tmp_path / "straight.npz")
    _worker(tmp_path / "resumed", 5, tmp_path / "first.npz", stop_after=3)
    assert "resumed at step 3" in _worker(tmp_path / "resumed", 5, tmp_path / "resumed.npz")
    straight, resumed = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "resumed.npz")
    assert int(straight["step"]) == int(resumed["step"]) == 5
    for name in straight.files:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)
    first = np.load(tmp_path / "first.npz")
    assert int(first["step"]) == 3
    assert not np.array_equal(first["arr_0"], resumed["arr_0"])


def test_register_twice_is_an_error(tmp_path):
    checkpointer = SystemCheckpointer(tmp_path)
    checkpointer.register("x", Counter())
    with pytest.raises(ValueError, match="already registered"):
        checkpointer.register("x", Counter())
