"""The sandbox contains hostile programs, with the right status, and leaves the machine as it was.

Everything runs for real. Hostile cases that only bubblewrap contains fail in CI (`CI` set)
when bubblewrap is missing or unusable, and skip elsewhere (saying why).
"""

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from rlanything_jax.agents.envs import sandbox
from rlanything_jax.scenarios.coding import function_tests

REPOSITORY = Path(__file__).resolve().parents[2]
# Only for tests that deliberately run the weak modes; containment tests see the warning.
weak_modes_on_purpose = pytest.mark.filterwarnings("ignore:UNTRUSTED CODE SANDBOX IS WEAK:RuntimeWarning")


def _process_count() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


def _processes_mentioning(marker: str) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(name))
        except OSError:
            pass
    return found


def _needs_strong_isolation() -> None:
    """This containment needs bubblewrap (and, as root, a dropped uid): without it CI fails, a
    developer's machine skips."""
    try:
        sandbox.require_strong_isolation(allow_weak=False)
    except sandbox.SandboxUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must contain hostile programs, but: {error}")
        pytest.skip(f"no strong isolation on this machine: {error}")


@pytest.fixture
def fresh_probes(monkeypatch):
    """Forget which isolation modes work, so that a changed PATH is probed again."""
    monkeypatch.setattr(sandbox, "_probed", {})
    monkeypatch.setattr(sandbox, "_probe_failures", {})
    monkeypatch.setattr(sandbox, "_warned", set())


@pytest.fixture(params=sandbox.ISOLATIONS)
def any_isolation(request):
    if request.param not in sandbox.available_isolations():
        pytest.skip(f"isolation {request.param!r} does not work on this machine")
    return request.param


# --- ordinary programs ------------------------------------------------------------------


def test_trivial_run_reads_stdin():
    result = sandbox.execute("print(input()[::-1])", "hello\n")
    assert result == sandbox.ExecResult("ok", "olleh\n", "", result.wall_s)


def test_installed_packages_are_importable_inside():
    result = sandbox.execute("import numpy\nprint(int(numpy.arange(4).sum()))")
    assert (result.status, result.stdout) == ("ok", "6\n"), result.stderr


@weak_modes_on_purpose
def test_statuses_of_failing_programs(any_isolation):
    def status(program, timeout_s=20.0):   # generous: a loaded machine starts runs slowly
        return sandbox.execute(program, timeout_s=timeout_s, isolation=any_isolation).status
    assert status("import sys; sys.exit(3)") == "error"
    assert status("raise ValueError('boom')") == "error"
    assert status("def broken(:") == "error"
    assert status("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == "killed"
    assert status("x = bytearray(10 * 2**30)") == "memory"
    assert status("while True: pass", timeout_s=2.0) == "timeout"
    result = sandbox.execute("raise ValueError('boom')", isolation=any_isolation)
    assert "ValueError: boom" in result.stderr


def test_outputs_match_normalises_whitespace_like_the_reference():
    assert sandbox.outputs_match("1 2\n3", "  1\t2 \n\n3\n")
    assert sandbox.outputs_match("", "\n \n")
    assert not sandbox.outputs_match("1 2", "12")
    assert not sandbox.outputs_match("3", "3 4")


def test_scratch_dir_is_fresh_cwd_and_removed_afterwards(tmp_path):
    program = "import os; open('note.txt', 'w').write('x'); print(os.getcwd()); print(sorted(os.listdir('.')))"
    first = sandbox.execute(program, scratch_root=str(tmp_path))
    second = sandbox.execute(program, scratch_root=str(tmp_path))
    assert first.status == second.status == "ok"
    assert first.stdout.split()[0] != second.stdout.split()[0]
    assert "note.txt" in first.stdout
    assert list(tmp_path.iterdir()) == []


def test_execute_many_keeps_order_and_runs_max_workers_at_once():
    # each run reports when it was alive (the host's clock: no time namespace); two runs
    # started together overlap, and the pool never has three alive
    program = "import time\nstart = time.time()\ntime.sleep(1.5)\nprint(input(), start, time.time())"
    results = sandbox.execute_many([(program, f"{i}\n") for i in range(4)], max_workers=2)
    rows = [r.stdout.split() for r in results]
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    spans = [(float(start), float(end)) for _, start, end in rows]
    alive_at_starts = [sum(s <= t < e for s, e in spans) for t, _ in spans]
    assert max(alive_at_starts) == 2
    assert sandbox.execute_many([], max_workers=2) == []


def test_function_tests_pass_fail_and_cannot_be_skipped_by_exiting_early():
    tests = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    good = "def add(a, b):\n    return a + b\n"
    assert function_tests.run_function_tests(good, tests, "add").status == "ok"
    assert function_tests.run_function_tests("def add(a, b):\n    return a - b\n", tests, "add").status == "error"
    early_exit = function_tests.run_function_tests("import os\nos._exit(0)\n", tests, "add")
    assert early_exit.status == "error"
    assert "did not run to completion" in early_exit.stderr
    slow = function_tests.run_function_tests("def add(a, b):\n    while True: pass\n", tests, "add", timeout_s=1.0)
    assert slow.status == "timeout"


@weak_modes_on_purpose
def test_isolation_can_be_forced(monkeypatch):
    assert sandbox.isolation() in sandbox.available_isolations()
    sandbox.set_isolation("none")
    try:
        assert sandbox.isolation() == "none"
        assert sandbox.execute("print(2)").stdout == "2\n"
    finally:
        sandbox.set_isolation(None)
    monkeypatch.setenv(sandbox.ISOLATION_ENV_VAR, "none")
    assert sandbox.isolation() == "none"
    with pytest.raises(ValueError):
        sandbox.set_isolation("chroot")


# --- hostile programs -------------------------------------------------------------------


@pytest.mark.parametrize("program", ["while True: pass", "import time\ntime.sleep(60)"])
def test_infinite_program_times_out_by_wall_clock(program):
    assert sandbox.execute(program, timeout_s=1.0).status == "timeout"


def test_fork_bomb_is_contained_and_leaves_no_process(tmp_path):
    _needs_strong_isolation()   # as root, RLIMIT_NPROC binds only for a dropped uid
    before = _process_count()
    result = sandbox.execute("import os\nwhile True:\n    os.fork()\n", timeout_s=5.0,
                             scratch_root=str(tmp_path))
    assert result.status in ("killed", "error")
    deadline = time.monotonic() + 10
    while (_processes_mentioning(str(tmp_path)) or _process_count() > before + 20) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_mentioning(str(tmp_path)) == []
    assert _process_count() <= before + 20   # other users share this machine: some slack


def test_ten_gigabyte_allocation_is_a_memory_error():
    result = sandbox.execute("x = bytearray(10 * 2**30)\nprint('allocated')")
    assert result.status == "memory"
    assert "allocated" not in result.stdout
    filling = "blocks = []\nwhile True:\n    blocks.append(b'x' * 2**26)"
    assert sandbox.execute(filling, timeout_s=30.0).status == "memory"   # a loaded machine is slow to fill 1 GB


def test_one_gigabyte_file_write_is_contained(tmp_path):
    _needs_strong_isolation()   # the host's /tmp is private only under bubblewrap
    host_tmp_target = f"/tmp/rla-big-{uuid.uuid4().hex}.bin"
    program = (f"chunk = b'0' * 2**20\n"
               f"for target in ('big.bin', {host_tmp_target!r}):\n"
               f"    try:\n"
               f"        with open(target, 'wb') as f:\n"
               f"            for _ in range(1024):\n"
               f"                f.write(chunk)\n"
               f"    except OSError as error:\n"
               f"        print(error.strerror)\n")
    result = sandbox.execute(program, scratch_root=str(tmp_path))
    try:
        assert result.status == "ok", result.stderr
        assert [line in ("File too large", "No space left on device") for line in result.stdout.splitlines()] \
            == [True, True]
        assert list(tmp_path.iterdir()) == []
        assert not os.path.exists(host_tmp_target)
    finally:
        if os.path.exists(host_tmp_target):
            os.remove(host_tmp_target)


def test_endless_output_is_cut_off():
    result = sandbox.execute("while True:\n    print('x' * 4096)", max_output_bytes=1 << 20)
    assert result.status == "killed"
    assert len(result.stdout) <= 1 << 20
    assert "output limit" in result.stderr


def test_no_network_to_a_listener_on_the_host_loopback():
    _needs_strong_isolation()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
        result = sandbox.execute(program)
        assert result.status == "error"
        assert "connected" not in result.stdout
        with pytest.raises(socket.timeout):
            listener.accept()


def test_environment_of_the_parent_is_not_inherited(monkeypatch):
    monkeypatch.setenv("RLA_TEST_SECRET", "hunter2")
    result = sandbox.execute("import os\nprint(os.environ.get('RLA_TEST_SECRET'))\nprint(sorted(os.environ))")
    assert result.status == "ok"
    assert result.stdout.splitlines()[0] == "None"
    assert "hunter2" not in result.stdout


def test_writing_outside_the_scratch_dir_fails(tmp_path):
    _needs_strong_isolation()
    targets = [str(tmp_path / "escaped.txt"), f"/var/tmp/rla-escape-{uuid.uuid4().hex}"]
    program = "import sys\nfor target in sys.stdin.read().split():\n    open(target, 'w').write('x')\n"
    try:
        for target in targets:
            result = sandbox.execute(program, target)
            assert result.status == "error"
            assert not os.path.exists(target)
    finally:
        for target in targets:
            if os.path.exists(target):
                os.remove(target)


def test_untrusted_code_does_not_run_as_root():
    if os.geteuid() != 0:
        pytest.skip("only meaningful when the tests run as root")
    _needs_strong_isolation()
    result = sandbox.execute("import os\nprint(os.getuid())")
    assert result.status == "ok" and int(result.stdout) != 0


def test_reading_host_files_outside_the_scratch_dir_fails(tmp_path):
    _needs_strong_isolation()
    secret = tmp_path / "secret.txt"
    secret.write_text(f"secret-{uuid.uuid4().hex}")
    home_files = sorted(str(f) for f in Path.home().iterdir() if f.is_file())[:3]   # e.g. ~/.bashrc
    targets = [str(secret), str(REPOSITORY / "README.md"), "/etc/hostname", "/etc/passwd", *home_files]
    targets = [t for t in targets if os.access(t, os.R_OK)]   # what the host itself can read
    program = ("import sys\n"
               "for target in sys.stdin.read().split():\n"
               "    try:\n"
               "        print('READ', target, open(target).read())\n"
               "    except OSError as error:\n"
               "        print('BLOCKED', target, error.strerror)\n")
    result = sandbox.execute(program, "\n".join(targets))
    assert result.status == "ok", result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [["BLOCKED", t] for t in targets]
    assert secret.read_text() not in result.stdout


def test_signalling_a_host_process_fails():
    _needs_strong_isolation()
    victim = subprocess.Popen(["sleep", "600"])
    try:
        program = (f"import os, signal\n"
                   f"for signum in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):\n"
                   f"    try:\n"
                   f"        os.kill({victim.pid}, signum)\n"
                   f"    except OSError as error:\n"
                   f"        print(error.strerror)\n")
        result = sandbox.execute(program)
        assert result.status == "ok", result.stderr
        with pytest.raises(subprocess.TimeoutExpired):   # still running
            victim.wait(timeout=1.0)
        assert _process_state(victim.pid) == "S"          # asleep, not stopped
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("parent", ["exits", "hangs past the timeout"])
def test_setsid_daemon_does_not_outlive_the_run(parent):
    _needs_strong_isolation()
    marker = f"rla-daemon-{uuid.uuid4().hex}"
    daemon_code = "import time\nwhile True:\n    time.sleep(0.05)\n"
    program = (f"import os, sys, time\n"
               f"if os.fork() == 0:\n"
               f"    os.setsid()\n"
               f"    if os.fork() == 0:   # reparented away from the program\n"
               f"        os.execv(sys.executable, [sys.executable, '-c', {daemon_code!r}, {marker!r}])\n"
               f"    os._exit(0)\n"
               f"def daemon_alive():\n"
               f"    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
               f"        try:\n"
               f"            if {marker!r}.encode() in open(f'/proc/{{pid}}/cmdline', 'rb').read():\n"
               f"                return True\n"
               f"        except OSError:\n"
               f"            pass\n"
               f"while not daemon_alive():\n"
               f"    time.sleep(0.05)\n"
               f"print('daemon started', flush=True)\n"
               + ("time.sleep(600)\n" if parent != "exits" else ""))
    result = sandbox.execute(program, timeout_s=5.0)
    try:
        assert result.status == ("ok" if parent == "exits" else "timeout"), result.stderr
        assert result.stdout == "daemon started\n"
        deadline = time.monotonic() + 10   # a hang guard, not a bound: death is immediate
        while _processes_mentioning(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_mentioning(marker) == []
    finally:
        for pid in _processes_mentioning(marker):
            os.kill(pid, 9)


def _process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# --- the start-up check -----------------------------------------------------------------


def test_bubblewrap_is_used_wherever_it_is_installed():
    """CI installs bubblewrap: strong isolation must work from any checkout location, or the
    containment tests above would not run."""
    if shutil.which("bwrap") is None and not os.environ.get("CI"):
        pytest.skip("bubblewrap is not installed")
    assert sandbox.require_strong_isolation(allow_weak=False) == "bwrap", sandbox._probe_failures


@weak_modes_on_purpose
def test_missing_bubblewrap_is_refused_with_instructions(monkeypatch, tmp_path, fresh_probes):
    monkeypatch.setenv("PATH", str(tmp_path))   # no bwrap, no unshare
    with pytest.raises(sandbox.SandboxUnavailable) as refusal:
        sandbox.require_strong_isolation(allow_weak=False)
    message = str(refusal.value)
    for needed in ("bubblewrap (bwrap) is not installed", "bash scripts/setup.sh",
                   "apt-get install bubblewrap", "env.allow_weak_sandbox"):
        assert needed in message
    assert sandbox.require_strong_isolation(allow_weak=True) == "none"
    assert sandbox.execute("print(2 + 2)").stdout == "4\n"   # the weak mode still runs programs


def test_opting_in_to_a_weak_sandbox_warns(monkeypatch, tmp_path, fresh_probes):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.warns(RuntimeWarning, match="UNTRUSTED CODE SANDBOX IS WEAK"):
        assert sandbox.require_strong_isolation(allow_weak=True) == "none"


@weak_modes_on_purpose
def test_broken_bubblewrap_is_refused_with_its_error(monkeypatch, tmp_path, fresh_probes):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(sandbox.SandboxUnavailable,
                       match="bubblewrap is installed but failed .*No permissions to create new namespace"):
        sandbox.require_strong_isolation(allow_weak=False)


@weak_modes_on_purpose
def test_forcing_a_weak_mode_is_refused(monkeypatch):
    monkeypatch.setenv(sandbox.ISOLATION_ENV_VAR, "none")
    with pytest.raises(sandbox.SandboxUnavailable, match="forced"):
        sandbox.require_strong_isolation(allow_weak=False)
