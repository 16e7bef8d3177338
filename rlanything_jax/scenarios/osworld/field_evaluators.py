"""OSWorld's own metrics and getters, from the `desktop-env` package (the optional `osworld` extra).

`desktop_env.evaluators.metrics` holds the ~150 metric functions OSWorld's tasks name and
`desktop_env.evaluators.getters` their `get_<type>(env, config)` getters. Metrics are called as
they are; getters get an adapter (`FieldEnv`) with the attributes and controller methods they read of
their `env` (OSWORLD.md §1), served by this project's client. So every task is scored by OSWorld's
code wherever the package is installed; without it, only this project's own metrics and getters
(`system/metrics.py`, `evaluator.py`) are available and `tasks.unsupported_parts` names the rest.

desktop-env pins old versions of our stack (torch, transformers), so it is installed without its
dependencies beside the libraries its evaluators import (scripts/setup.sh). `easyocr` (torch models,
not installed) is imported at the top of its docs metrics but used only by `compare_image_text`,
which is therefore unavailable (`UNAVAILABLE`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import logging
import sys
import types
from collections.abc import Callable
from typing import Any

from rlanything_jax.scenarios.osworld.client import PYAUTOGUI_PREFIX, OsWorldClient

log = logging.getLogger(__name__)

UNAVAILABLE = {"compare_image_text": "needs easyocr (OCR models on torch), which the osworld extra leaves out"}
PACKAGE_HINT = "pip install --no-deps desktop-env==1.0.2 and the osworld extra (bash scripts/setup.sh --test)"


@dataclasses.dataclass(frozen=True)
class FieldController:
    """The methods of OSWorld's `PythonController` that its getters call, over our client."""

    client: OsWorldClient

    def execute_python_command(self, command: str) -> dict[str, Any]:
        return self.client.execute(["python", "-c", PYAUTOGUI_PREFIX + command])

    def get_file(self, file_path: str) -> bytes | None:
        return self.client.get_file(file_path)

    def get_accessibility_tree(self) -> str | None:
        return self.client.accessibility_tree()

    def get_terminal_output(self) -> str | None:
        return self.client.terminal_output()

    def get_vm_directory_tree(self, path: str) -> dict[str, Any] | None:
        return self.client.list_directory(path)

    def get_vm_screen_size(self) -> dict[str, int] | None:
        size = self.client.screen_size()
        return None if size is None else {"width": size[0], "height": size[1]}

    def get_vm_window_size(self, app_class_name: str) -> dict[str, Any] | None:
        return self.client.window_size(app_class_name)

    def get_vm_wallpaper(self) -> bytes | None:
        return self.client.wallpaper()

    def get_vm_desktop_path(self) -> str | None:
        return self.client.desktop_path()


@dataclasses.dataclass(frozen=True)
class FieldEnv:
    """What OSWorld's getters read of their `DesktopEnv`."""

    controller: FieldController
    cache_dir: str
    vm_ip: str = ""
    server_port: int = 5000
    chromium_port: int = 9222
    vlc_port: int = 8080
    vm_platform: str = "Linux"
    current_use_proxy: bool = False

    @classmethod
    def over(cls, client: OsWorldClient, cache_dir: str) -> FieldEnv:
        endpoint = client.endpoint
        return cls(FieldController(client), cache_dir, endpoint.host, endpoint.server_port,
                   endpoint.chromium_port, endpoint.vlc_port)


@dataclasses.dataclass(frozen=True)
class FieldEvaluators:
    metrics: dict[str, Callable[..., Any]]       # name -> OSWorld's metric function
    getters: dict[str, Callable[..., Any]]       # type -> get_<type>(env, config)
    version: str


def _import_evaluators() -> tuple[types.ModuleType, types.ModuleType]:
    stub = None
    try:
        importlib.import_module("easyocr")
    except ImportError:
        # Only compare_image_text uses it (UNAVAILABLE); the stub lives while desktop-env imports.
        stub = sys.modules["easyocr"] = types.ModuleType("easyocr")
    try:
        return (importlib.import_module("desktop_env.evaluators.metrics"),
                importlib.import_module("desktop_env.evaluators.getters"))
    finally:
        if stub is not None and sys.modules.get("easyocr") is stub:
            del sys.modules["easyocr"]


def _functions(module: types.ModuleType, prefix: str = "") -> dict[str, Callable[..., Any]]:
    return {name[len(prefix):]: value for name, value in vars(module).items()
            if name.startswith(prefix) and not name.startswith("_") and inspect.isfunction(value)}


@functools.cache
def field_evaluators() -> FieldEvaluators | None:
    """OSWorld's metrics and getters, or None when desktop-env (or a library it imports) is missing."""
    try:
        metrics, getters = _import_evaluators()
    except Exception as error:   # ImportError, or a module that fails on import
        log.info("OSWorld's evaluators are not available (%s: %s); %s", type(error).__name__, error, PACKAGE_HINT)
        return None
    from importlib.metadata import version

    usable = {name: f for name, f in _functions(metrics).items() if name not in UNAVAILABLE}
    return FieldEvaluators(usable, _functions(getters, "get_"), version("desktop-env"))
