"""Task setup steps (`config`, and an evaluator's `postconfig`) run through the VM protocol, with the
reference SetupController's semantics (OSWORLD.md §2), offline.

`download` never touches the network: it reads the host-side cache laid out as OSWorld's,
`<cache_root>/<task_id>/<uuid5(NAMESPACE_URL, url)>_<basename(path)>`, and uploads the file.
Commands get `{CLIENT_PASSWORD}` and `{SCREEN_WIDTH[_HALF]}`/`{SCREEN_HEIGHT[_HALF]}` substituted;
`until` re-runs a command until its return code, stdout or stderr matches. A step type this
project does not run raises `UnsupportedSetupStep` naming it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlanything_jax.scenarios.osworld import devtools
from rlanything_jax.scenarios.osworld.client import OsWorldClient

log = logging.getLogger(__name__)

UNTIL_TIMEOUT_S = 120.0     # the reference polls forever; a task that never settles is a broken task
UNTIL_POLL_S = 0.3
MAX_FAILED_TRIES = 5         # the reference gives up an `until` loop after 5 failed requests
MAX_SLEEP_S = 60.0


class SetupError(RuntimeError):
    """A setup step failed: the episode cannot start as the task describes."""


class UnsupportedSetupStep(SetupError):
    pass


@dataclasses.dataclass
class SetupContext:
    client: OsWorldClient
    task_id: str
    cache_root: str                  # host directory: <cache_root>/<task_id>/ holds downloads and step outputs;
    #                                  upload_file's local files must be under it
    screen_width: int = 1920
    screen_height: int = 1080
    client_password: str = "password"

    @property
    def cache_dir(self) -> Path:
        return Path(self.cache_root) / self.task_id


def cached_download_path(cache_dir: str | Path, url: str, vm_path: str) -> Path:
    """Where OSWorld's controller caches `url` downloaded for `vm_path`."""
    return Path(cache_dir) / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(vm_path)}"


def substitute_placeholders(command: str | list[str], context: SetupContext) -> str | list[str]:
    values = {"{CLIENT_PASSWORD}": context.client_password,
              "{SCREEN_WIDTH_HALF}": str(context.screen_width // 2),
              "{SCREEN_HEIGHT_HALF}": str(context.screen_height // 2),
              "{SCREEN_WIDTH}": str(context.screen_width), "{SCREEN_HEIGHT}": str(context.screen_height)}

    def substitute(text: str) -> str:
        for name, value in values.items():
            text = text.replace(name, value)
        return text
    return substitute(command) if isinstance(command, str) else [substitute(str(item)) for item in command]


# --- the steps ---------------------------------------------------------------------------------


def _download(context: SetupContext, files: list[dict[str, str]]) -> None:
    for entry in files:
        url, path = entry.get("url", ""), entry.get("path", "")
        if not url or not path:
            raise SetupError(f"download: invalid url ({url!r}) or path ({path!r})")
        cached = cached_download_path(context.cache_dir, url, path)
        if not cached.is_file():
            raise SetupError(f"download: {url} is not in the offline cache (expected {cached}); "
                             "this project never downloads: put the file there")
        if not context.client.upload_file(path, cached.read_bytes()):
            raise SetupError(f"download: uploading {cached} to {path} failed")


def _within_cache(context: SetupContext, name: str, step: str) -> Path:
    """`name` under the cache root (relative names resolve there): a task, possibly written by a model,
    must not make the host read or write anywhere else."""
    root = Path(context.cache_root).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise SetupError(f"{step}: {name!r} is outside the task cache {root}")
    return path


def _upload_file(context: SetupContext, files: list[dict[str, str]]) -> None:
    for entry in files:
        local_path, path = entry.get("local_path", ""), entry.get("path", "")
        local = _within_cache(context, local_path, "upload_file")
        if not local.is_file():
            raise SetupError(f"upload_file: no local file {local_path!r} under {context.cache_root}")
        if not context.client.upload_file(path, local.read_bytes()):
            raise SetupError(f"upload_file: uploading {local_path} to {path} failed")


def _execute(context: SetupContext, command: str | list[str], shell: bool = False, stdout: str = "",
             stderr: str = "", until: dict[str, Any] | None = None) -> None:
    if not command:
        raise SetupError("execute: empty command")
    command = substitute_placeholders(command, context)
    until = until or {}
    deadline = time.monotonic() + UNTIL_TIMEOUT_S
    failures = 0
    while True:
        result = context.client.execute(command, shell=shell, setup=True)
        if result.get("status") == "success":
            for name, key in ((stdout, "output"), (stderr, "error")):
                if name:
                    context.cache_dir.mkdir(parents=True, exist_ok=True)
                    (context.cache_dir / os.path.basename(str(name))).write_text(result.get(key, ""))
        else:
            failures += 1
            log.warning("setup command %r failed: %s", command, result.get("message"))
        if not until:
            return
        if result.get("status") == "success" and (
                ("returncode" in until and result.get("returncode") == until["returncode"])
                or ("stdout" in until and str(until["stdout"]) in result.get("output", ""))
                or ("stderr" in until and str(until["stderr"]) in result.get("error", ""))):
            return
        if failures >= MAX_FAILED_TRIES:
            return   # as the reference: give up quietly after 5 failed requests
        if time.monotonic() > deadline:
            raise SetupError(f"execute: {command!r} never met {until} in {UNTIL_TIMEOUT_S:.0f} s")
        time.sleep(UNTIL_POLL_S)


def _launch(context: SetupContext, command: str | list[str], shell: bool = False) -> None:
    if not command:
        raise SetupError("launch: empty command")
    if not context.client.launch(substitute_placeholders(command, context), shell=shell):
        log.warning("setup launch of %r failed", command)   # the reference logs and goes on


def _open(context: SetupContext, path: str) -> None:
    if not context.client.open_file(path):
        log.warning("setup open of %r failed", path)


def _sleep(context: SetupContext, seconds: float) -> None:
    time.sleep(min(max(0.0, float(seconds)), MAX_SLEEP_S))


def _activate_window(context: SetupContext, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    if not context.client.activate_window(window_name, strict, by_class):
        log.warning("setup could not activate window %r", window_name)


def _close_window(context: SetupContext, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    if not context.client.close_window(window_name, strict, by_class):
        log.warning("setup could not close window %r", window_name)


def _chrome_open_tabs(context: SetupContext, urls_to_open: list[str]) -> None:
    try:
        devtools.open_tabs(context.client.endpoint, [str(u) for u in urls_to_open])
    except devtools.DevToolsError as error:
        raise SetupError(f"chrome_open_tabs: {error}") from None


def _chrome_close_tabs(context: SetupContext, urls_to_close: list[str]) -> None:
    try:
        devtools.close_tabs(context.client.endpoint, [str(u) for u in urls_to_close])
    except devtools.DevToolsError as error:
        raise SetupError(f"chrome_close_tabs: {error}") from None


STEP_TYPES = {
    "chrome_open_tabs": _chrome_open_tabs,     # over the VM's DevTools port (`devtools`)
    "chrome_close_tabs": _chrome_close_tabs,
    "download": _download,
    "upload_file": _upload_file,
    "execute": _execute,
    "command": _execute,
    "launch": _launch,
    "open": _open,
    "sleep": _sleep,
    "activate_window": _activate_window,
    "close_window": _close_window,
}


# Step types OSWorld has and this project does not run, and why.
NOT_SUPPORTED = {
    "googledrive": "it signs in to a Google Drive account with OSWorld's own credentials file",
    "login": "it signs in to a website account with credentials this project does not have",
    "update_browse_history": "it rewrites Chrome's History database on the VM; not implemented",
    "proxy": "OSWorld's proxy pool is not used",
}


def run_setup(steps: Sequence[dict[str, Any]], context: SetupContext) -> None:
    """Runs every step in order; SetupError (UnsupportedSetupStep) names the failing step."""
    for index, step in enumerate(steps):
        kind = step.get("type")
        function = STEP_TYPES.get(kind)
        if function is None:
            why = NOT_SUPPORTED.get(kind, f"supported: {', '.join(sorted(STEP_TYPES))}")
            raise UnsupportedSetupStep(f"setup step {index + 1} of task {context.task_id}: type {kind!r} is not "
                                       f"supported ({why})")
        try:
            function(context, **(step.get("parameters") or {}))
        except TypeError as error:   # parameters the step does not take
            raise SetupError(f"setup step {index + 1} ({kind}) of task {context.task_id}: {error}") from None
        except SetupError as error:
            raise SetupError(f"setup step {index + 1} ({kind}) of task {context.task_id}: {error}") from None
