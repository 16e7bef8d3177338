"""`OsWorldClient` against real servers: the project's desktop server (over a Unix socket and TCP)
for the JSON shapes of every route that needs no display, and small real HTTP servers for the
failure modes (no image, a hang, a dead VM)."""

import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlanything_jax.scenarios.osworld import desktop_server
from rlanything_jax.scenarios.osworld.client import PNG_MAGIC, OsWorldClient, VmUnavailable, is_image
from rlanything_jax.scenarios.osworld.endpoint import EndpointClaim, PoolExhausted, VmEndpoint


def _wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.fixture
def server_socket(tmp_path):
    """The project's server, as a separate process listening on a Unix socket (no display)."""
    sock = tmp_path / "server.sock"
    proc = subprocess.Popen([sys.executable, desktop_server.__file__, "--unix-socket", str(sock),
                             "--display", ":none"], cwd=tmp_path)
    try:
        _wait_for(sock)
        yield sock
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def client(server_socket):
    return OsWorldClient(f"unix:{server_socket}", retries=1)


# --- endpoints -------------------------------------------------------------------------------


def test_endpoints_parse_like_a_providers_address():
    assert VmEndpoint.parse("10.0.0.5:5000") == VmEndpoint("10.0.0.5", 5000)
    full = VmEndpoint.parse("vm1:5001:9223:8007:8081")
    assert (full.host, full.server_port, full.chromium_port, full.vnc_port, full.vlc_port) == \
        ("vm1", 5001, 9223, 8007, 8081)
    assert VmEndpoint.parse("vm1").server_port == 5000
    assert VmEndpoint.parse("unix:/run/x.sock").unix_socket == "/run/x.sock"
    assert VmEndpoint.parse(str(full)) == full
    for bad in ("", ":5000", "vm:port", "vm:1:2", "vm:70000", "unix:relative.sock", "vm:5000:1:2:3:4"):
        with pytest.raises(ValueError, match="VM endpoint"):
            VmEndpoint.parse(bad)


def test_an_endpoint_pool_gives_each_environment_its_own_vm_until_it_lets_go(tmp_path):
    pool = ["vm1:5000", "vm2:5000"]
    first, second = EndpointClaim(pool, tmp_path), EndpointClaim(pool, tmp_path)
    assert {first.endpoint, second.endpoint} == set(pool)
    with pytest.raises(PoolExhausted, match="tasks.endpoints"):
        EndpointClaim(pool, tmp_path)
    held = first.endpoint
    first.release()
    assert EndpointClaim(pool, tmp_path).endpoint == held
    # A holder killed with SIGKILL frees its endpoint (the kernel drops the flock).
    second.release()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from rlanything_jax.scenarios.osworld.endpoint import EndpointClaim\n"
                               f"claim = EndpointClaim(['vm3:5000'], {str(tmp_path)!r})\n"
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PoolExhausted):
            EndpointClaim(["vm3:5000"], tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert EndpointClaim(["vm3:5000"], tmp_path).endpoint == "vm3:5000"


# --- the project's server: JSON shapes ---------------------------------------------------------


def test_execute_returns_the_reference_shape(client):
    result = client.execute(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert result == {"status": "success", "output": "out\n", "error": "err\n", "returncode": 3}
    assert client.execute("echo $((1+2))", shell=True)["output"] == "3\n"
    assert client.execute("echo a 'b c'")["output"] == "a b c\n"        # a string without shell is split
    assert client.execute(["sh", "-c", "exit 0"], setup=True)["returncode"] == 0   # /setup/execute
    missing = client.execute(["no-such-program-rla"])
    assert missing["status"] == "error" and "no-such-program-rla" in missing["message"]


def test_upload_then_file_and_list_directory(client, tmp_path):
    target = tmp_path / "up" / "data.bin"
    payload = bytes(range(256)) * 10
    assert client.upload_file(str(target), payload)
    assert client.get_file(str(target)) == payload
    assert client.get_file(str(tmp_path / "missing")) is None
    (tmp_path / "up" / "inner").mkdir()
    (tmp_path / "up" / "inner" / "leaf.txt").write_text("x")
    tree = client.list_directory(str(tmp_path / "up"))
    assert tree["type"] == "directory" and tree["name"] == "up"
    children = {c["name"]: c for c in tree["children"]}
    assert children["data.bin"] == {"type": "file", "name": "data.bin"}
    assert children["inner"] == {"type": "directory", "name": "inner",
                                 "children": [{"type": "file", "name": "leaf.txt"}]}
    assert client.list_directory(str(tmp_path / "missing")) is None


def test_launch_does_not_wait_and_windows_need_a_display(client, tmp_path):
    started = time.monotonic()
    assert client.launch(["sh", "-c", f"sleep 0.3; touch {tmp_path}/launched"])
    assert time.monotonic() - started < 0.3 + 0.25
    _wait_for(tmp_path / "launched")
    assert not client.activate_window("no such window")     # wmctrl cannot reach a display here
    assert client.terminal_output() is None
    assert client.accessibility_tree() is None              # optional route: not offered


def test_tcp_endpoint_reaches_the_same_server(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, desktop_server.__file__, "--port", str(port), "--display", ":none"])
    try:
        client = OsWorldClient(f"127.0.0.1:{port}", retries=20, retry_interval_s=0.1)
        assert client.execute(["echo", "tcp"])["output"] == "tcp\n"
    finally:
        proc.kill()
        proc.wait()


# --- failure modes, against small real servers -------------------------------------------------


class _ScriptedHandler(BaseHTTPRequestHandler):
    """Answers /screenshot with the server's `answers` in turn; `hang` answers nothing."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        self.server.calls += 1
        answer = self.server.answers[min(self.server.calls, len(self.server.answers)) - 1]
        if answer == "hang":
            time.sleep(3)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def scripted_server():
    servers = []

    def start(answers):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedHandler)
        server.daemon_threads = True
        server.answers, server.calls = answers, 0
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_screenshot_retries_until_an_image_and_checks_magic(scripted_server):
    png = PNG_MAGIC + b"rest"
    server = scripted_server([b"<html>not an image</html>", png])
    client = OsWorldClient(f"127.0.0.1:{server.server_address[1]}", retries=3, retry_interval_s=0.01)
    assert client.screenshot() == png and server.calls == 2
    assert is_image(b"\xff\xd8\xff\xe0jpeg") and not is_image(b"GIF89a")
    never = scripted_server([b"GIF89a..."])
    with pytest.raises(VmUnavailable, match="no image after 2 tries"):
        OsWorldClient(f"127.0.0.1:{never.server_address[1]}", retries=2, retry_interval_s=0.01).screenshot()


def test_a_vm_that_stops_answering_raises_an_environment_error(scripted_server, tmp_path):
    hung = scripted_server(["hang"])
    client = OsWorldClient(f"127.0.0.1:{hung.server_address[1]}", retries=2, retry_interval_s=0.01,
                           screenshot_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(VmUnavailable, match="got no answer in 2 tries") as caught:
        client.screenshot()
    assert isinstance(caught.value, EnvironmentError)
    assert time.monotonic() - started < 2.0
    dead = OsWorldClient(f"unix:{tmp_path}/nobody.sock", retries=2, retry_interval_s=0.01)
    with pytest.raises(VmUnavailable):
        dead.execute(["true"])
    with pytest.raises(VmUnavailable):
        dead.get_file("/etc/hostname")
