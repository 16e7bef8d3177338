"""OSWorld's Chrome setup steps over a real Chromium's DevTools port: `chrome_open_tabs` opens the task's
tabs and closes the start tab, `chrome_close_tabs` closes the named ones; what they leave is read back by
OSWorld's own `open_tabs_info` getter (Playwright over CDP) where desktop-env is installed."""

import os
import shutil
import socket
import subprocess

import pytest

from rlanything_jax.scenarios.osworld import devtools
from rlanything_jax.scenarios.osworld.client import OsWorldClient
from rlanything_jax.scenarios.osworld.endpoint import VmEndpoint
from rlanything_jax.scenarios.osworld.evaluator import getter_function
from rlanything_jax.scenarios.osworld.field_evaluators import field_evaluators
from rlanything_jax.scenarios.osworld.setup_steps import SetupContext, SetupError, run_setup

PAGES = ["data:text/html,<title>One</title>", "data:text/html,<title>Two</title>",
         "data:text/html,<title>Three</title>"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture()
def chrome(tmp_path):
    binary = shutil.which("chromium") or shutil.which("google-chrome")
    if binary is None:
        message = "Chrome setup steps need chromium; `bash scripts/setup.sh --test` installs it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    port = _free_port()
    process = subprocess.Popen([binary, "--headless=new", "--no-sandbox", f"--remote-debugging-port={port}",
                                f"--user-data-dir={tmp_path / 'profile'}", "--no-first-run", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = VmEndpoint.parse(f"127.0.0.1:5000:{port}:8006:8080")
    try:
        devtools.wait_for_port(endpoint, tries=100, interval_s=0.2)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=20)


def _open_urls(endpoint, context):
    if field_evaluators() is not None:   # OSWorld's getter, in the order Chrome made the tabs
        return [tab["url"] for tab in getter_function("open_tabs_info")(context, {})]
    return [tab["url"] for tab in reversed(devtools.page_tabs(endpoint))]


def test_chrome_steps_open_and_close_tabs_as_osworlds_getter_sees_them(chrome, tmp_path):
    context = SetupContext(OsWorldClient(chrome, retries=1), "chrome-task", str(tmp_path / "cache"))
    run_setup([{"type": "chrome_open_tabs", "parameters": {"urls_to_open": PAGES}}], context)
    assert sorted(_open_urls(chrome, context)) == sorted(PAGES)     # about:blank, the start tab, is gone
    run_setup([{"type": "chrome_close_tabs", "parameters": {"urls_to_close": [PAGES[1]]}}], context)
    assert sorted(_open_urls(chrome, context)) == sorted([PAGES[0], PAGES[2]])


def test_chrome_steps_fail_with_a_reason_where_there_is_no_devtools_port(tmp_path):
    local = SetupContext(OsWorldClient("unix:/nonexistent/socket", retries=1), "t", str(tmp_path))
    with pytest.raises(SetupError, match="chrome_open_tabs.*no Chrome DevTools port"):
        run_setup([{"type": "chrome_open_tabs", "parameters": {"urls_to_open": PAGES}}], local)
    closed = VmEndpoint.parse(f"127.0.0.1:5000:{_free_port()}:8006:8080")
    with pytest.raises(devtools.DevToolsError, match="127.0.0.1"):
        devtools.open_tabs(closed, PAGES, tries=2, interval_s=0.1)


def test_tab_addresses_match_as_osworld_compares_them():
    assert devtools.same_url("https://www.example.com/a/", "https://example.com/a")
    assert not devtools.same_url("https://example.com/a?x=1", "https://example.com/a?x=2")
