"""Starting a multi-process run (rlanything_jax/core/distributed.py): what the environment asks for, two real
processes forming one system, and one process's exception ending both promptly (MULTIHOST.md)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlanything_jax.core.distributed import DistributedConfig, cluster_in_environment, initialize_arguments
from rlanything_jax.core.validation import ConfigError

ROOT = Path(__file__).resolve().parent.parent
SLURM = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
         "SLURM_LOCALID": "0"}


def test_a_single_process_run_starts_nothing_and_launchers_are_recognised():
    cfg = DistributedConfig()
    assert initialize_arguments(cfg, {}) is None
    assert initialize_arguments(cfg, {**SLURM, "SLURM_NTASKS": "1"}) is None   # one Slurm task: one process
    assert cluster_in_environment(SLURM) == "Slurm"
    assert cluster_in_environment({"OMPI_MCA_orte_hnp_uri": "x", "OMPI_COMM_WORLD_SIZE": "4"}) == "Open MPI"
    assert cluster_in_environment({"TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3"}) == "Cloud TPU (GKE)"
    assert cluster_in_environment({"TPU_WORKER_HOSTNAMES": "w0"}) is None
    # A detected cluster: JAX's own detection fills in the addresses.
    slurm = initialize_arguments(cfg, SLURM)
    assert "coordinator_address" not in slurm and slurm["heartbeat_timeout_seconds"] == 10
    assert slurm["shutdown_timeout_seconds"] == 15
    assert initialize_arguments(DistributedConfig(mode="off"), SLURM) is None
    assert "coordinator_address" not in initialize_arguments(DistributedConfig(mode="on"), {})


def test_the_coordinator_comes_from_the_config_or_the_jax_variables_with_its_counts():
    env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
    args = initialize_arguments(DistributedConfig(), env)
    assert (args["coordinator_address"], args["num_processes"], args["process_id"]) == ("10.0.0.1:1234", 4, 3)
    args = initialize_arguments(DistributedConfig(coordinator="h:1", num_processes=2, process_id=0), env)
    assert (args["coordinator_address"], args["num_processes"], args["process_id"]) == ("h:1", 2, 0)
    with pytest.raises(ConfigError, match="distributed.coordinator.*num_processes"):
        initialize_arguments(DistributedConfig(coordinator="h:1"), {})
    with pytest.raises(ConfigError, match="process_id.*below num_processes"):
        DistributedConfig(num_processes=2, process_id=2)
    with pytest.raises(ConfigError, match="mode"):
        DistributedConfig(mode="sometimes")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _two_processes(tmp_path: Path, fail_in: int,
                   command: list[str] | None = None) -> tuple[list[int], list[str], float]:
    command = command or [str(ROOT / "tests" / "distributed_worker.py"), str(fail_in)]
    port = _free_port()
    procs, logs = [], []
    started = time.monotonic()
    for index in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2", "PYTHONPATH": str(ROOT),
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(index)}
        env.pop("XLA_FLAGS", None)
        log = tmp_path / f"p{index}.log"
        logs.append(log)
        # Logs go to files: gloo's connection lines can fill a pipe.
        procs.append(subprocess.Popen([sys.executable, *command], env=env, stdout=log.open("w"),
                                      stderr=subprocess.STDOUT, cwd=tmp_path))
    codes = []
    try:
        for proc in procs:
            codes.append(proc.wait(timeout=120))
    finally:
        for proc in procs:
            proc.kill()
    return codes, [log.read_text() for log in logs], time.monotonic() - started


@pytest.mark.slow
def test_two_processes_form_one_system_and_tag_their_lines(tmp_path):
    codes, logs, _ = _two_processes(tmp_path, fail_in=-1)
    assert codes == [0, 0], logs
    for index, text in enumerate(logs):
        assert f"[p{index}/2] distributed: process {index} of 2, 2 local of 4 devices | sum of indices+1 = 3" in text
        assert f"[p{index}/2] finished, 4 devices" in text


@pytest.mark.slow
def test_an_exception_in_one_process_ends_both_promptly(tmp_path):
    codes, logs, seconds = _two_processes(tmp_path, fail_in=1)
    assert codes[1] == 1 and "[p1/2] uncaught exception, ending this process" in logs[1]
    assert "a deliberate failure in one process" in logs[1]
    assert codes[0] != 0, logs[0]   # the survivor is stopped by the coordination service, not left waiting
    assert "finished" not in logs[0]
    assert seconds < 40, seconds    # without the hooks, both wait for the 100 s shutdown barrier


@pytest.mark.slow
def test_the_main_command_in_two_processes_says_who_speaks_and_stops_cleanly(tmp_path):
    """A run both processes cannot start (its model directory is missing): each says so, tagged, and both
    end with status 2 at once (tests/test_multiprocess.py runs whole multi-process loops)."""
    command = ["-m", "rlanything_jax.main", f"--config={ROOT / 'configs' / 'default.py'}:smoke",
               f"--config.workdir={tmp_path / 'run'}", f"--config.model.policy.path={tmp_path / 'no_model'}"]
    codes, logs, seconds = _two_processes(tmp_path, -1, command)
    assert codes == [2, 2], logs
    for index, text in enumerate(logs):
        assert f" p{index}/2] distributed: process {index} of 2" in text
        assert f"error (p{index}/2): " in text and "no_model" in text
    assert seconds < 60


@pytest.mark.slow
def test_a_process_late_to_its_first_collective_is_waited_for_once_the_groups_are_formed(tmp_path):
    """gloo waits only 30 s for the processes of a device group at the group's first collective; the run
    connects every group it may use at the start, so a process 35 s late to a program is waited for (and a
    group XLA cuts out of a mesh axis is among them)."""
    codes, logs, _ = _two_processes(tmp_path, -1, [str(ROOT / "tests" / "late_peer_worker.py"), "form"])
    assert codes == [0, 0], logs
    for index, text in enumerate(logs):
        # 2 x 2 devices, fsdp = 4 = 2 x 2: three sets of its factors, and process_allgather's own mesh.
        assert f"[p{index}/2] 4 groups formed; sum 8.0; groups connected later: []" in text, text


def _launch(tmp_path: Path, *arguments: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(ROOT / "launchers" / "local_multiprocess.py"), "--num_processes=2",
                             "--devices_per_process=2", f"--log_dir={tmp_path / 'logs'}", *arguments],
                            capture_output=True, text=True, timeout=180, cwd=ROOT)
    return result, time.monotonic() - started


@pytest.mark.slow
def test_the_local_launcher_runs_n_processes_and_reports_the_first_failure(tmp_path):
    result, _ = _launch(tmp_path, "--module=tests.distributed_worker", "--", "-1")
    assert result.returncode == 0, result.stdout + result.stderr
    for index in range(2):
        log = (tmp_path / "logs" / f"process_{index}.log").read_text()
        assert f"[p{index}/2] distributed: process {index} of 2, 2 local of 4 devices" in log
    result, seconds = _launch(tmp_path, "--module=tests.distributed_worker", "--", "1")
    assert result.returncode == 1, result.stdout   # process 1's exit code, not the aborted survivor's
    assert "process 1 failed (exit 1); ending the others" in result.stdout
    assert "a deliberate failure in one process" in result.stdout   # the end of its log
    assert seconds < 60
