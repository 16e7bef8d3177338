"""Local desktop sessions for real: Xvfb, openbox, the terminal on Ctrl+Alt+T, the project's server,
pyautogui actions through /execute, and the isolation a session promises."""

import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlanything_jax.scenarios.osworld.client import VmUnavailable
from rlanything_jax.scenarios.osworld.local_desktop import (
    DesktopOptions,
    DesktopUnavailable,
    LocalDesktop,
    clean_stale_slots,
)
from tests.scenarios.osworld.conftest import open_terminal, require_desktop_packages

REPO = Path(__file__).resolve().parents[3]


def _png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])


def _processes_of_uid(uid: int) -> list[int]:
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) == uid:
            pids.append(int(status.parent.name))
    return pids


def _shell(desktop, command: str) -> dict:
    return desktop.client.execute(command, shell=True)


def test_session_looks_like_an_osworld_vm(desktop):
    png = desktop.client.screenshot()
    assert _png_size(png) == (1920, 1080)
    assert desktop.client.screen_size() == (1920, 1080)
    result = _shell(desktop, "id -un; echo $HOME; ls ~; pwd")
    assert result["output"].split() == ["user", "/home/user", "Desktop", "Documents", "Downloads", "/home/user"]
    assert _shell(desktop, "echo password | sudo -S mkdir ~/Desktop/made && ls ~/Desktop")["output"] == "made\n"
    denied = _shell(desktop, "echo wrong | sudo -S true")
    assert denied["returncode"] == 1 and "Sorry" in denied["error"]
    assert desktop.client.execute_pyautogui("print(pyautogui.size())")["output"] == "(1920, 1080)\n"


def test_ctrl_alt_t_opens_a_terminal_where_typing_writes_a_file(desktop):
    client = desktop.client
    open_terminal(client)
    result = client.execute_pyautogui(
        "pyautogui.typewrite('echo typed by pyautogui > ~/Documents/typed.txt\\n'); time.sleep(0.5)")
    assert result["returncode"] == 0, result
    assert client.get_file("/home/user/Documents/typed.txt") == b"typed by pyautogui\n"
    assert client.get_file("~/Documents/typed.txt") == b"typed by pyautogui\n"
    assert "Terminal" in _shell(desktop, "wmctrl -l")["output"]
    assert "echo typed by pyautogui" in client.terminal_output()
    tree = client.list_directory("~/Documents")
    assert tree == {"type": "directory", "name": "Documents", "children": [{"type": "file", "name": "typed.txt"}]}
    assert client.activate_window("Terminal", strict=True)
    assert client.close_window("Terminal", strict=True)
    deadline = time.monotonic() + 5
    while "Terminal" in _shell(desktop, "wmctrl -l")["output"]:
        assert time.monotonic() < deadline, "the terminal did not close"
        time.sleep(0.1)
    assert not client.activate_window("Terminal", strict=True)


def test_pyautogui_moves_clicks_and_reports_the_pointer(desktop):
    started = time.monotonic()
    code = ("pyautogui.moveTo(100, 200); print(pyautogui.position()); pyautogui.click(100, 200); "
            "pyautogui.doubleClick(960, 540); pyautogui.click(960, 540, button='right'); pyautogui.press('esc'); "
            "pyautogui.scroll(-3); pyautogui.moveRel(10, 5); print(pyautogui.position()); "
            "print(pyautogui.onScreen(1919, 1079), pyautogui.onScreen(1920, 0))")
    result = desktop.client.execute_pyautogui(code)
    assert result["output"].splitlines() == ["(100, 200)", "(970, 545)", "True False"], result
    assert time.monotonic() - started < 5   # a click where the pointer already is must not wait


def test_setup_routes_upload_launch_and_open(desktop):
    client = desktop.client
    assert client.upload_file("/home/user/Desktop/notes.txt", b"first line\n")
    assert client.get_file("~/Desktop/notes.txt") == b"first line\n"
    assert client.launch("sh -c 'sleep 0.2; echo launched > ~/Desktop/launched.txt'", shell=True)
    deadline = time.monotonic() + 5
    while client.get_file("~/Desktop/launched.txt") is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert client.open_file("/home/user/Desktop/notes.txt")   # returns once a window names the file
    assert "notes.txt" in client.execute(["wmctrl", "-l"])["output"]
    assert not client.open_file("/home/user/Desktop/absent.txt")
    assert client.execute(["mkdir", "-p", "/home/user/Documents/Fundings/grf"])["returncode"] == 0
    assert client.open_file("/home/user/Documents/Fundings/grf")   # a directory: a terminal titled with its name
    assert "grf" in client.execute(["wmctrl", "-l"])["output"]


def test_session_sees_no_network_no_host_files_and_cannot_write_out(desktop, tmp_path):
    marker = Path("/tmp") / f"rla-host-marker-{os.getpid()}"
    marker.write_text("host")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        probe = textwrap.dedent(f"""
            import os, socket
            s = socket.socket(); s.settimeout(2)
            print("loopback", s.connect_ex(("127.0.0.1", {port})) != 0)
            for path in ({str(marker)!r}, "/root", "/work", {str(REPO)!r}, {sys.prefix!r}, "/etc/shadow"):
                print(path, os.path.exists(path))
            print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:3])
        """)
        output = desktop.client.execute(["python3", "-c", probe])["output"].splitlines()
    finally:
        listener.close()
        marker.unlink()
    assert output[0] == "loopback True"
    assert all(line.endswith(" False") for line in output[1:7]), output
    assert output[7].startswith("pids [1, 2,")   # its own pid namespace: bwrap is 1, the session's start is 2
    escape = f"rla-escape-{os.getpid()}"
    writes = _shell(desktop, f"echo x > /tmp/{escape}; echo $?; echo x > /usr/{escape} 2>/dev/null; echo $?; "
                             f"echo x > /etc/{escape} 2>/dev/null; echo $?; touch /{escape} 2>/dev/null; echo $?")
    assert writes["output"].split()[0] == "0"            # its private /tmp
    assert not (Path("/tmp") / escape).exists()
    assert writes["output"].split()[1:] != ["0", "0", "0"]
    for where in ("/usr", "/etc", "/"):
        assert not (Path(where) / escape).exists()
    assert desktop.outside_uid != 0 or os.geteuid() != 0   # as root, the session runs as an unprivileged uid


@pytest.mark.slow
def test_reset_gives_a_fresh_home_and_a_killed_session_ends_only_its_own_episode(desktop_root):
    require_desktop_packages()
    options = DesktopOptions(runtime_root=desktop_root)
    with LocalDesktop(options) as first, LocalDesktop(options) as second:
        assert first.slot != second.slot
        assert first.client.upload_file("~/Desktop/keep.txt", b"x")
        seconds = first.reset()
        assert seconds < 15
        assert first.client.get_file("~/Desktop/keep.txt") is None
        os.kill(first._process.pid, signal.SIGKILL)      # the VM dies mid-episode
        first._process.wait()
        with pytest.raises(VmUnavailable):
            first.client.screenshot()
        assert second.client.execute(["true"])["returncode"] == 0
        first.reset()
        assert first.client.execute(["true"])["returncode"] == 0


@pytest.mark.slow
def test_sigkill_of_the_run_takes_its_sessions_down_and_the_next_start_cleans_up(desktop_root):
    require_desktop_packages()
    program = textwrap.dedent(f"""
        from rlanything_jax.scenarios.osworld.local_desktop import DesktopOptions, LocalDesktop
        desktop = LocalDesktop(DesktopOptions(runtime_root={desktop_root!r}), slot=7)
        print(desktop.outside_uid, flush=True)
        import time; time.sleep(600)
    """)
    run = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    outside_uid = int(run.stdout.readline())
    slot_dir = Path(desktop_root) / "slot-7"
    assert (slot_dir / "session.json").exists()
    if os.geteuid() == 0:
        assert _processes_of_uid(outside_uid)
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 10
    while os.geteuid() == 0 and _processes_of_uid(outside_uid):
        assert time.monotonic() < deadline, "the session outlived the run that started it"
        time.sleep(0.1)
    assert slot_dir.exists()                  # stale until the next start
    assert clean_stale_slots(desktop_root) == [7]
    assert not slot_dir.exists()


@pytest.mark.slow
def test_four_sessions_run_side_by_side(desktop_root):
    require_desktop_packages()
    options = DesktopOptions(runtime_root=desktop_root)
    desktops = []
    try:   # started from this thread: a session dies with the thread that started it (--die-with-parent)
        for _ in range(4):
            desktops.append(LocalDesktop(options))
        for index, desktop in enumerate(desktops):
            assert desktop.client.upload_file("~/Desktop/who.txt", str(index).encode())
        assert [d.client.get_file("~/Desktop/who.txt") for d in desktops] == [b"0", b"1", b"2", b"3"]
        assert all(_png_size(d.client.screenshot()) == (1920, 1080) for d in desktops)
    finally:
        for desktop in desktops:
            desktop.close()


def test_the_sessions_memory_file_systems_are_capped(desktop_root):
    require_desktop_packages()
    with LocalDesktop(DesktopOptions(runtime_root=desktop_root, home_mb=8, tmp_mb=8)) as small:
        for where in ("~", "/tmp"):
            result = small.client.execute(f"head -c 20000000 /dev/zero > {where}/big", shell=True)
            assert result["returncode"] != 0 and "No space left" in result["error"], result
        probe = "import resource; print(resource.getrlimit(resource.RLIMIT_NPROC))"
        limit = small.client.execute(["python3", "-c", probe])
        assert limit["output"] == "(1024, 1024)\n"


def test_a_session_that_cannot_start_says_why_and_frees_its_slot(desktop_root):
    require_desktop_packages()
    with pytest.raises(DesktopUnavailable, match="Xvfb did not start"):
        LocalDesktop(DesktopOptions(runtime_root=desktop_root, depth=7), slot=40)   # no such visual depth
    assert clean_stale_slots(desktop_root) == []
    LocalDesktop(DesktopOptions(runtime_root=desktop_root), slot=40, start=False).close()   # the slot is free
