"""Prompts of the coding scenario, as chat messages (ALGORITHM.md 3.4, 4.3, 5.3).

The policy writes a stdin/stdout Python program, the reward model writes one unit
test, and the environment model writes a harder or easier problem with its tests.
Wording follows the reference implementation; parsers are in `parsers.py`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.curriculum.adaptation import DIRECTIONS

POLICY_SYSTEM = "You are a helpful assistant help user solve problems."
_POLICY_INSTRUCTION = ("You need to think first then write python script. "
                       "You should use input() to input and print() to output in your script. ")
# Evaluation adds this, so that a program does not just print the sample output.
_EVAL_INSTRUCTION = ("Your code should output the results based on the input read in, "
                     "rather than generating the given test example. ")


def coding_policy_messages(problem: str, for_eval: bool = False) -> list[Message]:
    instruction = _POLICY_INSTRUCTION + (_EVAL_INSTRUCTION if for_eval else "")
    return [{"role": "system", "content": POLICY_SYSTEM},
            {"role": "user", "content": f"{instruction}This is the problem:\n{problem}"}]


UNIT_TEST_SYSTEM = ("You are a rigorous unit-test designer for coding problems.\n"
                    "You must produce exactly ONE new test example that is correct and discriminative.")

_UNIT_TEST_INSTRUCTIONS = """\
You need to provide a new test example. A good test example should be completely accurate and conform to the \
problem\u2019s format requirements, while also possessing enough discriminative power to distinguish correct code \
from incorrect code.

Before providing a test example, you must think carefully and reason step by step to derive an input and output \
you are very confident are correct. For example, start by designing an input you can reliably handle, then compute \
the output step by step. If you're unsure about the output, revise or re-design the input to ensure accuracy. \
Directly providing input/output pairs without this process is discouraged, as it often results in low accuracy.

Finally, after completing these previous thinking and derivation steps (you should not write the final test \
example unless you have gone through these steps very thoroughly), you MUST put your final test example in the \
following format:

**Test Input:**
```<put the EXACT stdin content here>```

**Test Output:**
```<put the EXACT stdout content here>```

**Explanation:**
<brief explanation here>

IMPORTANT:
- Output must contain exactly one **Test Input:** block and one **Test Output:** block.
- Use triple backticks exactly as shown.
- The test must be self-contained and match the problem format.

Problem:
"""


def unit_test_messages(problem: str) -> list[Message]:
    """The reward model's prompt: design ONE discriminative stdin/stdout test for `problem`."""
    return [{"role": "system", "content": UNIT_TEST_SYSTEM},
            {"role": "user", "content": _UNIT_TEST_INSTRUCTIONS + problem}]


# ---------------------------------------------------------------- compact style (small scratch models)

# A model built from scratch by the run has no use for the reference's guidance and pays for every prompt
# token on a CPU: the compact prompts are the problem under a one-line instruction (a tenth of the reference's
# unit-test prompt). The reward model still answers in the **Test Input:** / **Test Output:**
# format that `parsers.parse_unit_test` reads.
COMPACT_POLICY_INSTRUCTION = "Write a Python program."
COMPACT_UNIT_TEST_INSTRUCTION = "Write a unit test."


def compact_policy_messages(problem: str) -> list[Message]:
    return [{"role": "user", "content": f"{COMPACT_POLICY_INSTRUCTION}\n{problem}"}]


def compact_unit_test_messages(problem: str) -> list[Message]:
    return [{"role": "user", "content": f"{COMPACT_UNIT_TEST_INSTRUCTION}\n{problem}"}]


# ---------------------------------------------------------------- environment model: new problem


@dataclasses.dataclass(frozen=True)
class TestCases:
    """Paired stdin/stdout tests, with the current policy's pass rate of each when known."""

    __test__ = False  # not a pytest class, despite the name

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    pass_rates: tuple[float, ...] = ()

    @classmethod
    def of(cls, inputs: Sequence[object], outputs: Sequence[object],
           pass_rates: Sequence[float] = ()) -> TestCases:
        return cls(tuple("" if x is None else str(x) for x in inputs),
                   tuple("" if x is None else str(x) for x in outputs),
                   tuple(float(r) for r in pass_rates))

    def shown(self, max_chars: int) -> TestCases:
        """The tests a prompt shows: pairs with an empty side or a side over max_chars are dropped,
        with their pass rates (the reference dropped tests but not their rates, misaligning them)."""
        kept = [i for i in range(min(len(self.inputs), len(self.outputs)))
                if self.inputs[i] and self.outputs[i]
                and len(self.inputs[i]) <= max_chars and len(self.outputs[i]) <= max_chars]
        rates = tuple(self.pass_rates[i] for i in kept if i < len(self.pass_rates))
        return TestCases(tuple(self.inputs[i] for i in kept), tuple(self.outputs[i] for i in kept),
                         rates if len(rates) == len(kept) else ())


def _tests_json(tests: TestCases) -> str:
    rows = []
    for i, (test_input, test_output) in enumerate(zip(tests.inputs, tests.outputs)):
        row: dict[str, object] = {"idx": i}
        if tests.pass_rates:  # the root problem's tests have none; the reference printed 0.0
            row["pass_rate"] = round(tests.pass_rates[i], 4)
        row.update(test_input=test_input, test_output=test_output)
        rows.append(row)
    return json.dumps(rows, ensure_ascii=False, indent=2)


def _task_generator_system(num_tests: int) -> str:
    return (
        "You are a coding dataset curator. Generate ONE new coding problem and its ground-truth unit tests.\n\n"
        "Return ONLY a JSON object with EXACT keys:\n"
        "{\n"
        '  "question": "...",\n'
        '  "test_method": "stdio",\n'
        '  "test_time_limit": 4,\n'
        '  "test_input": ["...", "...", ...],\n'
        '  "test_output": ["...", "...", ...]\n'
        "}\n\n"
        "IMPORTANT:\n"
        f"- test_input and test_output must be lists of the SAME length (>= {num_tests}).\n"
        "- Each test_input is the exact stdin content; each test_output is the exact expected stdout content.\n"
        "- Output JSON only. No extra text."
    )


def task_generation_messages(direction: str, root_question: str, root_tests: TestCases,
                             current_question: str, current_tests: TestCases, synthetic_tests: TestCases,
                             num_tests: int = 4, max_test_chars: int = 100) -> list[Message]:
    """Asks the env model for a harder/easier problem anchored on the slot's root problem.

    `current_tests` are the active problem's ground-truth tests and `synthetic_tests`
    the reward model's, both with the policy's pass rates; tests with a side longer
    than `max_test_chars` are left out of the prompt.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    root, current, synthetic = (t.shown(max_test_chars) for t in (root_tests, current_tests, synthetic_tests))
    user = (
        f"Goal: make the new problem {direction}.\n\n"
        "CRITICAL ANCHOR (do NOT drift away):\n"
        "The new problem MUST stay close to the ORIGINAL (root) problem in topic, core skill, "
        "input/output format style, and constraints.\n"
        "You may only adjust difficulty in a controlled way. Do NOT switch to a different domain/task type.\n\n"
        f"[ORIGINAL ROOT PROBLEM]\n{(root_question or current_question).strip()}\n\n"
        f"[ORIGINAL ROOT UNIT TESTS (reference; truncated)]\n{_tests_json(root)}\n\n"
        f"[CURRENT ACTIVE PROBLEM]\n{current_question.strip()}\n\n"
        "Reference unit tests (ground truth for current active; truncated):\n"
        f"- test_input examples:\n{json.dumps(list(current.inputs), ensure_ascii=False)}\n"
        f"- test_output examples:\n{json.dumps(list(current.outputs), ensure_ascii=False)}\n\n"
        "Policy performance on each unit test (pass_rate over current policy code samples):\n"
        f"Ground-truth unit tests:\n{_tests_json(current)}\n\n"
        f"Synthetic unit tests (may not be accurate):\n{_tests_json(synthetic)}\n\n"
        "Constraints:\n"
        "- Keep similar general topic/skill to the ORIGINAL ROOT problem.\n"
        "- The new problem must be self-contained and unambiguous.\n"
        f'- Provide at least {num_tests} ground-truth tests in "test_input"/"test_output".'
    )
    return [{"role": "system", "content": _task_generator_system(num_tests)},
            {"role": "user", "content": user}]
