"""The project's own desktop server: the subset of OSWorld's VM server protocol that episodes, setup
steps and the os-domain evaluators use, with the same routes and JSON shapes (OSWORLD.md §1).

It runs *inside* a local desktop session (`local_desktop`), as the session's user, under Debian's
python3: so this file is self-contained (standard library, plus Pillow for screenshots when
present) and imports nothing from the project. It listens on a Unix socket (the session has no
network, so the host reaches it through a socket in a bound directory) or, for development, on
a TCP port.

    python3 desktop_server.py --unix-socket /run/rla/server.sock
    python3 desktop_server.py --port 5000
"""

from __future__ import annotations

import argparse
import email.parser
import email.policy
import json
import os
import re
import shlex
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

EXECUTE_TIMEOUT_S = 120          # the reference server's subprocess timeout
OPEN_WINDOW_TIMEOUT_S = 90       # `open` waits for a window titled with the file's name (the reference: 1800 s)
TERMINAL_LOG_DIR = "/tmp/rla-terminal"   # the session's terminals log their screen text here
MAX_REQUEST_BYTES = 1 << 30
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>]")


# --- what the routes do ----------------------------------------------------------------------


def _expand_home_args(command):
    """The reference expands `~/` in list-form arguments (a shell expands it otherwise)."""
    return [os.path.expanduser(arg) if isinstance(arg, str) and arg.startswith("~/") else arg for arg in command]


def _command_from(data):
    shell = bool(data.get("shell", False))
    command = data.get("command", "" if shell else [])
    if isinstance(command, str) and not shell:
        command = shlex.split(command)
    if isinstance(command, list):
        command = _expand_home_args(command)
    return command, shell


def execute(data):
    command, shell = _command_from(data)
    try:
        done = subprocess.run(command, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True, timeout=EXECUTE_TIMEOUT_S)
    except Exception as error:   # a missing program, a timeout: the reference's 500 shape
        return 500, {"status": "error", "message": str(error)}
    return 200, {"status": "success", "output": done.stdout, "error": done.stderr, "returncode": done.returncode}


def _reaped(process):
    """Waits for a started program in a thread, so that it leaves no zombie behind (a task's `pkill app`
    followed by a wait for the app to be gone must see it gone)."""
    threading.Thread(target=process.wait, daemon=True).start()


def launch(data):
    command, shell = _command_from(data)
    try:
        # no pipes: a launched app must never hold a request open (OSWORLD.md: `cmd &` blocks /execute)
        _reaped(subprocess.Popen(command, shell=shell, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True))
    except Exception as error:
        return 500, {"status": "error", "message": str(error)}
    return 200, f"{command if shell else ' '.join(command)} launched successfully"


def screenshot_png(display):
    """The screen as PNG bytes: Pillow's X grab when available, else scrot."""
    try:
        import io

        from PIL import ImageGrab
        image = ImageGrab.grab(xdisplay=display)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=1)   # level 1: 3x faster, 1.5x larger
        return buffer.getvalue()
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "screen.png")
        subprocess.run(["scrot", "--overwrite", path], check=True, timeout=10,
                       env={**os.environ, "DISPLAY": display}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(path, "rb") as f:
            return f.read()


def screen_size(display):
    out = subprocess.run(["xdotool", "getdisplaygeometry"], capture_output=True, text=True, timeout=10,
                         env={**os.environ, "DISPLAY": display}).stdout.split()
    return {"width": int(out[0]), "height": int(out[1])}


def directory_tree(directory):
    tree = {"type": "directory", "name": os.path.basename(directory), "children": []}
    try:
        for entry in os.listdir(directory):
            full_path = os.path.join(directory, entry)
            if os.path.isdir(full_path) and not os.path.islink(full_path):
                tree["children"].append(directory_tree(full_path))
            else:
                tree["children"].append({"type": "file", "name": entry})
    except OSError as error:
        tree = {"error": str(error)}
    return tree


def list_directory(data):
    path = data.get("path")
    if not path:
        return 400, {"error": "Path not supplied"}
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        return 404, {"error": "Path does not exist"}
    if not os.path.isdir(path):
        return 400, {"error": "Path is not a directory"}
    return 200, {"directory_tree": directory_tree(path)}


def wmctrl_window(action, data):
    """`/setup/activate_window` and `/setup/close_window`: wmctrl -a/-c, -x by class, -F exact."""
    name = data.get("window_name")
    if not name:
        return 400, "window_name required"
    flags = "-" + ("x" if data.get("by_class") else "") + ("F" if data.get("strict") else "") + action
    done = subprocess.run(["wmctrl", flags, name], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        return 500, f"wmctrl {flags} {name!r} failed: {done.stderr.strip() or 'no such window'}"
    verb = "activated" if action == "a" else "closed"
    return 200, f"Window {verb} successfully"


def open_file(data):
    path = os.path.expandvars(os.path.expanduser(data.get("path") or ""))
    if not path:
        return 400, "Path not supplied"
    if os.path.exists(path):
        # no file manager in the session: a directory opens in a terminal titled with its name
        command = ["xdg-open", path] if _on_path("xdg-open") and not os.path.isdir(path) else _fallback_opener(path)
    elif _on_path(path.split()[0]):
        command = shlex.split(path)   # the reference also opens a command on PATH
    else:
        return 404, "File not found"
    try:
        _reaped(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True))
    except OSError as error:
        return 500, f"Failed to open {path}: {error}"
    if not os.path.exists(path):
        return 200, "File opened successfully"   # a command: no window name to wait for
    name = os.path.basename(path.rstrip("/")) or path
    deadline = time.monotonic() + OPEN_WINDOW_TIMEOUT_S
    while time.monotonic() < deadline:   # as the reference: done when a window's title names the file
        titles = subprocess.run(["wmctrl", "-l"], capture_output=True, text=True, timeout=10).stdout
        if name in titles:
            return 200, "File opened successfully"
        time.sleep(0.25)
    return 404, f"File opened but window {name} not found within {OPEN_WINDOW_TIMEOUT_S} seconds"


def _fallback_opener(path):
    """Directories, and without xdg-utils text files, open in a terminal (a shell there, or a viewer)."""
    if os.path.isdir(path):
        title = os.path.basename(path.rstrip("/")) or "/"
        return ["xterm", "-T", title, "-e", "sh", "-c", 'cd "$1" && exec bash', "sh", path]
    return ["xterm", "-T", os.path.basename(path), "-e", "less", path]


def _on_path(name):
    return any(os.access(os.path.join(d, name), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep))


def terminal_output(display):
    """The text of the active terminal (the reference reads gnome-terminal over AT-SPI; the session's
    xterms log their output to a file named by their pid)."""
    env = {**os.environ, "DISPLAY": display}
    done = subprocess.run(["xdotool", "getactivewindow", "getwindowpid"], capture_output=True, text=True,
                          timeout=10, env=env)
    pid = done.stdout.strip()
    path = os.path.join(TERMINAL_LOG_DIR, f"{pid}.log")
    if done.returncode != 0 or not pid.isdigit() or not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "")


def cursor_position(display):
    out = subprocess.run(["xdotool", "getmouselocation", "--shell"], capture_output=True, text=True, timeout=10,
                         env={**os.environ, "DISPLAY": display}).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return [int(values.get("X", 0)), int(values.get("Y", 0))]


# --- HTTP ------------------------------------------------------------------------------------


def _multipart_fields(content_type, body):
    """{name: bytes} of a multipart/form-data body (the `cgi` module is gone from newer Pythons)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    fields = {}
    for part in message.iter_parts() if message.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[name] = part.get_payload(decode=True) or b""
    return fields


class DesktopRequestHandler(BaseHTTPRequestHandler):
    server_version = "rla-desktop/1"
    protocol_version = "HTTP/1.0"

    # -- plumbing
    def log_message(self, format, *args):   # noqa: A002 (the base class's name)
        pass

    def _send(self, status, body, content_type=None):
        if isinstance(body, (dict, list)):
            body, content_type = json.dumps(body).encode(), "application/json"
        elif isinstance(body, str):
            body, content_type = body.encode(), content_type or "text/html; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", content_type or "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            raise ValueError("request too large")
        return self.rfile.read(length) if length else b""

    def _json(self):
        body = self._body()
        data = json.loads(body) if body else {}
        if not isinstance(data, dict):
            raise ValueError("the request body must be a JSON object")
        return data

    def _form(self):
        content_type = self.headers.get("Content-Type", "")
        body = self._body()
        if content_type.startswith("multipart/form-data"):
            return _multipart_fields(content_type, body)
        return {k: v[0].encode() for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}

    def _handle(self, routes):
        path = urllib.parse.urlsplit(self.path).path
        route = routes.get(path)
        if route is None:
            self._send(404, {"status": "error", "message": f"no route {path}"})
            return
        try:
            result = route(self)
        except Exception as error:   # a bad request must never take the server down
            result = 500, {"status": "error", "message": f"{type(error).__name__}: {error}"}
        self._send(*result)

    def do_GET(self):   # noqa: N802 (http.server's naming)
        self._handle(GET_ROUTES)

    def do_POST(self):   # noqa: N802
        self._handle(POST_ROUTES)

    @property
    def display(self):
        return self.server.display


def _screenshot_route(handler):
    return 200, screenshot_png(handler.display), "image/png"


def _file_route(handler):
    file_path = handler._form().get("file_path", b"").decode()
    if not file_path:
        return 400, {"error": "file_path is required"}
    path = os.path.expandvars(os.path.expanduser(file_path))
    try:
        with open(path, "rb") as f:
            return 200, f.read(), "application/octet-stream"
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return 404, {"error": "File not found"}


def _upload_route(handler):
    form = handler._form()
    if "file_path" not in form or "file_data" not in form:
        return 400, {"error": "file_path and file_data are required"}
    path = os.path.expandvars(os.path.expanduser(form["file_path"].decode()))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(form["file_data"])
    return 200, f"File Uploaded: {len(form['file_data'])} bytes"


def _terminal_route(handler):
    return 200, {"output": terminal_output(handler.display)}


def _accessibility_route(handler):
    # optional in the protocol: this session runs no AT-SPI registry
    return 500, {"status": "error", "message": "no accessibility tree in this session"}


GET_ROUTES = {
    "/screenshot": _screenshot_route,
    "/terminal": _terminal_route,
    "/accessibility": _accessibility_route,
    "/platform": lambda h: (200, "Linux"),
    "/cursor_position": lambda h: (200, cursor_position(h.display)),
}
POST_ROUTES = {
    "/execute": lambda h: execute(h._json()),
    "/setup/execute": lambda h: execute(h._json()),
    "/setup/launch": lambda h: launch(h._json()),
    "/setup/upload": _upload_route,
    "/setup/open_file": lambda h: open_file(h._json()),
    "/setup/activate_window": lambda h: wmctrl_window("a", h._json()),
    "/setup/close_window": lambda h: wmctrl_window("c", h._json()),
    "/file": _file_route,
    "/list_directory": lambda h: list_directory(h._json()),
    "/screen_size": lambda h: (200, screen_size(h.display)),
    "/desktop_path": lambda h: (200, {"desktop_path": os.path.expanduser("~/Desktop")}),
}


class DesktopServer(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True

    def __init__(self, address, display, unix=False):
        self.display = display
        if unix:
            self.address_family = socket.AF_UNIX
        super().__init__(address, DesktopRequestHandler)

    def server_bind(self):
        if self.address_family == socket.AF_UNIX:
            if os.path.exists(self.server_address):
                os.unlink(self.server_address)
            socketserver.TCPServer.server_bind(self)   # HTTPServer's reads a (host, port) address
            self.server_name, self.server_port = "localhost", 0
        else:
            super().server_bind()

    def get_request(self):
        request, address = super().get_request()
        return request, address or ("unix", 0)   # the handler logs client_address[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--unix-socket", help="listen on this Unix socket")
    where.add_argument("--port", type=int, help="listen on this TCP port of --host")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--display", default=os.environ.get("DISPLAY", ":0"))
    args = parser.parse_args(argv)
    if args.unix_socket:
        server = DesktopServer(args.unix_socket, args.display, unix=True)
    else:
        server = DesktopServer((args.host, args.port), args.display)
    with server:
        server.serve_forever()


if __name__ == "__main__":
    main()
