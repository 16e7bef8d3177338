"""Coding tasks, the unit-test matrix and the coding environment, all run in the real sandbox."""

import concurrent.futures
import json

import numpy as np
import pytest

from rlanything_jax.agents.envs import sandbox
from rlanything_jax.agents.envs.base import Task, make_env
from rlanything_jax.scenarios.coding import env as coding

pytestmark = pytest.mark.filterwarnings("ignore:UNTRUSTED CODE SANDBOX IS WEAK:RuntimeWarning")

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUBTRACT = "a, b = map(int, input().split())\nprint(a - b)\n"
CRASH = "raise RuntimeError('no')\n"
ADD_TESTS = [("1 2\n", "3\n"), ("5 5\n", "10\n"), ("0 0\n", "0\n")]


@pytest.fixture(scope="module")
def humaneval():
    return coding.humaneval_tasks()


def _canonical(task: Task) -> str:
    return task.payload["prompt"] + task.payload["canonical_solution"]


# --- tasks ------------------------------------------------------------------------------


def test_humaneval_tasks_are_all_164_problems(humaneval):
    assert len(humaneval) == 164
    assert len({t.task_id for t in humaneval}) == 164
    first = humaneval[0]
    assert first.task_id == "HumanEval/0" and first.kind == "coding"
    assert first.goal == first.payload["prompt"] and "def has_close_elements" in first.goal
    json.dumps([t.payload for t in humaneval])


def test_stdio_tasks_load_from_json_and_jsonl(tmp_path):
    record = {"question": "Add two numbers.", "test_method": "stdio", "test_time_limit": 2,
              "test_input": [i for i, _ in ADD_TESTS], "test_output": [o for _, o in ADD_TESTS]}
    (tmp_path / "tasks.json").write_text(json.dumps([record, {**record, "task_id": "named"}]))
    (tmp_path / "tasks.jsonl").write_text(json.dumps(record) + "\n\n" + json.dumps(record) + "\n")
    from_json = coding.load_stdio_tasks(tmp_path / "tasks.json")
    from_jsonl = coding.load_stdio_tasks(tmp_path / "tasks.jsonl", max_tests=2)
    assert [t.task_id for t in from_json] == ["tasks/0", "named"]
    assert [t.task_id for t in from_jsonl] == ["tasks/0", "tasks/1"]
    assert coding.stdio_record(from_json[0]) == {**record, "test_time_limit": 2.0}
    assert len(coding.stdio_tests(from_jsonl[0])) == 2
    assert from_json[0].goal == "Add two numbers." and from_json[0].kind == "coding"
    with pytest.raises(ValueError):
        coding.stdio_task({**record, "test_output": ["3\n"]}, "bad")


def test_builtin_demo_tasks_are_solved_by_their_reference_solutions():
    tasks = coding.builtin_stdio_tasks()
    assert 3 <= len(tasks) <= 5
    for task in tasks:
        verdicts = coding.task_verdicts(task, task.payload["reference_solution"])
        assert verdicts == [coding.PASSED] * len(coding.stdio_tests(task)), task.task_id
        assert coding.PASSED not in coding.task_verdicts(task, "print('nope')")


# --- verdicts and the unit-test matrix --------------------------------------------------


def test_stdio_outputs_match_up_to_whitespace():
    spaced = "a, b = map(int, input().split())\nprint('', a + b, ' ', end='\\n\\n\\n')\n"
    assert coding.run_stdio_verdicts([spaced, ADD], [("1 2\n", "3")])[0] == [coding.PASSED]
    one_line = "print(' '.join('1 2 Fizz 4 Buzz'.split()))"
    assert coding.run_stdio_verdicts([one_line], [("5\n", "1\n2\nFizz\n4\nBuzz\n")]) == [[coding.PASSED]]
    assert coding.run_stdio_verdicts([one_line], [("5\n", "1 2 Fizz 4")]) == [["wrong_answer"]]


def test_unit_test_matrix_on_a_hand_built_case():
    programs = [ADD, SUBTRACT, CRASH, None, "   ", "while True: pass"]
    passes = coding.run_unit_tests(programs, ADD_TESTS, time_limit_s=1.0)
    expected = np.array([[True, True, True],
                         [False, False, True],    # a - b is right only for 0 0
                         [False, False, False],
                         [False, False, False],
                         [False, False, False],
                         [False, False, False]])
    assert passes.dtype == bool and passes.shape == (6, 3)
    np.testing.assert_array_equal(passes, expected)
    verdicts = coding.run_stdio_verdicts(programs, ADD_TESTS, time_limit_s=1.0)
    assert verdicts[1] == ["wrong_answer", "wrong_answer", "passed"]
    assert verdicts[2] == ["error"] * 3 and verdicts[3] == ["not_run"] * 3 and verdicts[5] == ["timeout"] * 3
    assert coding.run_unit_tests([], ADD_TESTS).shape == (0, 3)


def test_function_unit_test_matrix():
    checks = ["def check(candidate):\n    assert candidate(1, 2) == 3\n",
              "def check(candidate):\n    assert candidate(2, 2) == 4\n",
              "def check(candidate):\n    assert candidate(0, 5) == -5\n"]
    programs = ["def f(a, b):\n    return a + b\n", "def f(a, b):\n    return a * b\n", None]
    passes = coding.run_function_unit_tests(programs, checks, "f")
    np.testing.assert_array_equal(passes, [[True, True, False], [False, True, False], [False, False, False]])


# --- HumanEval --------------------------------------------------------------------------


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes(humaneval):
    def verdicts(task):
        return coding.task_verdicts(task, _canonical(task), max_workers=1)
    with concurrent.futures.ThreadPoolExecutor(sandbox.usable_cpus()) as pool:
        failures = [(t.task_id, v) for t, v in zip(humaneval, pool.map(verdicts, humaneval))
                    if v != [coding.PASSED]]
    assert failures == []


def test_wrong_humaneval_solution_fails_and_completions_are_accepted(humaneval):
    task = humaneval[0]
    wrong = "def has_close_elements(numbers, threshold):\n    return False\n"
    assert coding.task_verdicts(task, wrong) == ["error"]
    assert coding.task_verdicts(task, task.payload["canonical_solution"]) == [coding.PASSED]   # body only
    # a full definition without the prompt's `from typing import List` still runs
    annotated = "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n" + \
        task.payload["canonical_solution"]
    assert coding.task_verdicts(task, annotated) == [coding.PASSED]


# --- the environment --------------------------------------------------------------------


def test_coding_env_plays_one_step_episodes(humaneval):
    env = make_env("coding")
    assert isinstance(env, coding.CodingEnv)
    task = coding.builtin_stdio_tasks()[0]
    assert env.reset(task).text == task.goal
    result = env.step(task.payload["reference_solution"])
    n = len(coding.stdio_tests(task))
    assert result.done and result.won
    assert result.info == {"passed": n, "total": n, "statuses": ["passed"] * n, "pass_fraction": 1.0}
    assert result.graded_outcome == 1.0
    with pytest.raises(RuntimeError):
        env.step(ADD)

    env.reset(task)
    partial = env.step(SUBTRACT)
    assert partial.done and not partial.won
    assert 0 < partial.info["passed"] < n and partial.info["pass_fraction"] == partial.info["passed"] / n
    assert partial.info["statuses"].count("passed") == partial.info["passed"]
    assert partial.graded_outcome == 1 / 5   # the policy's reward: a - b is right only on "0 0" of 5 tests

    env.reset(humaneval[0])
    assert env.step(_canonical(humaneval[0])).won
    env.close()


def test_empty_program_fails_every_test_without_running(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("an empty program must not reach the sandbox")
    monkeypatch.setattr(sandbox, "execute_many", must_not_run)
    env = coding.CodingEnv()
    task = coding.builtin_stdio_tasks()[0]
    for program in (None, "", "  \n"):
        env.reset(task)
        result = env.step(program)
        assert result.done and not result.won
        assert result.info["passed"] == 0 and set(result.info["statuses"]) == {"not_run"}


def test_coding_env_rejects_other_task_kinds():
    with pytest.raises(ValueError):
        coding.CodingEnv().reset(Task("x", kind="alfworld", goal="put a mug"))
