"""Where a desktop's server is, and one HTTP request to it (over TCP or a Unix socket).

A real OSWorld VM is named as a provider's `get_ip_address()` names it, `host:server_port` with
optional `:chromium:vnc:vlc` ports (the docker provider remaps them); a local desktop session
has no network, so its server listens on a Unix socket, named `unix:/path/to/server.sock`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import http.client
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import IO

DEFAULT_SERVER_PORT = 5000
DEFAULT_CHROMIUM_PORT = 9222
DEFAULT_VNC_PORT = 8006
DEFAULT_VLC_PORT = 8080


@dataclasses.dataclass(frozen=True)
class VmEndpoint:
    host: str = ""
    server_port: int = DEFAULT_SERVER_PORT
    chromium_port: int = DEFAULT_CHROMIUM_PORT
    vnc_port: int = DEFAULT_VNC_PORT
    vlc_port: int = DEFAULT_VLC_PORT
    unix_socket: str = ""   # set for a local session: then host and ports are unused

    @classmethod
    def parse(cls, text: str) -> VmEndpoint:
        """`host:server_port[:chromium:vnc:vlc]`, `host` (port 5000), or `unix:/path`.
        Raises ValueError naming the text when it is none of these."""
        text = str(text).strip()
        if text.startswith("unix:"):
            path = text[len("unix:"):]
            if not path.startswith("/"):
                raise ValueError(f"VM endpoint {text!r}: a Unix socket needs an absolute path")
            return cls(unix_socket=path)
        parts = text.split(":")
        if not parts[0] or len(parts) not in (1, 2, 5):
            raise ValueError(f"VM endpoint {text!r}: expected host:server_port[:chromium:vnc:vlc]")
        ports = []
        for part in parts[1:]:
            if not part.isdigit() or not 0 < int(part) < 65536:
                raise ValueError(f"VM endpoint {text!r}: {part!r} is not a port number")
            ports.append(int(part))
        return cls(parts[0], *ports)

    def __str__(self) -> str:
        if self.unix_socket:
            return f"unix:{self.unix_socket}"
        return f"{self.host}:{self.server_port}:{self.chromium_port}:{self.vnc_port}:{self.vlc_port}"

    def connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.unix_socket:
            return _UnixHTTPConnection(self.unix_socket, timeout_s)
        return http.client.HTTPConnection(self.host, self.server_port, timeout=timeout_s)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout_s: float):
        super().__init__("localhost", timeout=timeout_s)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclasses.dataclass(frozen=True)
class HttpResponse:
    status: int
    content_type: str
    body: bytes


def http_request(endpoint: VmEndpoint, method: str, path: str, body: bytes | None = None,
                 content_type: str | None = None, timeout_s: float = 90.0) -> HttpResponse:
    """One request, no retries; connection failures and timeouts raise OSError (incl. TimeoutError),
    a malformed answer raises http.client.HTTPException."""
    connection = endpoint.connection(timeout_s)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return HttpResponse(response.status, response.getheader("Content-Type", ""), response.read())
    finally:
        connection.close()


def split_endpoints(text: str) -> list[str]:
    """`host:port,host:port,...` (spaces and empty entries ignored) as a list."""
    return [e.strip() for e in text.split(",") if e.strip()]


def claim_first_free(lock_paths: Sequence[Path]) -> tuple[int, IO] | None:
    """The index and open handle of the first lock file nobody holds, now held by this process (an flock the
    kernel drops when the handle closes or the process exits, SIGKILL included); None when all are held."""
    for index, path in enumerate(lock_paths):
        handle = open(path, "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return index, handle
        except BlockingIOError:
            handle.close()
    return None


class EndpointClaim:
    """One endpoint of a pool held by one environment while it lives (`claim_first_free` over a lock file per
    endpoint under `lock_dir`), so that parallel environment workers, in one run or several, each drive
    their own VM."""

    def __init__(self, endpoints: Sequence[str], lock_dir: str | Path):
        if not endpoints:
            raise ValueError("an endpoint pool needs at least one endpoint")
        self.pool = tuple(endpoints)
        directory = Path(lock_dir)
        directory.mkdir(parents=True, exist_ok=True)
        names = [hashlib.sha1(str(VmEndpoint.parse(text)).encode()).hexdigest()[:16] for text in endpoints]
        claimed = claim_first_free([directory / f"{name}.lock" for name in names])
        if claimed is not None:
            index, self._handle = claimed
            self.endpoint = endpoints[index]
            return
        raise PoolExhausted(f"all {len(endpoints)} OSWorld endpoints are held by other environments; give at "
                            "least as many endpoints (tasks.endpoints) as environment workers (env.workers)")

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()   # closing drops the flock
            self._handle = None


class PoolExhausted(RuntimeError):
    """Every endpoint of the pool is claimed."""
