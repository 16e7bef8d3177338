"""docs/metrics.md stays in step with the metric keys: every key the code writes (collected from the source)
and every key a smoke run logs matches a documented key or pattern, and every documented key or pattern
names a key the code still writes."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlanything_jax"
DOC = ROOT / "docs" / "metrics.md"
KEY = re.compile(r"[a-z<][a-z0-9_<>.]*(/[a-z0-9_<>.]+)+")   # `<stage or role>/<name>`, `<...>` a placeholder
# Files whose `a/b` strings are not step metrics: the environment runner's own counters, file paths, task ids,
# and the rewrite outcome counts that the generators log under their own prefix (`alfworld/goal/<outcome>`).
NOT_METRICS = {"agents/envs/runner.py", "scenarios/osworld/task_lists.py", "scenarios/osworld/coverage.py",
               "scenarios/osworld/session_files.py", "scenarios/alfworld/goal_rewrite.py",
               "scenarios/coding/problems.py"}
# Task generators count into their own `metrics`, which the loop logs as `curriculum/generator/<key>`.
GENERATORS = re.compile(r"(agents/curriculum|scenarios/\w+)/generators\.py")


def _placeholder(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return f"<{node.id}>"
    if isinstance(node, ast.Attribute):
        return f"<{node.attr}>"
    return "<value>"


def _render(node: ast.expr | None) -> str | None:
    """A string constant, or an f-string with each formatted value as `<name>`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else _placeholder(v.value) for v in node.values)
    return None


def _prefix_of(name: str) -> str:
    return "curriculum/generator/" if GENERATORS.fullmatch(name) else ""


STAGE_CALLS = ("train", "sample_each")   # calls whose last argument names the stage


def _stage_names(tree: ast.AST, name: str) -> set[str]:
    """The stage names a module hands to code that names keys `<prefix>/...` or `<tag>/...`: a string passed
    as the last positional argument of a stage's call (`train(..., seed, "policy")`, `sample_each(..., config,
    "judge")`), as `tag=` or `prefix=`, or a `tag`/`prefix` parameter's default."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if callee in STAGE_CALLS and node.args and isinstance(node.args[-1], ast.Constant):
                found.add(node.args[-1].value)
            found.update(k.value.value for k in node.keywords
                         if k.arg == "prefix" and isinstance(k.value, ast.Constant))
            found.update(k.value.value for k in node.keywords
                         if k.arg == "tag" and isinstance(k.value, ast.Constant))
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            defaults = list(zip(positional[len(positional) - len(node.defaults):], node.defaults))
            defaults += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            found.update(d.value for a, d in defaults if a.arg in ("tag", "prefix") and isinstance(d, ast.Constant))
    return {_prefix_of(name) + value for value in found if isinstance(value, str) and re.fullmatch(r"[a-z_]+", value)}


def code_keys() -> tuple[dict[str, set[str]], set[str]]:
    """Every metric key the package writes -> the files that write it (the keys stored into a dict,
    `metrics[key] += ...`, `out[key] = ...`, dict literals' keys and dict comprehensions' keys), and the
    stage names that keys starting `<prefix>` or `<tag>` take (`_stage_names`)."""
    keys: dict[str, set[str]] = {}
    stages: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name in NOT_METRICS:
            continue
        tree = ast.parse(path.read_text())
        stages |= _stage_names(tree, name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                candidates = [node.slice]
            elif isinstance(node, ast.Dict):
                candidates = [k for k in node.keys if k is not None]
            elif isinstance(node, ast.DictComp):
                candidates = [node.key]
            else:
                continue
            for candidate in candidates:
                key = _render(candidate)
                if key is not None and KEY.fullmatch(key):
                    keys.setdefault(_prefix_of(name) + key, set()).add(name)
    return keys, stages


def written_keys() -> set[str]:
    """The code's keys with a leading `<prefix>` or `<tag>` replaced by each stage name (a superset of the
    keys written, but each named after a stage the package has)."""
    keys, stages = code_keys()
    out = set()
    for key in keys:
        leading = re.match(r"<(prefix|tag)>", key)
        out.update([stage + key[leading.end():] for stage in stages] if leading else [key])
    return out


def documented_keys() -> list[str]:
    """The first cell of every table row of docs/metrics.md."""
    rows = re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), flags=re.MULTILINE)
    assert rows, DOC
    return rows


def _pattern(key: str) -> re.Pattern:
    """A key as a regular expression: each `<...>` stands for any non-empty text."""
    return re.compile(".+".join(re.escape(part) for part in re.split(r"<[^>]*>", key)))


def matches(key: str, documented: str) -> bool:
    """Whether `key` (a logged key, or a code key with placeholders) and `documented` can name the same key."""
    return bool(_pattern(documented).fullmatch(key) or _pattern(key).fullmatch(documented))


def test_every_key_the_code_writes_is_documented():
    documented = documented_keys()
    keys, stages = code_keys()
    assert {"rollout/tokens", "<prefix>/updates"} <= set(keys)   # the collection sees the code
    assert {"policy", "reward_model", "judge", "unit_tests", "curriculum/generator/env_model"} <= stages
    missing = {key: sorted(files) for key, files in keys.items() if not any(matches(key, d) for d in documented)}
    assert not missing, f"keys written but not in docs/metrics.md: {missing}"


def test_every_documented_key_is_written_by_the_code():
    keys = written_keys()
    stale = [d for d in documented_keys() if not any(matches(key, d) for key in keys)]
    assert not stale, f"docs/metrics.md names keys no code writes: {stale}"


def test_documented_keys_follow_the_scheme_once_each():
    documented = documented_keys()
    assert len(documented) == len(set(documented))
    assert all(KEY.fullmatch(d) for d in documented), [d for d in documented if not KEY.fullmatch(d)]


@pytest.mark.slow   # two smoke runs, about 30 s each on a 2-core CPU
@pytest.mark.parametrize("config", ["configs/default.py:smoke", "configs/coding.py:smoke"])
def test_every_key_a_smoke_run_logs_is_documented(tmp_path, config):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run([sys.executable, "-m", "rlanything_jax.main", f"--config={config}",
                    f"--config.workdir={tmp_path}"], cwd=ROOT, env=env, check=True, timeout=900,
                   stdout=subprocess.DEVNULL)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    logged = {key for line in lines for key in line} - {"step"}
    assert "rollout/success_rate" in logged
    documented = documented_keys()
    missing = sorted(key for key in logged if not any(matches(key, d) for d in documented))
    assert not missing, f"{config}: keys logged but not in docs/metrics.md: {missing}"
