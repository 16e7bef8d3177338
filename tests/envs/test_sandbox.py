"""The sandbox contains hostile programs, with the right status, and leaves the machine as it was.

Everything runs for real; hostile cases that only a namespace can contain skip on a
machine whose isolation lacks that namespace (and say so).
"""

import os
import socket
import time
import uuid

import pytest

from rlanything_jax.envs import function_tests, sandbox

pytestmark = pytest.mark.filterwarnings("ignore:UNTRUSTED CODE SANDBOX IS WEAK:RuntimeWarning")


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


def _needs_bwrap():
    if sandbox.isolation() != "bwrap":
        pytest.skip(f"isolation here is {sandbox.isolation()!r}; this containment needs bubblewrap")


@pytest.fixture(params=sandbox.ISOLATIONS)
def any_isolation(request):
    if request.param not in sandbox.available_isolations():
        pytest.skip(f"isolation {request.param!r} does not work on this machine")
    return request.param


# --- ordinary programs ------------------------------------------------------------------


def test_trivial_run_is_fast_and_reads_stdin():
    sandbox.execute("print(1)")   # warm-up: the first call probes the isolation modes
    result = sandbox.execute("print(input()[::-1])", "hello\n")
    assert result == sandbox.ExecResult("ok", "olleh\n", "", result.wall_s)
    assert result.wall_s < 0.5


def test_statuses_of_failing_programs(any_isolation):
    def status(program):
        return sandbox.execute(program, timeout_s=2.0, isolation=any_isolation).status
    assert status("import sys; sys.exit(3)") == "error"
    assert status("raise ValueError('boom')") == "error"
    assert status("def broken(:") == "error"
    assert status("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == "killed"
    assert status("x = bytearray(10 * 2**30)") == "memory"
    assert status("while True: pass") == "timeout"
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


def test_execute_many_keeps_order_and_overlaps_runs():
    jobs = [("import time; time.sleep(0.4); print(input())", f"{i}\n") for i in range(6)]
    start = time.monotonic()
    results = sandbox.execute_many(jobs, max_workers=3)
    elapsed = time.monotonic() - start
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
    assert elapsed < 6 * 0.4   # sequential would take at least 2.4 s
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
    result = sandbox.execute(program, timeout_s=1.0)
    assert result.status == "timeout"
    assert result.wall_s < 3.0


def test_fork_bomb_is_contained_and_leaves_no_process(tmp_path):
    if not sandbox.process_limit_enforced():
        pytest.skip("root without a droppable uid: RLIMIT_NPROC would not bind")
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
    assert sandbox.execute("blocks = []\nwhile True:\n    blocks.append(b'x' * 2**26)").status == "memory"


def test_one_gigabyte_file_write_is_contained(tmp_path):
    host_tmp_target = f"/tmp/rla-big-{uuid.uuid4().hex}.bin"
    program = (f"import os\nchunk = b'0' * 2**20\n"
               f"for target in ('big.bin', {host_tmp_target!r}):\n"
               f"    with open(target, 'wb') as f:\n"
               f"        for _ in range(1024):\n"
               f"            f.write(chunk)\n")
    result = sandbox.execute(program, scratch_root=str(tmp_path))
    try:
        assert result.status in ("error", "killed")
        assert "File too large" in result.stderr or "No space left" in result.stderr
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
    if sandbox.isolation() == "none":
        pytest.skip("isolation 'none' has no network namespace")
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
    _needs_bwrap()
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
    if os.geteuid() != 0 or not sandbox.process_limit_enforced():
        pytest.skip("only meaningful when the tests run as root with a droppable uid")
    result = sandbox.execute("import os\nprint(os.getuid())")
    assert result.status == "ok" and int(result.stdout) != 0


@pytest.mark.skipif(__import__("shutil").which("bwrap") is None, reason="bubblewrap is not installed")
def test_bubblewrap_is_used_wherever_it_is_installed():
    """CI installs bubblewrap: the strong isolation must work from any checkout location, or the
    containment tests above would quietly skip."""
    assert sandbox.isolation() == "bwrap", sandbox.available_isolations()
