"""How the coding scenario talks to the models: one turn, the policy writes a program; the reward model
writes unit tests (ALGORITHM.md 3.4, 5.3).

Two prompt styles (the `tasks.prompt_style` option): the reference's (`CodingPrompts`, for instruct
models) and a compact one for small models built from scratch (`CompactCodingPrompts`: the problem
under a one-line instruction). Both parse programs and tests the same way and write the same answers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.reward_models.unit_tests import ParsedUnitTest
from rlanything_jax.agents.trajectory import Episode, ParsedAction
from rlanything_jax.scenarios.coding import env as coding_env
from rlanything_jax.scenarios.coding.parsers import parse_code_block, parse_unit_test
from rlanything_jax.scenarios.coding.prompts import (
    coding_policy_messages,
    compact_policy_messages,
    compact_unit_test_messages,
    unit_test_messages,
)


@dataclasses.dataclass(frozen=True)
class CodingPrompts:
    name: str = "coding"
    for_eval: bool = False
    sandbox_workers: int | None = None   # parallel sandboxed runs of unit tests (None: one per core)

    # ---------------------------------------------------------------- policy

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        return coding_policy_messages(observation.text, for_eval=self.for_eval)

    def turn_message(self, episode: Episode, observation: Observation) -> Message:
        raise RuntimeError("coding episodes end after one turn")

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction:
        extraction = parse_code_block(response_text)
        return ParsedAction(action=extraction.code or "", status=extraction.status)

    def answer_text(self, observation: Observation, action: str) -> str:
        """A program as the policy should write it: in a python code block."""
        del observation
        return f"```python\n{action.rstrip()}\n```"

    # ---------------------------------------------------------------- reward model: unit tests

    def unit_test_messages(self, task: Task) -> list[Message]:
        return unit_test_messages(task.goal)

    def parse_unit_test(self, text: str) -> ParsedUnitTest:
        test = parse_unit_test(text)
        return ParsedUnitTest(test.test_input, test.test_output, test.valid, test.status)

    def unit_test_text(self, stdin: str, expected_stdout: str) -> str:
        return f"**Test Input:**\n```\n{stdin.rstrip()}\n```\n\n**Test Output:**\n```\n{expected_stdout.rstrip()}\n```"

    def reference_solution(self, task: Task) -> str | None:
        """A known-correct program of a stdio task (a GT code for the unit-test reward), when it has one."""
        return task.payload.get("reference_solution") if task.payload.get("format") == "stdio" else None

    def ground_truth_tests(self, task: Task) -> list[tuple[str, str]]:
        return coding_env.stdio_tests(task) if task.payload.get("format") == "stdio" else []

    def run_tests(self, task: Task, programs: Sequence[str | None],
                  tests: Sequence[tuple[str, str]]) -> np.ndarray:
        time_limit_s = float(task.payload.get("test_time_limit", coding_env.DEFAULT_TIME_LIMIT_S))
        return coding_env.run_unit_tests(programs, tests, time_limit_s, self.sandbox_workers)


@dataclasses.dataclass(frozen=True)
class CompactCodingPrompts(CodingPrompts):
    """The compact style: the problem under a one-line instruction, for the policy and the reward model alike."""

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        return compact_policy_messages(observation.text)

    def unit_test_messages(self, task: Task) -> list[Message]:
        return compact_unit_test_messages(task.goal)


PROMPT_STYLES = {"reference": CodingPrompts, "compact": CompactCodingPrompts}
