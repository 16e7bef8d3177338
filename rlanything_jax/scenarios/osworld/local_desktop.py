"""A local desktop provider: one isolated desktop session per environment slot (OSWORLD.md §4).

A session is one bubblewrap sandbox with its own user, mount, pid, network, ipc and uts
namespaces. Inside: the system's /usr (read-only), a whitelist of /etc, a private tmpfs /tmp,
/var, /run and /home with `/home/user/{Desktop,Documents,Downloads}`, Xvfb on :0, dbus,
openbox, and the project's server (`desktop_server`) on a Unix socket in the slot's host
directory, the session's only way out. It has no network at all (not even the host's loopback)
and sees no host home, no host /tmp and no repository. Its user is uid 1000 inside; outside
it is an unprivileged per-slot uid when we are root, so nothing in it can read root's files.

Reset kills the session and starts a fresh one (the VM's snapshot revert). X's lock files live
in the session's private /tmp, so none outlive it. Sessions end on every exit path: `close()`,
interpreter exit (atexit), and, when the process that started them dies (even by SIGKILL),
bubblewrap's --die-with-parent. Each slot is claimed with an flock that the kernel drops with
the process, so a slot directory whose lock is free is stale and is cleaned at the next start.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
import weakref
from pathlib import Path

from rlanything_jax.scenarios.osworld import session_files
from rlanything_jax.scenarios.osworld.client import OsWorldClient, VmUnavailable
from rlanything_jax.scenarios.osworld.endpoint import VmEndpoint, claim_first_free

DEFAULT_RUNTIME_ROOT = "/tmp/rla-desktops"
OUTSIDE_UID_BASE = 59000   # per-slot unprivileged host uids when we are root (the sandbox uses 60000+)
MAX_SLOTS = 1000
REQUIRED_PROGRAMS = ("bwrap", "prlimit", "setpriv", "Xvfb", "openbox", "xdotool", "wmctrl", "dbus-launch", "xterm",
                     "python3")
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# what of the host's /etc the desktop programs read; everything else of /etc is not there
_ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "fonts", "X11", "xdg",
                "alternatives", "bash.bashrc", "profile", "profile.d", "inputrc", "nsswitch.conf", "mime.types",
                "mailcap", "dbus-1", "terminfo", "magic", "magic.mime", "vim", "python3", "python3.11", "shells",
                "environment", "login.defs", "gtk-3.0", "pulse",
                # the desktop applications (`bash scripts/setup.sh --desktop-apps`): their system configuration
                "libreoffice", "gimp", "thunderbird", "chromium", "chromium.d", "vlc", "ssl", "ca-certificates",
                "gtk-2.0", "sound", "papersize")


CHROMIUM_DIR = "/usr/lib/chromium"


def _chrome_binds() -> list[str]:
    """Debian's Chromium at Google Chrome's place, its binary named `chrome` (tasks `pkill chrome`; the
    session's `google-chrome` runs it)."""
    if not os.path.isfile(f"{CHROMIUM_DIR}/chromium"):
        return []
    chrome_dir = session_files.CHROME_DIR
    binds = []
    for entry in sorted(os.listdir(CHROMIUM_DIR)):
        binds += ["--ro-bind", f"{CHROMIUM_DIR}/{entry}", f"{chrome_dir}/{entry}"]
    return binds + ["--ro-bind", f"{CHROMIUM_DIR}/chromium", f"{chrome_dir}/chrome"]


class DesktopUnavailable(RuntimeError):
    """A session could not be started (missing packages, or it died while starting)."""


@dataclasses.dataclass(frozen=True)
class DesktopOptions:
    width: int = 1920
    height: int = 1080
    depth: int = 24
    runtime_root: str = DEFAULT_RUNTIME_ROOT   # host directory of the slots' sockets, files and logs
    start_timeout_s: float = 30.0
    sudo_password: str = "password"            # OSWorld's {CLIENT_PASSWORD}
    # the session's private file systems live in memory: caps, so an agent cannot exhaust the host's
    home_mb: int = 1024
    tmp_mb: int = 512
    max_processes: int = 1024                  # RLIMIT_NPROC of the session's (unprivileged) host uid


def missing_programs() -> list[str]:
    """The programs a session needs that are not installed (`bash scripts/setup.sh` installs them)."""
    return [name for name in REQUIRED_PROGRAMS if shutil.which(name) is None]


def _process_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (so that a recycled pid is never mistaken for a session)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _kill_recorded_session(slot_dir: Path) -> None:
    try:
        record = json.loads((slot_dir / "session.json").read_text())
    except (OSError, ValueError):
        return
    pid = record.get("pid")
    if isinstance(pid, int) and _process_start_time(pid) == record.get("start_time"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)   # bwrap's --die-with-parent takes the session down with it


def clean_stale_slots(runtime_root: str = DEFAULT_RUNTIME_ROOT) -> list[int]:
    """Kills and removes every slot whose owner is gone (its lock is free); returns their numbers."""
    root = Path(runtime_root)
    cleaned = []
    for lock_path in sorted(root.glob("slot-*.lock")) if root.is_dir() else []:
        slot = int(lock_path.stem.split("-")[1])
        with open(lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue   # a live session's
            slot_dir = root / f"slot-{slot}"
            if slot_dir.exists():
                _kill_recorded_session(slot_dir)
                shutil.rmtree(slot_dir, ignore_errors=True)
                cleaned.append(slot)
    return cleaned


_LIVE: weakref.WeakSet[LocalDesktop] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for desktop in list(_LIVE):
        desktop.close()


class LocalDesktop:
    """One slot's desktop session.

        with LocalDesktop() as desktop:      # claims the first free slot and starts the session
            png = desktop.client.screenshot()
            desktop.reset()                  # a fresh session in the same slot

    Start sessions from a long-lived thread: the kernel's parent-death signal that ends a session
    with its owner fires when the *thread* that started it exits.
    """

    def __init__(self, options: DesktopOptions = DesktopOptions(), slot: int | None = None, start: bool = True):
        missing = missing_programs()
        if missing:
            raise DesktopUnavailable(f"a local desktop needs {', '.join(missing)}: install the project's Debian "
                                     "packages with `bash scripts/setup.sh`")
        self.options = options
        self.root = Path(options.runtime_root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        clean_stale_slots(str(self.root))
        self.slot, self._lock = self._claim(slot)
        self.slot_dir = self.root / f"slot-{self.slot}"
        self._process: subprocess.Popen | None = None
        self.start_seconds: float | None = None
        _LIVE.add(self)
        if start:
            try:
                self.start()
            except BaseException:
                self.close()   # frees the slot now, not when the object is collected
                raise

    # -- slots

    def _claim(self, wanted: int | None):
        slots = [wanted] if wanted is not None else list(range(MAX_SLOTS))
        claimed = claim_first_free([self.root / f"slot-{slot}.lock" for slot in slots])
        if claimed is not None:
            index, lock = claimed
            return slots[index], lock
        raise DesktopUnavailable(f"desktop slot {wanted} is in use" if wanted is not None
                                 else f"all {MAX_SLOTS} desktop slots are in use")

    @property
    def endpoint(self) -> VmEndpoint:
        return VmEndpoint(unix_socket=str(self.slot_dir / "run" / session_files.SOCKET_NAME))

    @property
    def client(self) -> OsWorldClient:
        return OsWorldClient(self.endpoint, retries=1)

    @property
    def outside_uid(self) -> int:
        return OUTSIDE_UID_BASE + self.slot if os.geteuid() == 0 else os.geteuid()

    # -- lifecycle

    def start(self) -> None:
        if self._lock is None:
            raise DesktopUnavailable("this desktop is closed")
        self.stop()
        started = time.monotonic()
        opts = self.options
        shutil.rmtree(self.slot_dir, ignore_errors=True)
        files = session_files.write_session_files(self.slot_dir / "files", opts.width, opts.height, opts.depth,
                                                  opts.sudo_password)
        run_dir = self.slot_dir / "run"
        run_dir.mkdir(parents=True)
        os.chown(run_dir, self.outside_uid, self.outside_uid)
        self.slot_dir.chmod(0o755)
        log = open(self.slot_dir / "session.log", "wb")
        with log:
            self._process = subprocess.Popen(self._command(files, run_dir), stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=log, env=session_files.session_env(opts.width, opts.height),
                                             close_fds=True)
        (self.slot_dir / "session.json").write_text(json.dumps(
            {"pid": self._process.pid, "start_time": _process_start_time(self._process.pid)}))
        self._wait_ready(started + opts.start_timeout_s)
        self.start_seconds = time.monotonic() - started

    @staticmethod
    def _tmpfs(path: str, size_mb: int) -> list[str]:
        return ["--size", str(size_mb << 20), "--tmpfs", path]

    def _command(self, files: Path, run_dir: Path) -> list[str]:
        nproc = str(self.options.max_processes)
        args = [shutil.which("prlimit"), f"--nproc={nproc}:{nproc}", "--core=0:0", "--"]
        if os.geteuid() == 0:   # run the sandbox as an unprivileged host uid (so the process limit binds)
            uid = str(self.outside_uid)
            args += [shutil.which("setpriv"), f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        args += [shutil.which("bwrap"), "--unshare-user", "--uid", str(session_files.SESSION_UID),
                 "--gid", str(session_files.SESSION_UID), "--unshare-pid", "--unshare-net", "--unshare-ipc",
                 "--unshare-uts", "--unshare-cgroup-try", "--hostname", "rla-desktop",
                 "--die-with-parent", "--new-session"]
        for path in _SYSTEM_TREES:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        opts = self.options
        args += ["--dev", "/dev", "--proc", "/proc", *self._tmpfs("/tmp", opts.tmp_mb), *self._tmpfs("/var", 64),
                 *self._tmpfs("/run", 16), "--dir", "/var/tmp", *self._tmpfs("/home", opts.home_mb),
                 *self._tmpfs("/etc", 16)]
        for entry in _ETC_ENTRIES:
            args += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
        for name in ("passwd", "group", "hosts", "hostname", "machine-id"):
            args += ["--ro-bind", str(files / "etc" / name), f"/etc/{name}"]
        home = session_files.SESSION_HOME
        args += ["--dir", home, "--dir", f"{home}/Desktop", "--dir", f"{home}/Documents", "--dir", f"{home}/Downloads",
                 *_chrome_binds(), "--ro-bind", str(files), session_files.INSIDE_DIR,
                 "--bind", str(run_dir), session_files.INSIDE_RUN_DIR,
                 "--chdir", home, "/bin/sh", f"{session_files.INSIDE_DIR}/start-session"]
        return args

    def _wait_ready(self, deadline: float) -> None:
        socket_path = Path(self.endpoint.unix_socket)
        client = OsWorldClient(self.endpoint, retries=1, screenshot_timeout_s=5.0)
        while True:
            if self._process.poll() is not None:
                raise DesktopUnavailable(f"desktop slot {self.slot} exited while starting "
                                         f"(status {self._process.returncode}): {self.log_tail()}")
            if socket_path.exists():
                try:
                    client.screenshot()
                    return
                except VmUnavailable:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise DesktopUnavailable(f"desktop slot {self.slot} not ready in {self.options.start_timeout_s} s: "
                                         f"{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (self.slot_dir / "session.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Kills the session (every process in it dies with its pid namespace)."""
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
        with contextlib.suppress(OSError):
            (self.slot_dir / "session.json").unlink()

    def reset(self) -> float:
        """A fresh session in this slot; returns the seconds it took."""
        started = time.monotonic()
        self.start()
        return time.monotonic() - started

    def close(self) -> None:
        """Ends the session and frees the slot."""
        self.stop()
        if self._lock is not None:
            shutil.rmtree(self.slot_dir, ignore_errors=True)
            self._lock.close()   # the lock file stays: unlinking it would race with another claimant
            self._lock = None
        _LIVE.discard(self)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> LocalDesktop:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
