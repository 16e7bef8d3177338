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


def test_readme_links_and_named_files_exist_in_the_repository():
    """A clone has only the repository: every relative link and every file the README names must be in it."""
    text = (ROOT / "README.md").read_text()
    links = [target.split("#")[0] for target in re.findall(r"\]\(([^)]+)\)", text) if "://" not in target]
    assert links and all(not link.startswith("..") and (ROOT / link).exists() for link in links), links
    named = set(re.findall(r"`((?:tests|docs|configs|scripts|bench)/[\w./-]+\.(?:py|md|sh))", text))
    assert named and [path for path in named if not (ROOT / path).exists()] == []
