"""The environment model's coding move (ALGORITHM.md 4.1, 4.3), minus the model itself.

The prompt anchors a harder/easier problem on the slot's root (raw) problem and shows the
active problem's ground-truth tests with the policy's pass rate on each. Rollouts do not keep
per-test verdicts (an Episode holds only the program and the "Passed k of n" feedback), so the
rates are measured again by running the episodes' programs in the sandbox.
`problem_candidate_from_outputs` turns the model's texts into the first well-formed stdio task.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Collection, Sequence

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.scenarios.coding.env import (
    DEFAULT_TIME_LIMIT_S,
    PASSED,
    run_stdio_verdicts,
    stdio_task,
    stdio_tests,
)
from rlanything_jax.scenarios.coding.parsers import parse_generated_task
from rlanything_jax.scenarios.coding.prompts import TestCases, task_generation_messages

log = logging.getLogger(__name__)
NO_TESTS = TestCases((), ())


def is_stdio_task(task: Task) -> bool:
    return task.kind == "coding" and task.payload.get("format") == "stdio"


def is_function_task(task: Task) -> bool:
    return task.kind == "coding" and task.payload.get("format") == "function"


def function_examples(test_code: str) -> TestCases:
    """A HumanEval problem's tests as the prompt shows tests: each `assert candidate(ARGS) == EXPECTED` of its
    `check` with literal arguments and result, as the pair ("ARGS", "EXPECTED") in Python source."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError:
        return NO_TESTS
    inputs, outputs = [], []
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.Assert) else None
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                and isinstance(test.left, ast.Call) and isinstance(test.left.func, ast.Name)
                and test.left.func.id == "candidate" and not test.left.keywords):
            continue
        if not all(_is_literal(node) for node in (*test.left.args, test.comparators[0])):
            continue  # e.g. `candidate(x, y) == x + y` in a loop: no example to show
        inputs.append(", ".join(ast.unparse(arg) for arg in test.left.args))
        outputs.append(ast.unparse(test.comparators[0]))
    return TestCases.of(inputs, outputs)


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def task_tests(task: Task) -> TestCases:
    """The ground-truth tests a prompt shows: a stdio problem's pairs, a function problem's asserts."""
    if is_function_task(task):
        return function_examples(task.payload["test"])
    return TestCases.of(task.payload["test_input"], task.payload["test_output"])


def task_question(task: Task) -> str:
    """The problem statement: a stdio problem's question, a function problem's signature and docstring."""
    return task.payload["prompt"] if is_function_task(task) else task.payload["question"]


# ---------------------------------------------------------------- the policy's pass rates


def policy_programs(episodes: Sequence[Episode], task_id: str) -> list[str]:
    """The program of every played rollout of `task_id` (a coding episode has one step)."""
    return [e.steps[0].action for e in episodes if e.task.task_id == task_id and e.env_error is None and e.steps]


def pass_rates_from_verdicts(verdicts: Sequence[Sequence[str]], num_tests: int) -> tuple[float, ...]:
    """Fraction of programs passing each test, from verdicts [num_programs][num_tests]; () without programs."""
    if not verdicts:
        return ()
    return tuple(sum(row[i] == PASSED for row in verdicts) / len(verdicts) for i in range(num_tests))


def measured_pass_rates(task: Task, episodes: Sequence[Episode], max_workers: int | None = None,
                        **execute_kwargs) -> tuple[float, ...]:
    """The policy's pass rate on each of the task's ground-truth tests, re-run in the sandbox."""
    programs = policy_programs(episodes, task.task_id)
    tests = stdio_tests(task) if is_stdio_task(task) else ()  # a function problem's asserts: no verdicts each
    if not programs or not tests:
        return ()
    time_limit_s = float(task.payload.get("test_time_limit", DEFAULT_TIME_LIMIT_S))
    verdicts = run_stdio_verdicts(programs, tests, time_limit_s, max_workers, **execute_kwargs)
    return pass_rates_from_verdicts(verdicts, len(tests))


# ---------------------------------------------------------------- prompt


def problem_prompt(raw: Task, active: Task, direction: str, pass_rates: Sequence[float],
                   synthetic_tests: TestCases = NO_TESTS, num_tests: int = 4) -> list[Message]:
    """The curator prompt: root problem and tests as the anchor, the active problem, its tests' pass rates.
    A function (HumanEval) problem shows its signature and docstring and its asserts; the new problem is
    a stdio one either way (the reference's generator writes stdio problems).

    The reward model's synthetic tests are not kept by the loop yet, so callers pass none by default.
    """
    current = task_tests(active)
    rates = tuple(pass_rates) if len(pass_rates) == len(current.inputs) else ()
    current = TestCases.of(current.inputs, current.outputs, rates)
    return task_generation_messages(direction, task_question(raw), task_tests(raw), task_question(active),
                                    current, synthetic_tests, num_tests=num_tests)


# ---------------------------------------------------------------- answers -> task


def _same_problem(task: Task, question: str, inputs: Sequence[str], outputs: Sequence[str]) -> bool:
    p = task.payload
    return (task_question(task).strip() == question.strip() and list(p.get("test_input", ())) == list(inputs)
            and list(p.get("test_output", ())) == list(outputs))


def generated_task_id(raw: Task, question: str, inputs: Sequence[str], outputs: Sequence[str]) -> str:
    """Stable and unique: the raw task's id and a digest of the problem and its tests."""
    digest = hashlib.sha1(json.dumps([question, list(inputs), list(outputs)]).encode()).hexdigest()[:12]
    return f"{raw.task_id}/gen-{digest}"


def problem_candidate_from_outputs(raw: Task, texts: Sequence[str | None], min_tests: int = 4,
                                   max_tests: int | None = None,
                                   exclude_ids: Collection[str] = ()) -> tuple[Task | None, Counter]:
    """The first text that parses into a problem with >= `min_tests` paired tests, as a stdio task
    (its first `max_tests` tests; the time limit is the raw task's, never the model's), and counts:
    "parse/<status>", "parsed"/"unparseable" ("not_generated" for None), "rejected/unchanged" (the raw problem again),
    "rejected/same_as_active", "accepted", "not_tried" for texts after the accepted one."""
    counts: Counter = Counter()
    candidate = None
    for text in texts:
        if candidate is not None:
            counts["not_tried"] += 1
            continue
        if text is None:  # the prompt did not fit the sampler's cache
            counts["not_generated"] += 1
            continue
        parsed = parse_generated_task(text, min_tests=min_tests)
        counts[f"parse/{parsed.status}"] += 1
        if not parsed.ok or parsed.task is None:
            counts["unparseable"] += 1
            continue
        counts["parsed"] += 1
        problem = parsed.task
        inputs, outputs = list(problem.test_inputs[:max_tests]), list(problem.test_outputs[:max_tests])
        if _same_problem(raw, problem.question, inputs, outputs):
            counts["rejected/unchanged"] += 1
            continue
        task_id = generated_task_id(raw, problem.question, inputs, outputs)
        if task_id in exclude_ids:
            counts["rejected/same_as_active"] += 1
            continue
        record = {"question": problem.question, "test_method": "stdio", "test_input": inputs,
                  "test_output": outputs,
                  "test_time_limit": raw.payload.get("test_time_limit", DEFAULT_TIME_LIMIT_S)}
        candidate = stdio_task(record, task_id)
        counts["accepted"] += 1
    return candidate, counts
