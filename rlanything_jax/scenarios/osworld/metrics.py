"""Evaluator metrics with the reference's names, arguments and scores (OSWorld's
`desktop_env/evaluators/metrics`), for the os domain and this project's tasks.

`result` comes from the VM, which the agent controls: metrics parse it defensively (no `eval`)
and a value of the wrong type scores 0 instead of raising.
"""

from __future__ import annotations

import ast
import difflib
import re
from typing import Any


def exact_match(result: Any, rules: dict[str, Any]) -> float:
    return float(result == rules["expected"])


def match_in_list(result: Any, rules: dict[str, Any]) -> float:
    """1 when the result is one of the expected values."""
    try:
        return float(result in rules["expected"])
    except TypeError:
        return 0.0


def is_in_list(result: Any, rules: dict[str, Any]) -> float:
    """1 when the expected value is in the result (a list, or a string's substring)."""
    try:
        return float(rules["expected"] in result)
    except TypeError:
        return 0.0


def check_include_exclude(result: Any, rules: dict[str, list[str]]) -> float:
    if not isinstance(result, str):
        return 0.0
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return float(all(r in result for r in include) and all(r not in result for r in exclude))


def literal_match(result: Any, expected: Any, **options: Any) -> float:
    ignore_case = options.get("ignore_case", False)
    normalise = (lambda v: str(v).lower()) if ignore_case else str
    if options.get("type", "str") == "list":
        if not isinstance(result, (list, tuple)) or not isinstance(expected, (list, tuple)):
            return 0.0
        return float([normalise(v) for v in result] == [normalise(v) for v in expected])
    return float(normalise(result) == normalise(expected))


def _read_text(path: Any) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def compare_text_file(actual: Any, expected: Any, **options: Any) -> float:
    """Two files' texts equal, optionally ignoring blanks (runs of whitespace) and case."""
    actual_text, expected_text = _read_text(actual), _read_text(expected)
    if actual_text is None or expected_text is None:
        return 0.0
    if options.get("ignore_blanks", False):
        actual_text = re.sub(r"\s+", " ", actual_text.replace("\t", " ").replace("\n", " ")).strip()
        expected_text = re.sub(r"\s+", " ", expected_text.replace("\t", " ").replace("\n", " ")).strip()
    if options.get("ignore_case", False):
        actual_text, expected_text = actual_text.lower(), expected_text.lower()
    return float(actual_text == expected_text)


def diff_text_file(result: Any, expect: Any) -> float:
    """The line-level similarity ratio of two text files (0 when the result is missing)."""
    result_text, expected_text = _read_text(result), _read_text(expect)
    if result_text is None or expected_text is None:
        return 0.0
    return difflib.SequenceMatcher(a=result_text.splitlines(), b=expected_text.splitlines()).ratio()


def file_contains(file_path: Any, config: dict[str, Any]) -> float:
    text = _read_text(file_path)
    return float(text is not None and all(str(item) in text for item in config["expected"]))


def compare_terminal_and_txt(txt_file_path: Any, terminal_output: Any) -> float:
    text = _read_text(txt_file_path)
    return float(bool(text) and bool(terminal_output) and terminal_output == text)


def check_gnome_favorite_apps(apps_str: Any, rule: dict[str, Any]) -> float:
    """gsettings' `['a.desktop', 'b.desktop']` names the same set as the rule (parsed, never evaluated)."""
    try:
        apps = ast.literal_eval(str(apps_str).strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return 0.0
    expected = rule["expected"]
    if not isinstance(apps, (list, tuple)) or len(apps) != len(expected):
        return 0.0
    try:
        return float(set(apps) == set(expected))
    except TypeError:
        return 0.0


def check_text_enlarged(scaling_factor_str: Any) -> float:
    try:
        return float(float(str(scaling_factor_str).strip()) > 1.0)
    except ValueError:
        return 0.0


def check_moved_jpgs(directory_list: Any, rule: dict[str, Any]) -> float:
    if not isinstance(directory_list, dict) or not isinstance(directory_list.get("children"), list):
        return 0.0
    moved = [node.get("name") for node in directory_list["children"] if isinstance(node, dict)]
    expected = rule["expected"]
    return float(len(moved) == len(expected) and set(moved) == set(expected))


def is_in_vm_clickboard(config: dict[str, Any], terminal_output: Any) -> float:
    if not isinstance(terminal_output, str):
        return 0.0
    expected = config["expected"]
    if not isinstance(expected, list):
        return float(str(expected) in terminal_output)
    return float(all(str(item) in terminal_output for item in expected))


def is_utc_0(timedatectl_output: Any) -> float:
    lines = str(timedatectl_output or "").split("\n")
    return float(len(lines) > 3 and lines[3].endswith("+0000)"))


METRICS = {function.__name__: function for function in (
    exact_match, match_in_list, is_in_list, check_include_exclude, literal_match, compare_text_file,
    diff_text_file, file_contains, compare_terminal_and_txt, check_gnome_favorite_apps, check_text_enlarged,
    check_moved_jpgs, is_in_vm_clickboard, is_utc_0)}
