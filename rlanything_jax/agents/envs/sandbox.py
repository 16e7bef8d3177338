"""Run untrusted Python programs (policy samples, generated tests) in a contained child process.

Every run is one fresh process, started by a tiny launcher (`_LAUNCHER`) that sets
resource limits (CPU time, address space, file size, process count), maps
`MemoryError` to its own exit code, and, when we are root, drops to a per-run
unprivileged uid so that the process-count limit applies at all (the kernel exempts
root from RLIMIT_NPROC). Around the launcher, the best isolation available:

- "bwrap":   bubblewrap; only the interpreter's trees visible (read-only), private /tmp and
             scratch (size-limited tmpfs), no network, own pid namespace (so every
             descendant dies with the run); see `envs.sandbox_mounts`.
- "unshare": `unshare --net` only: no network, the host's files readable, scratch on its disk.
- "none":    resource limits only (loud one-time warning).

Runs that execute untrusted code call `require_strong_isolation` at start-up: it refuses the
weak modes unless the configuration opts in (`env.allow_weak_sandbox`).

The child gets a clean environment (nothing inherited from ours), stdin/stdout/stderr
are files (so no pipe pumping, and RLIMIT_FSIZE caps the output too), and a wall-clock
timeout kills the whole process group. Function-style `check` tests (a coding scenario's) run through
`scenarios.coding.function_tests`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import logging
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence

from rlanything_jax.agents.envs.sandbox_mounts import bwrap_prefix, site_dirs

log = logging.getLogger(__name__)

STATUSES = ("ok", "error", "timeout", "memory", "killed")
ISOLATIONS = ("bwrap", "unshare", "none")
ISOLATION_ENV_VAR = "RLA_SANDBOX_ISOLATION"   # forces a mode for the whole process

MEMORY_EXIT_CODE = 87          # the launcher's exit code for an uncaught MemoryError
_SANDBOX_UID_BASE, _SANDBOX_UID_SPAN = 60000, 5000   # per-run uids when we are root
_STDERR_READ_BYTES = 1 << 20
_CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_PROBE_PROGRAM = "import bisect, collections, fractions, heapq, json\nprint('ok')\n"

# Runs as `python -I -S -B -c _LAUNCHER PROGRAM CPU_S AS_BYTES FSIZE NPROC UID SITE_DIRS`.
# -S keeps startup near 10 ms; site-packages are appended to sys.path without .pth hooks.
_LAUNCHER = r"""
import os, resource, sys
path, cpu_s, as_bytes, fsize, nproc, uid = sys.argv[1], *map(int, sys.argv[2:7])
sys.path.extend(p for p in sys.argv[7].split(os.pathsep) if p)
with open(path, encoding="utf-8", errors="replace") as f:
    code = compile(f.read(), path, "exec")
if uid >= 0:   # root: become an unprivileged per-run user, who owns the scratch dir
    os.chown(".", uid, uid)
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
def limit(kind, soft, hard):
    old_hard = resource.getrlimit(kind)[1]
    cap = (lambda v: v) if old_hard == resource.RLIM_INFINITY else (lambda v: min(v, old_hard))
    resource.setrlimit(kind, (cap(soft), cap(hard)))
limit(resource.RLIMIT_CORE, 0, 0)
limit(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)
limit(resource.RLIMIT_AS, as_bytes, as_bytes)
limit(resource.RLIMIT_FSIZE, fsize, fsize)
limit(resource.RLIMIT_NPROC, nproc, nproc)
sys.argv = [path]
namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
del f, path, cpu_s, as_bytes, fsize, nproc, uid, limit
try:
    exec(code, namespace)
except MemoryError:
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    os.write(2, b"MemoryError\n")
    os._exit(MEMORY_EXIT_CODE)
""".replace("MEMORY_EXIT_CODE", str(MEMORY_EXIT_CODE))


@dataclasses.dataclass(frozen=True)
class ExecResult:
    status: str        # one of STATUSES
    stdout: str
    stderr: str
    wall_s: float


@dataclasses.dataclass(frozen=True)
class Limits:
    timeout_s: float = 4.0
    memory_mb: int = 1024
    max_output_bytes: int = 32 << 20   # RLIMIT_FSIZE: stdout, stderr and every file written
    max_processes: int = 32            # threads count too
    scratch_mb: int = 64               # size of each private tmpfs (bwrap only)


@dataclasses.dataclass(frozen=True)
class _Config:
    isolation: str
    drop_privileges: bool
    tool: str = ""    # absolute path of bwrap or unshare, as the probe found it on our PATH


def outputs_match(expected: str, actual: str) -> bool:
    """The reference's comparison: equal after collapsing all whitespace."""
    return " ".join(expected.split()) == " ".join(actual.split())


def execute(program: str, stdin: str = "", timeout_s: float = 4.0, *, memory_mb: int = 1024,
            max_output_bytes: int = 32 << 20, max_processes: int = 32, scratch_mb: int = 64,
            isolation: str | None = None, scratch_root: str | None = None) -> ExecResult:
    """Run `program` (Python source) with `stdin`; never raises for anything the program does."""
    limits = Limits(timeout_s, memory_mb, max_output_bytes, max_processes, scratch_mb)
    config = _resolve_config(isolation)
    return _run(program, stdin, limits, config, scratch_root)


def execute_many(jobs: Sequence[tuple[str, str]], max_workers: int | None = None,
                 **execute_kwargs) -> list[ExecResult]:
    """`execute(program, stdin, **execute_kwargs)` for each job, in order; threads suffice
    because every run is its own process."""
    if not jobs:
        return []
    workers = max(1, min(len(jobs), max_workers or usable_cpus()))
    if workers == 1:
        return [execute(p, s, **execute_kwargs) for p, s in jobs]
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda job: execute(job[0], job[1], **execute_kwargs), jobs))


def usable_cpus() -> int:
    """CPUs this process may run on (a container's affinity, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --- isolation selection ----------------------------------------------------------------

_forced_isolation: str | None = None
_config_lock = threading.Lock()
_probed: dict[str, _Config | None] = {}
_probe_failures: dict[str, str] = {}
_warned: set[_Config] = set()


def set_isolation(mode: str | None) -> None:
    """Force an isolation mode for this process (None: back to automatic selection)."""
    global _forced_isolation
    if mode is not None and mode not in ISOLATIONS:
        raise ValueError(f"unknown isolation {mode!r}; choose from {ISOLATIONS}")
    _forced_isolation = mode


def isolation() -> str:
    """The isolation mode `execute` uses by default."""
    return _resolve_config(None).isolation


def available_isolations() -> list[str]:
    """Every mode that works on this machine, strongest first."""
    return [mode for mode in ISOLATIONS if _usable_config(mode) is not None]


class SandboxUnavailable(RuntimeError):
    """Strong isolation is required but this machine cannot provide it."""


def require_strong_isolation(allow_weak: bool) -> str:
    """The isolation mode `execute` will use, after checking that it contains hostile programs:
    bubblewrap, and (as root) a dropped uid so the process-count limit binds. Raises
    SandboxUnavailable saying how to fix it, unless `allow_weak` (then it warns loudly)."""
    config = _resolve_config(None)
    problems = _weaknesses(config)
    if problems and not allow_weak:
        raise SandboxUnavailable(
            "refusing to run untrusted code in a weak sandbox: " + "; ".join(problems) + ". "
            "Install bubblewrap with `bash scripts/setup.sh` (or `sudo apt-get install bubblewrap`), "
            "or accept the weak sandbox explicitly with --config.env.allow_weak_sandbox=True.")
    return config.isolation


def process_limit_enforced(mode: str | None = None) -> bool:
    """Whether RLIMIT_NPROC binds in `mode`: the kernel exempts root, so as root only runs
    that drop to a per-run uid are protected from fork bombs."""
    return os.geteuid() != 0 or _resolve_config(mode).drop_privileges


def _resolve_config(requested: str | None) -> _Config:
    mode = requested or _forced_isolation or os.environ.get(ISOLATION_ENV_VAR) or None
    if mode is not None:
        if mode not in ISOLATIONS:
            raise ValueError(f"unknown isolation {mode!r}; choose from {ISOLATIONS}")
        config = _usable_config(mode)
        if config is None:
            raise RuntimeError(f"sandbox isolation {mode!r} does not work on this machine")
    else:   # "none" always works: it is the plain interpreter
        config = next(c for c in map(_usable_config, ISOLATIONS) if c is not None)
    _warn_if_weak(config)
    return config


def _usable_config(mode: str) -> _Config | None:
    with _config_lock:
        if mode not in _probed:
            _probed[mode] = _probe(mode)
        return _probed[mode]


def _probe(mode: str) -> _Config | None:
    """Run a tiny program under `mode` (with a dropped uid first, when root)."""
    tool = "" if mode == "none" else shutil.which(mode)
    if tool is None:
        return None
    for drop in ([True, False] if os.geteuid() == 0 else [False]):
        config = _Config(mode, drop, os.path.abspath(tool))
        try:
            result = _run(_PROBE_PROGRAM, "", Limits(timeout_s=20.0), config, None)
        except OSError as error:   # the tool exists but cannot be executed
            result = ExecResult("error", "", str(error), 0.0)
        if result.status == "ok" and result.stdout.strip() == "ok":
            return config
        _probe_failures[mode] = f"{result.status}: {result.stderr.strip()[-300:]}"
        log.info("sandbox probe %s failed: %s", config, _probe_failures[mode])
    return None


def _weaknesses(config: _Config) -> list[str]:
    """What `config` fails to contain, and why the strong mode is not in use."""
    problems = []
    if config.isolation != "bwrap":
        problems.append(f"isolation is {config.isolation!r}: the host's files are readable"
                        + ("" if config.isolation == "unshare" else " and the network is reachable"))
        if _forced_isolation or os.environ.get(ISOLATION_ENV_VAR):
            problems.append(f"it was forced (set_isolation or ${ISOLATION_ENV_VAR})")
        elif "bwrap" in _probe_failures:
            problems.append(f"bubblewrap is installed but failed ({_probe_failures['bwrap']})")
        elif shutil.which("bwrap") is None:
            problems.append("bubblewrap (bwrap) is not installed")
    if os.geteuid() == 0 and not config.drop_privileges:
        problems.append("runs as root without a dropped uid, so the process-count limit is not enforced")
    return problems


def _warn_if_weak(config: _Config) -> None:
    problems = _weaknesses(config)
    if problems and config not in _warned:
        _warned.add(config)
        message = "UNTRUSTED CODE SANDBOX IS WEAK: " + "; ".join(problems)
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


# --- one run ----------------------------------------------------------------------------

_uid_counter = itertools.count()


def _run(program: str, stdin: str, limits: Limits, config: _Config, scratch_root: str | None) -> ExecResult:
    start = time.monotonic()
    run_dir = tempfile.mkdtemp(prefix="rla-sandbox-", dir=scratch_root)
    try:
        files = {name: os.path.join(run_dir, name) for name in ("program.py", "stdin", "stdout", "stderr")}
        _write_text(files["program.py"], program)
        _write_text(files["stdin"], stdin)
        uid = _SANDBOX_UID_BASE + next(_uid_counter) % _SANDBOX_UID_SPAN if config.drop_privileges else -1
        command, cwd = _command(config, run_dir, files["program.py"], limits, uid)
        with open(files["stdin"], "rb") as fin, open(files["stdout"], "wb") as fout, \
                open(files["stderr"], "wb") as ferr:
            proc = subprocess.Popen(command, stdin=fin, stdout=fout, stderr=ferr, cwd=cwd,
                                    env={**_CLEAN_ENV, "HOME": cwd}, start_new_session=True, close_fds=True)
            timed_out = _wait_then_kill_group(proc, limits.timeout_s)
        stdout, overflow = _read_capped(files["stdout"], limits.max_output_bytes)
        stderr, _ = _read_capped(files["stderr"], _STDERR_READ_BYTES)
        status = _classify(proc.returncode, timed_out, overflow)
        if overflow:
            stderr += f"[sandbox] output limit of {limits.max_output_bytes} bytes reached\n"
        return ExecResult(status, stdout, stderr, time.monotonic() - start)
    finally:
        _remove_tree(run_dir)


def _command(config: _Config, run_dir: str, program_path: str, limits: Limits, uid: int) -> tuple[list[str], str]:
    """The argv that runs the launcher under `config`, and the host cwd to start it in."""
    python = [sys.executable, "-I", "-S", "-B", "-c", _LAUNCHER, program_path,
              str(max(1, math.ceil(limits.timeout_s)) + 1), str(limits.memory_mb << 20),
              str(limits.max_output_bytes), str(limits.max_processes), str(uid),
              os.pathsep.join(site_dirs())]
    if config.isolation == "bwrap":
        prefix = bwrap_prefix(config.tool, run_dir, program_path, limits.scratch_mb, config.drop_privileges)
        return prefix + python, run_dir
    work_dir = os.path.join(run_dir, "work")
    os.mkdir(work_dir)
    if config.isolation == "unshare":
        return [config.tool, "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"]) + python, work_dir
    return python, work_dir


def _wait_then_kill_group(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for exit (without reaping, so the group id stays ours), kill whatever is left
    of the process group, then reap. True if the wall-clock limit was hit."""
    timed_out = not _wait_exit_unreaped(proc, timeout_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    return timed_out


def _wait_exit_unreaped(proc: subprocess.Popen, timeout_s: float) -> bool:
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):   # no pidfd: Popen.wait polls (and reaps)
        try:
            proc.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(max(0.0, timeout_s) * 1000))
    finally:
        os.close(pidfd)


def _classify(returncode: int, timed_out: bool, output_overflow: bool) -> str:
    if timed_out:
        return "timeout"
    if output_overflow:
        return "killed"
    if returncode == 0:
        return "ok"
    if returncode == MEMORY_EXIT_CODE:
        return "memory"
    # a signal shows as -N from a direct child and as 128+N through bwrap
    signum = -returncode if returncode < 0 else returncode - 128 if 128 < returncode <= 128 + 64 else 0
    if signum == signal.SIGXCPU:
        return "timeout"
    return "killed" if signum else "error"


def _read_capped(path: str, cap: int) -> tuple[str, bool]:
    with open(path, "rb") as f:
        data = f.read(cap)
        overflow = len(data) >= cap > 0
    return data.decode("utf-8", errors="replace"), overflow


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(text)
    os.chmod(path, 0o644)


def _remove_tree(path: str) -> None:
    def make_writable_and_retry(function, failed_path, _exc):
        try:   # a program may have made its own directories read-only
            os.chmod(os.path.dirname(failed_path), 0o700)
            function(failed_path)
        except OSError as error:
            log.warning("could not remove sandbox scratch %s: %s", failed_path, error)
    shutil.rmtree(path, onerror=make_writable_and_retry)
