"""Promises the repository makes to a newcomer: the README's commands are what CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    return [b.strip() for b in blocks[:2]]


def test_readme_starts_with_two_commands():
    text = (ROOT / "README.md").read_text()
    run, test = _readme_commands()
    assert text.index(run) < text.index(test) < text.index("## ")
    assert run.endswith("python -m rlanything_jax.main")
    assert "pytest" in test


def test_ci_runs_the_readme_test_command_and_fails_on_no_tests():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_commands()[1] in ci.splitlines()
    assert '"$status" -eq 5' in ci
