"""bubblewrap mounts for the sandbox (`envs.sandbox`): what the contained run sees of the host.

Only what the interpreter needs is there, read-only: the system trees (/usr and its /bin, /lib
links), the dynamic linker's configuration from /etc, and the interpreter's own trees (a pyenv
or a venv, wherever they live). Everything else of the host (home directories, the repository,
/etc, /var, the host's /tmp) does not exist inside. /tmp, /dev/shm and the run's scratch
directory are private size-limited tmpfs.
"""

from __future__ import annotations

import functools
import os
import site
import sys

# Read-only system trees (where they exist; a symlink such as /bin -> usr/bin is recreated).
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The dynamic linker's cache and configuration, and the time zone: nothing else of /etc.
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")


def bwrap_prefix(bwrap: str, run_dir: str, program_path: str, scratch_mb: int,
                 drop_privileges: bool) -> list[str]:
    """The argv of the bubblewrap executable `bwrap` up to "--": the interpreter's trees read-only,
    private /tmp, /dev/shm and
    scratch tmpfs of `scratch_mb`, the program file alone (read-only) in the scratch dir, no
    network, own pid namespace (every descendant dies with the run), own session."""
    size = str(scratch_mb << 20)
    args = [bwrap, *_system_args(),
            "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
            "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
            # after the tmpfs, so that a venv under /tmp is bound over the private /tmp
            *_interpreter_args(),
            # the scratch dir is a fresh tmpfs at run_dir's path: the host's stdin/stdout files
            # stay hidden and the program file is the only thing in it (read-only)
            "--size", size, "--tmpfs", run_dir, "--ro-bind", program_path, program_path,
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--chdir", run_dir]
    if os.geteuid() == 0 and not drop_privileges:
        args += ["--cap-drop", "ALL"]   # root inside could otherwise mount over what it sees
    return args + ["--"]


@functools.cache
def _system_args() -> tuple[str, ...]:
    args: list[str] = []
    for path in _SYSTEM_TREES:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return tuple(args)


@functools.cache
def _interpreter_args() -> tuple[str, ...]:
    """Binds of the interpreter's trees that the system trees do not already hold, under fresh
    0755 parents (bubblewrap would copy the host's modes), so that a dropped uid reaches an
    interpreter under a private home (pyenv in /root) without seeing anything else there."""
    trees = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *site_dirs())}
    trees.add(os.path.dirname(os.path.realpath(sys.executable)))
    # the venv as named (its bin/python is how the launcher is started), when a symlink leads there
    named = {os.path.abspath(p) for p in (sys.prefix, os.path.dirname(sys.executable))}
    covered = [os.path.realpath(t) for t in _SYSTEM_TREES if os.path.isdir(t)]
    parents: set[str] = set()
    binds = []
    for tree in sorted(trees | named):
        if not os.path.isdir(tree) or any(_is_within(tree, root) for root in covered):
            continue
        if tree in named and tree not in trees:   # a symlinked path: recreate the link
            binds += ["--symlink", os.path.realpath(tree), tree]
        else:
            binds += ["--ro-bind", tree, tree]
            covered.append(tree)
        parent = os.path.dirname(tree)
        while parent not in ("/", "/tmp", "/dev/shm"):   # / and the private tmpfs are made already
            parents.add(parent)
            parent = os.path.dirname(parent)
    made = [arg for d in sorted(parents) for arg in ("--perms", "0755", "--dir", d)]
    return tuple(made + binds)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@functools.cache
def site_dirs() -> tuple[str, ...]:
    return tuple(site.getsitepackages())
