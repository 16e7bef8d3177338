"""Chrome's tabs over its DevTools HTTP port (the VM's `chromium_port`, OSWORLD.md §1): what OSWorld's
`chrome_open_tabs` and `chrome_close_tabs` setup steps do, without a browser driver.

- `open_tabs(endpoint, urls)`: waits for the port (OSWorld: 15 tries, 5 s apart), opens each URL in a new
  tab (`PUT /json/new?URL`), and closes the tab that was first before them (Chrome's start tab), as
  OSWorld's step closes `context.pages[0]` after the first URL. OSWorld waits for each page's load
  event (60 s at most, a timeout only logged); here the tab is opened and not waited for.
- `close_tabs(endpoint, urls)`: for each URL, closes the first open tab whose address is the same
  (scheme, host without `www.`, path without a trailing `/`, query).

Task URLs are untrusted text: they are sent URL-quoted as one query string, never to a shell.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from rlanything_jax.scenarios.osworld.endpoint import VmEndpoint

CONNECT_TRIES = 15
CONNECT_INTERVAL_S = 5.0
REQUEST_TIMEOUT_S = 30.0
CLOSE_WAIT_S = 5.0


class DevToolsError(RuntimeError):
    """Chrome's DevTools port did not answer, or answered an error."""


def _call(endpoint: VmEndpoint, method: str, path: str) -> Any:
    import http.client

    if endpoint.unix_socket or not endpoint.host:
        raise DevToolsError(f"{endpoint}: a local session has no Chrome DevTools port")
    connection = http.client.HTTPConnection(endpoint.host, endpoint.chromium_port, timeout=REQUEST_TIMEOUT_S)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as error:
        raise DevToolsError(f"{endpoint.host}:{endpoint.chromium_port}{path}: {error}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise DevToolsError(f"{endpoint.host}:{endpoint.chromium_port}{path}: HTTP {response.status} "
                            f"{body[:200]!r}")
    try:
        return json.loads(body) if body.strip() else None
    except ValueError:
        return body.decode("utf-8", "replace")


def wait_for_port(endpoint: VmEndpoint, tries: int = CONNECT_TRIES, interval_s: float = CONNECT_INTERVAL_S) -> None:
    if endpoint.unix_socket or not endpoint.host:
        raise DevToolsError(f"{endpoint}: a local session has no Chrome DevTools port")
    for attempt in range(tries):
        try:
            _call(endpoint, "GET", "/json/version")
            return
        except DevToolsError:
            if attempt == tries - 1:
                raise
            time.sleep(interval_s)


def page_tabs(endpoint: VmEndpoint) -> list[dict[str, Any]]:
    """The open tabs (DevTools targets of type page), as Chrome lists them."""
    targets = _call(endpoint, "GET", "/json/list")
    return [t for t in targets or [] if isinstance(t, dict) and t.get("type") == "page"]


def same_url(a: str, b: str) -> bool:
    def key(url: str) -> tuple[str, str, str, str]:
        parts = urllib.parse.urlsplit(url.strip())
        host = parts.netloc.lower().removeprefix("www.")
        return parts.scheme.lower(), host, parts.path.rstrip("/"), parts.query
    return key(a) == key(b)


def _close(endpoint: VmEndpoint, tab_id: str, wait_s: float = CLOSE_WAIT_S) -> None:
    """Closes a tab and waits until Chrome no longer lists it (closing is asynchronous)."""
    _call(endpoint, "GET", f"/json/close/{urllib.parse.quote(tab_id, safe='')}")
    deadline = time.monotonic() + wait_s
    while any(t.get("id") == tab_id for t in page_tabs(endpoint)) and time.monotonic() < deadline:
        time.sleep(0.05)


def open_tabs(endpoint: VmEndpoint, urls: Sequence[str], tries: int = CONNECT_TRIES,
              interval_s: float = CONNECT_INTERVAL_S) -> None:
    wait_for_port(endpoint, tries, interval_s)
    before = page_tabs(endpoint)
    for index, url in enumerate(urls):
        _call(endpoint, "PUT", "/json/new?" + urllib.parse.quote(str(url), safe=""))
        if index == 0 and before:
            _close(endpoint, str(before[0].get("id", "")))


def close_tabs(endpoint: VmEndpoint, urls: Sequence[str], tries: int = CONNECT_TRIES,
               interval_s: float = CONNECT_INTERVAL_S) -> None:
    wait_for_port(endpoint, tries, interval_s)
    for url in urls:
        match = next((t for t in page_tabs(endpoint) if same_url(str(t.get("url", "")), str(url))), None)
        if match is not None:
            _close(endpoint, str(match.get("id", "")))
