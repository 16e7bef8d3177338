"""bubblewrap mounts for the sandbox (`envs.sandbox`): what the contained run sees of the host.

The host is read-only, /tmp, /dev/shm and the run's scratch directory are private tmpfs, and
the interpreter stays reachable where those mounts (or a private home, for a dropped uid)
would hide it.
"""

from __future__ import annotations

import functools
import os
import site
import stat
import sys


def bwrap_prefix(run_dir: str, program_path: str, scratch_mb: int, drop_privileges: bool) -> list[str]:
    """bubblewrap's argv up to "--": read-only host, private /tmp, /dev/shm and scratch tmpfs of
    `scratch_mb`, the program file alone (read-only) in the scratch dir, no network, own pid namespace."""
    size = str(scratch_mb << 20)
    args = ["bwrap", "--ro-bind", "/", "/"]
    if drop_privileges:
        args += _reexpose_interpreter_args()
    args += ["--dev", "/dev", "--proc", "/proc",
             "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
             *_rebind_under_private_tmp(),
             # the scratch dir is a fresh tmpfs over run_dir: the host's stdin/stdout files
             # stay hidden and the program file is the only thing in it (read-only)
             "--size", size, "--tmpfs", run_dir, "--ro-bind", program_path, program_path,
             "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
             "--chdir", run_dir]
    if os.geteuid() == 0 and not drop_privileges:
        args += ["--cap-drop", "ALL"]   # root inside could otherwise remount / read-write
    return args + ["--"]


@functools.cache
def _rebind_under_private_tmp() -> list[str]:
    """The interpreter's trees that live under /tmp or /dev/shm (a checkout's venv there), bound
    back read-only over the private tmpfs that would otherwise hide them."""
    trees = {os.path.abspath(p) for p in (sys.prefix, *site_dirs(), os.path.dirname(sys.executable))}
    hidden = sorted(t for t in trees if t.startswith(("/tmp/", "/dev/shm/")) and os.path.isdir(t))
    return [arg for tree in hidden for arg in ("--ro-bind", tree, tree)]


@functools.cache
def _reexpose_interpreter_args() -> list[str]:
    """Mounts that let an unprivileged uid reach the interpreter when it lives under a
    private directory (e.g. pyenv in /root): a tmpfs hides that directory's other
    contents, traversable directories lead back down, and the interpreter's trees are
    bound back in."""
    trees = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *site_dirs())}
    trees.add(os.path.dirname(os.path.realpath(sys.executable)))
    tmpfs, dirs, binds = set(), set(), []
    for tree in sorted(trees):
        blocker = _first_private_ancestor(tree)
        if blocker is None:
            continue
        tmpfs.add(blocker)
        parent = os.path.dirname(tree)
        while len(parent) > len(blocker):
            dirs.add(parent)
            parent = os.path.dirname(parent)
        binds += ["--ro-bind", tree, tree]
    made = [arg for d in sorted(tmpfs) for arg in ("--perms", "0755", "--tmpfs", d)]
    made += [arg for d in sorted(dirs) for arg in ("--perms", "0755", "--dir", d)]
    return made + binds


def _first_private_ancestor(path: str) -> str | None:
    parts = path.split(os.sep)[1:]
    for depth in range(1, len(parts)):
        ancestor = os.sep + os.sep.join(parts[:depth])
        if not os.stat(ancestor).st_mode & stat.S_IXOTH:
            return ancestor
    return None


@functools.cache
def site_dirs() -> tuple[str, ...]:
    return tuple(site.getsitepackages())
