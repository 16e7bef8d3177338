"""One RLAnything run over several processes (launchers/local_multiprocess.py) against one process.

A tiny ALFWorld run (warm start, 2 RL steps that train both models) on 1 process x 8 CPU devices is the
reference. The same run on 2 processes x 4 devices is killed in step 2: the surviving process stops on
its own (JAX's coordination service) within 30 s, naming the lost one. Its step-1 checkpoint then goes on
to step 2 on 2 x 4 (the same command), 1 x 8 and 4 x 2, each equal to the reference: the same metrics
lines, each step once, and the same final parameters.
"""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "launchers" / "local_multiprocess.py"
RUN = ["--config=configs/default.py:smoke", "--config.loop.total_steps=2", "--config.loop.save_every=1",
       "--config.loop.eval_every=2", "--config.eval.judge_probe_tasks=1",
       "--config.train.policy_acc_low=0", "--config.train.policy_acc_high=1",
       "--config.reward.band_low=0", "--config.reward.band_high=1", "--config.reward.num_judgments=4",
       "--config.warm_start.enabled=true", "--config.warm_start.num_tasks=4",
       "--config.warm_start.policy_epochs=1", "--config.warm_start.reward_epochs=2",   # unsure: both train
       "--config.warm_start.learning_rate=1e-2", "--config.warm_start.batch_size=8",
       "--config.env.step_timeout_s=600", "--config.loop.traces_per_step=0",
       # 3 slots for 8 episodes: episodes join running conversations (continuous batching) on every layout.
       "--config.rollout.max_live_episodes=3", "--config.rollout.continuous_batching=true"]

pytestmark = pytest.mark.slow
# Across processes, gradients are summed over gloo in another order than inside one process: float32
# rounding, about 1e-7 of a value. Metrics (losses, norms, entropies) then agree to about 1e-5 relative
# (measured: 1.6e-5 on the reward model's grad norm and entropy; every count and rate exactly). Adam turns
# rounding-level gradient differences into updates of up to its learning rate wherever a gradient is
# near zero, and the warm start's is 1e-2: final parameters agree to 2e-5 (policy) and 1.6e-4 (reward
# model) on 2 x 4 against 1 x 8.
_METRIC_RTOL = 1e-4
# Seconds, compilations so far in this process (a resumed process compiles only what it runs), its memory.
_PER_SESSION = ("time/", "sampler/", "memory/")
_PARAM_ATOL = 1e-3


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COORDINATOR", "JAX_NUM_PROC", "JAX_PROC"))}
    env.update(HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)   # the launcher sets the devices per process
    return env


def _launch(workdir: Path, processes: int, devices: int, *extra: str, timeout: int = 900) -> None:
    command = [sys.executable, str(LAUNCHER), f"--num_processes={processes}", f"--devices_per_process={devices}",
               f"--log_dir={workdir}.logs", "--", *RUN, f"--config.workdir={workdir}", *extra]
    done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _metrics(workdir: Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def _params(workdir: Path, step: int) -> dict[str, np.ndarray]:
    """Every array of a checkpoint step (both models' train states), read in this process as numpy."""
    import jax
    import orbax.checkpoint as ocp

    checkpointer = ocp.PyTreeCheckpointer()
    path = workdir / "checkpoints" / str(step) / "arrays"
    metadata = checkpointer.metadata(path)
    metadata = getattr(getattr(metadata, "item_metadata", metadata), "tree", metadata)
    arrays = checkpointer.restore(path, restore_args=jax.tree.map(
        lambda _: ocp.RestoreArgs(restore_type=np.ndarray), metadata))
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(arrays)}


def _assert_same_run(ours: list[dict], reference: list[dict], steps: range) -> None:
    ours = {line["step"]: line for line in ours}
    reference = {line["step"]: line for line in reference}
    for step in steps:
        a, b = ours[step], reference[step]
        keys = {k for k in a.keys() | b.keys() if not k.startswith(_PER_SESSION)}
        assert keys <= a.keys() and keys <= b.keys(), (step, keys ^ (a.keys() & b.keys()))
        for key in keys:
            if isinstance(b[key], float) and math.isnan(b[key]):
                assert math.isnan(a[key]), (step, key)
            elif isinstance(b[key], float):
                assert a[key] == pytest.approx(b[key], rel=_METRIC_RTOL, abs=1e-5), (step, key, a[key], b[key])
            else:
                assert a[key] == b[key], (step, key)


def _assert_same_params(ours: dict, reference: dict) -> None:
    assert ours.keys() == reference.keys()
    worst = max(float(np.max(np.abs(ours[k].astype(np.float64) - reference[k]))) for k in ours if ours[k].size)
    assert worst <= _PARAM_ATOL, worst


def _run_one_process(workdir: Path, *extra: str) -> Path:
    env = {**_env(), "JAX_NUM_CPU_DEVICES": "8"}
    done = subprocess.run([sys.executable, "-m", "rlanything_jax.main", *RUN, f"--config.workdir={workdir}", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The 2-step run on 1 process x 8 devices."""
    workdir = _run_one_process(tmp_path_factory.mktemp("multiprocess") / "one_by_eight")
    lines = _metrics(workdir)
    assert [line["step"] for line in lines] == [0, 1, 2]
    # Its RL steps train both models: equal parameters below are more than equal warm starts.
    assert sum(line["policy/updates"] for line in lines[1:]) > 0
    assert sum(line["reward_model/updates"] for line in lines[1:]) > 0
    assert sum(line["rollout/joined_rows"] for line in lines[1:]) > 0   # slots were refilled
    return workdir


def _wait_for(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never showed {text!r}")


@pytest.fixture(scope="module")
def killed_in_step_two(tmp_path_factory) -> Path:
    """A 2 x 4 run whose process 1 is SIGKILLed in step 2 (started by hand: the launcher would end
    process 0 itself). Process 0 must stop by itself within 30 s, naming the lost process. Returns the
    workdir as the kill left it (checkpoints of steps 0 and 1)."""
    base = tmp_path_factory.mktemp("killed")
    workdir, logs = base / "workdir", base / "logs"
    logs.mkdir()
    from launchers.local_multiprocess import free_port

    port = free_port()
    processes = []
    for index in range(2):
        env = {**_env(), "JAX_NUM_CPU_DEVICES": "4", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
               "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(index)}
        with open(logs / f"{index}.log", "w") as log:
            processes.append(subprocess.Popen([sys.executable, "-m", "rlanything_jax.main", *RUN,
                                               f"--config.workdir={workdir}"], cwd=ROOT, env=env, stdout=log,
                                              stderr=subprocess.STDOUT))
    try:
        _wait_for(logs / "1.log", "step 2 rollout", timeout=600)
        processes[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = processes[0].wait(timeout=60)
        stopped_after = time.monotonic() - killed
    finally:
        for process in processes:
            process.kill()
            process.wait()
    survivor = (logs / "0.log").read_text(errors="replace")
    assert code != 0 and stopped_after < 30, (code, stopped_after)
    lost = re.search(r"stopped sending heartbeats\):\s*(\d+)", survivor)
    assert lost and lost.group(1) == "1", survivor[-2000:]
    assert (workdir / "checkpoints" / "1").is_dir() and not (workdir / "checkpoints" / "2").is_dir()
    return workdir


@pytest.mark.parametrize("processes,devices", [(2, 4), (1, 8), (4, 2)])
def test_a_killed_two_process_run_resumes_on_any_process_count_as_the_one_process_run(
        reference, killed_in_step_two, tmp_path, processes, devices):
    """Re-running resumes from the 2 x 4 run's step-1 checkpoint (the same command, or 1 x 8, or 4 x 2):
    every step is logged once, and metrics and final parameters equal the uninterrupted 1 x 8 run's."""
    workdir = tmp_path / "resumed"
    shutil.copytree(killed_in_step_two, workdir)
    _launch(workdir, processes, devices)
    lines = _metrics(workdir)
    assert [line["step"] for line in lines] == [0, 1, 2]
    _assert_same_run(lines, _metrics(reference), range(3))
    _assert_same_params(_params(workdir, 2), _params(reference, 2))
    assert json.loads((workdir / "summary.json").read_text())["steps"] == 2   # process 0's summary


@pytest.fixture(scope="module")
def split_one_by_eight(tmp_path_factory) -> Path:
    """The run with `mesh.placement=split` on 1 x 8: learners on 4 devices, samplers on the other 4."""
    return _run_one_process(tmp_path_factory.mktemp("split") / "one_by_eight", "--config.mesh.placement=split")


def test_split_placement_agrees_with_colocated(reference, split_one_by_eight):
    """The same run; only the learners' reductions (over 4 devices instead of 8) are summed in another order
    (see _METRIC_RTOL)."""
    ours, theirs = _metrics(split_one_by_eight), _metrics(reference)
    assert [line["step"] for line in ours] == [0, 1, 2]
    for a, b in zip(ours, theirs):
        for key in {k for k in b if not k.startswith(_PER_SESSION)}:
            if isinstance(b[key], float) and not math.isnan(b[key]):
                assert a[key] == pytest.approx(b[key], rel=_METRIC_RTOL, abs=1e-5), (a["step"], key)
            elif not isinstance(b[key], float):
                assert a[key] == b[key], (a["step"], key)
    _assert_same_params(_params(split_one_by_eight, 2), _params(reference, 2))


def test_split_placement_runs_across_processes(split_one_by_eight, tmp_path):
    """2 x 4 with `split`: each process gives 2 devices to the learners and 2 to the samplers, and new
    weights move device to device inside each process. It equals the 1 x 8 split run."""
    workdir = tmp_path / "split_two_by_four"
    _launch(workdir, 2, 4, "--config.mesh.placement=split")
    _assert_same_run(_metrics(workdir), _metrics(split_one_by_eight), range(3))
    _assert_same_params(_params(workdir, 2), _params(split_one_by_eight, 2))
