"""Local desktop fixtures. Tests that need a desktop fail in CI (`CI` set: scripts/setup.sh installed
the packages, so a missing one is a broken set-up) and skip elsewhere, naming what is missing."""

import os
import shutil
import tempfile

import pytest

from rlanything_jax.scenarios.osworld.field_evaluators import PACKAGE_HINT, field_evaluators
from rlanything_jax.scenarios.osworld.local_desktop import DesktopOptions, LocalDesktop, missing_programs


def require_desktop_packages() -> None:
    missing = missing_programs()
    if missing:
        message = (f"local desktop sessions need {', '.join(missing)}; `bash scripts/setup.sh` installs the "
                   "Debian packages")
        if os.environ.get("CI"):
            pytest.fail("CI must run the desktop tests, but: " + message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def field():
    """OSWorld's metrics and getters (desktop-env): skipped where not installed, a failure in CI."""
    loaded = field_evaluators()
    if loaded is None:
        if os.environ.get("CI"):
            pytest.fail("CI must score with OSWorld's evaluators: " + PACKAGE_HINT)
        pytest.skip("OSWorld's evaluators are not installed: " + PACKAGE_HINT)
    return loaded


@pytest.fixture(scope="module")
def desktop_root():
    """A runtime root of the tests' own (world-traversable: the sessions run as other uids)."""
    root = tempfile.mkdtemp(prefix="rla-desktops-test-")
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def desktop(desktop_root):
    require_desktop_packages()
    with LocalDesktop(DesktopOptions(runtime_root=desktop_root)) as session:
        yield session


def open_terminal(client, timeout_s: float = 15.0) -> None:
    """Ctrl+Alt+T, then wait until the terminal is the active window (slow on a loaded machine)."""
    import time

    assert client.execute_pyautogui("pyautogui.hotkey('ctrl', 'alt', 't')")["returncode"] == 0
    deadline = time.monotonic() + timeout_s
    while client.execute(["xdotool", "getactivewindow", "getwindowname"])["output"].strip() != "Terminal":
        assert time.monotonic() < deadline, "no active Terminal window after Ctrl+Alt+T"
        time.sleep(0.1)
