"""`OsWorldClient`: the host side of OSWorld's VM server protocol (OSWORLD.md §1).

It speaks to an unmodified OSWorld server on a VM (any provider) and to the project's own server
in a local desktop session (`desktop_server`), with the reference controller's timeouts and
retries: 90 s for an action or command, 10 s for a screenshot, 3 tries 5 s apart, screenshots
accepted only with PNG or JPEG magic.

A VM that stops answering (no connection, a timeout, a broken answer, or no valid screenshot
after every try) raises `VmUnavailable`: the env worker turns that into an EnvError that ends
only this VM's episode. A VM that answers with an error status is not unavailable: the calls
return what the reference's controller returns then (None, False, or the error JSON).
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.parse
import uuid
from typing import Any

from rlanything_jax.scenarios.osworld.endpoint import HttpResponse, VmEndpoint, http_request

log = logging.getLogger(__name__)

ACTION_TIMEOUT_S = 90.0       # the reference controller's timeout for /execute
SCREENSHOT_TIMEOUT_S = 10.0
SETUP_TIMEOUT_S = 120.0       # setup commands may run the server's full 120 s
OPEN_FILE_TIMEOUT_S = 1800.0  # the reference server waits up to 1800 s for the opened window
RETRIES = 3
RETRY_INTERVAL_S = 5.0
PYAUTOGUI_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"


class VmUnavailable(EnvironmentError):   # noqa: UP024 (an environment error is what it is)
    """The VM's server did not answer usefully: the episode on it cannot go on."""


def is_image(data: bytes) -> bool:
    return data.startswith(PNG_MAGIC) or data.startswith(JPEG_MAGIC)


def multipart_body(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body and its content type (text fields, then (filename, bytes) files)."""
    boundary = "rla-" + uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
                     + value.encode() + b"\r\n")
    for name, (filename, data) in files.items():
        safe_filename = filename.replace('"', "_").replace("\r", "_").replace("\n", "_")
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{safe_filename}"\r\n'
                     "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class OsWorldClient:
    """Calls on one VM's server. `endpoint` is a `VmEndpoint` or its text form
    (`host:server_port[:chromium:vnc:vlc]` or `unix:/path`)."""

    def __init__(self, endpoint: VmEndpoint | str, *, retries: int = RETRIES,
                 retry_interval_s: float = RETRY_INTERVAL_S, action_timeout_s: float = ACTION_TIMEOUT_S,
                 screenshot_timeout_s: float = SCREENSHOT_TIMEOUT_S):
        self.endpoint = endpoint if isinstance(endpoint, VmEndpoint) else VmEndpoint.parse(endpoint)
        self.retries = max(1, int(retries))
        self.retry_interval_s = retry_interval_s
        self.action_timeout_s = action_timeout_s
        self.screenshot_timeout_s = screenshot_timeout_s

    # -- observations

    def screenshot(self) -> bytes:
        """The screen as PNG (or JPEG) bytes; raises VmUnavailable when no try gets an image."""
        def valid(response: HttpResponse) -> bool:
            return response.status == 200 and is_image(response.body)
        response = self._request("GET", "/screenshot", timeout_s=self.screenshot_timeout_s, accept=valid)
        if not valid(response):
            raise VmUnavailable(f"{self.endpoint}: /screenshot gave no image after {self.retries} tries "
                                f"(status {response.status}, {len(response.body)} bytes)")
        return response.body

    def terminal_output(self) -> str | None:
        """The active terminal's text, or None (no terminal, or an error)."""
        data = self._json_or_none(self._request("GET", "/terminal", timeout_s=self.action_timeout_s))
        output = data.get("output") if isinstance(data, dict) else None
        return output if isinstance(output, str) else None

    def accessibility_tree(self) -> str | None:
        """The AT-SPI tree as XML, or None where the server has none (it is optional)."""
        data = self._json_or_none(self._request("GET", "/accessibility", timeout_s=self.action_timeout_s))
        tree = data.get("AT") if isinstance(data, dict) else None
        return tree if isinstance(tree, str) else None

    def screen_size(self) -> tuple[int, int] | None:
        data = self._json_or_none(self._request("POST", "/screen_size", timeout_s=self.action_timeout_s))
        try:
            return int(data["width"]), int(data["height"])
        except (TypeError, KeyError, ValueError):
            return None

    # -- commands and actions

    def execute(self, command: list[str] | str, shell: bool = False, *, setup: bool = False,
                timeout_s: float | None = None) -> dict[str, Any]:
        """POST /execute (or /setup/execute): `{status, output, error, returncode}`, or the server's
        error JSON `{status: "error", message}` when the command could not run."""
        path = "/setup/execute" if setup else "/execute"
        timeout = timeout_s or (SETUP_TIMEOUT_S if setup else self.action_timeout_s)
        response = self._request("POST", path, json_body={"command": command, "shell": shell}, timeout_s=timeout)
        data = self._json_or_none(response, ok_only=False)
        if not isinstance(data, dict):
            return {"status": "error", "message": f"HTTP {response.status}: {response.body[:200]!r}"}
        return data

    def execute_pyautogui(self, code: str) -> dict[str, Any]:
        """One action as the reference runs it: `python -c "import pyautogui; ...; <code>"`."""
        return self.execute(["python", "-c", PYAUTOGUI_PREFIX + code])

    # -- setup routes

    def launch(self, command: list[str] | str, shell: bool = False) -> bool:
        response = self._request("POST", "/setup/launch", json_body={"command": command, "shell": shell},
                                 timeout_s=self.action_timeout_s)
        return response.status == 200

    def upload_file(self, path: str, data: bytes) -> bool:
        body, content_type = multipart_body({"file_path": path}, {"file_data": (path.rsplit("/", 1)[-1], data)})
        response = self._request("POST", "/setup/upload", body=body, content_type=content_type,
                                 timeout_s=SETUP_TIMEOUT_S)
        return response.status == 200

    def open_file(self, path: str, timeout_s: float = OPEN_FILE_TIMEOUT_S) -> bool:
        response = self._request("POST", "/setup/open_file", json_body={"path": path}, timeout_s=timeout_s)
        return response.status == 200

    def activate_window(self, window_name: str, strict: bool = False, by_class: bool = False) -> bool:
        return self._window("/setup/activate_window", window_name, strict, by_class)

    def close_window(self, window_name: str, strict: bool = False, by_class: bool = False) -> bool:
        return self._window("/setup/close_window", window_name, strict, by_class)

    def _window(self, path: str, window_name: str, strict: bool, by_class: bool) -> bool:
        body = {"window_name": window_name, "strict": strict, "by_class": by_class}
        return self._request("POST", path, json_body=body, timeout_s=self.action_timeout_s).status == 200

    # -- files

    def get_file(self, path: str) -> bytes | None:
        """The file's bytes, or None when the VM has no such file."""
        body = urllib.parse.urlencode({"file_path": path}).encode()
        response = self._request("POST", "/file", body=body, content_type="application/x-www-form-urlencoded",
                                 timeout_s=self.action_timeout_s)
        return response.body if response.status == 200 else None

    def list_directory(self, path: str) -> dict[str, Any] | None:
        """The recursive `{type, name, children}` tree, or None (no such directory)."""
        data = self._json_or_none(self._request("POST", "/list_directory", json_body={"path": path},
                                                timeout_s=self.action_timeout_s))
        tree = data.get("directory_tree") if isinstance(data, dict) else None
        return tree if isinstance(tree, dict) else None

    def window_size(self, app_class_name: str) -> dict[str, Any] | None:
        """`{width, height}` of the window whose WM_CLASS matches, or None."""
        body = urllib.parse.urlencode({"app_class_name": app_class_name}).encode()
        return self._json_or_none(self._request("POST", "/window_size", body=body,
                                                content_type="application/x-www-form-urlencoded",
                                                timeout_s=self.action_timeout_s))

    def wallpaper(self) -> bytes | None:
        response = self._request("POST", "/wallpaper", timeout_s=self.action_timeout_s)
        return response.body if response.status == 200 else None

    def desktop_path(self) -> str | None:
        data = self._json_or_none(self._request("POST", "/desktop_path", timeout_s=self.action_timeout_s))
        path = data.get("desktop_path") if isinstance(data, dict) else None
        return path if isinstance(path, str) else None

    # -- transport

    def _request(self, method: str, path: str, *, json_body: Any = None, body: bytes | None = None,
                 content_type: str | None = None, timeout_s: float, accept=None) -> HttpResponse:
        """The first answer `accept` takes (default: any answer); the last answer when none is
        taken; VmUnavailable when no try got an answer at all."""
        if json_body is not None:
            body, content_type = json.dumps(json_body).encode(), "application/json"
        last: HttpResponse | None = None
        failure = ""
        for attempt in range(self.retries):
            if attempt:
                time.sleep(self.retry_interval_s)
            try:
                last = http_request(self.endpoint, method, path, body, content_type, timeout_s)
            except (OSError, http.client.HTTPException) as error:
                failure = f"{type(error).__name__}: {error}"
                log.info("%s %s on %s failed (try %d): %s", method, path, self.endpoint, attempt + 1, failure)
                continue
            if accept is None or accept(last):
                return last
        if last is None:
            raise VmUnavailable(f"{self.endpoint}: {method} {path} got no answer in {self.retries} tries "
                                f"({failure})")
        return last

    @staticmethod
    def _json_or_none(response: HttpResponse, ok_only: bool = True) -> Any:
        if ok_only and response.status != 200:
            return None
        try:
            return json.loads(response.body)
        except ValueError:
            return None
