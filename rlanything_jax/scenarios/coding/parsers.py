"""Parsers for the coding scenario: the policy's code, the reward model's unit test and
the environment model's new task (ALGORITHM.md 3.4, 4.3, 5.3).

Pure functions that never raise; each result has a `status` ("ok" or the fallback
that fired) for `parsers.ParseCounter`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from rlanything_jax.agents.parsers import as_text

# ---------------------------------------------------------------- coding: policy code


@dataclasses.dataclass(frozen=True)
class CodeExtraction:
    code: str    # "" when there is nothing to run
    status: str  # "ok" | "other_fence" (last block of another language) | "empty_code" | "no_code"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_PYTHON_TAGS = frozenset({"python", "python3", "py", "py3"})


def _fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(start, language tag, body) of each ``` block, fences paired in order; an unclosed last one is dropped."""
    fences = [m.start() for m in re.finditer("```", text)]
    blocks = []
    for open_at, close_at in zip(fences[0::2], fences[1::2]):
        inner = text[open_at + 3:close_at]
        head, newline, rest = inner.partition("\n")
        if newline:
            blocks.append((open_at, head.strip().lower(), rest))
        else:  # one-line block: "```python print(1)```"
            tag, _, body = inner.strip().partition(" ")
            tag = tag.lower()
            blocks.append((open_at, tag, body) if tag in _PYTHON_TAGS else (open_at, "", inner))
    return blocks


def parse_code_block(text: Any) -> CodeExtraction:
    """The last ```python block (python3/py accepted too), else the last fenced block of any language.

    The reference's regex reads "```python3" as code starting with "3"; tags are read as tags here.
    """
    blocks = _fenced_blocks(as_text(text))
    python = [body for _, tag, body in blocks if tag in _PYTHON_TAGS]
    if python:
        code = python[-1].strip()
        return CodeExtraction(code, "ok" if code else "empty_code")
    if blocks:
        code = blocks[-1][2].strip()
        return CodeExtraction(code, "other_fence" if code else "empty_code")
    return CodeExtraction("", "no_code")


# ---------------------------------------------------------------- coding: generated unit test


@dataclasses.dataclass(frozen=True)
class UnitTest:
    test_input: str   # stdin; "" unless valid
    test_output: str  # expected stdout; "" unless valid
    status: str  # "ok" | "plain_text" (unfenced) | "missing_input" | "missing_output" | "empty_input" | "empty_output"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def valid(self) -> bool:
        return self.status in ("ok", "plain_text")


_TEST_INPUT = re.compile(r"\*\*\s*Test Input\s*:?\s*\*\*\s*:?")
_TEST_OUTPUT = re.compile(r"\*\*\s*Test Output\s*:?\s*\*\*\s*:?")
_SECTION_END = re.compile(r"\*\*\s*(?:Explanation|Test Input)")
# Tags a model may put on a data fence; never plausible as a whole stdin line.
_DATA_TAGS = frozenset({"text", "plaintext", "txt", "stdin", "stdout"})


def _section_value(section: str) -> tuple[str, bool]:
    """(value, fenced): the section's first complete fenced block, else its plain text."""
    open_at = section.find("```")
    close_at = section.find("```", open_at + 3) if open_at >= 0 else -1
    if close_at < 0:
        return section.replace("\r\n", "\n").strip(), False
    inner = section[open_at + 3:close_at]
    head, newline, rest = inner.partition("\n")
    if newline and head.strip().lower() in _DATA_TAGS:
        inner = rest
    return inner.replace("\r\n", "\n").strip("\n"), True


def parse_unit_test(text: Any) -> UnitTest:
    """The last `**Test Input:**` block and the `**Test Output:**` block after it.

    Fenced blocks are read verbatim (outer newlines dropped, as in the reference), also
    after a lead-in line such as "Here is the input:";
    unfenced sections fall back to their stripped text ("plain_text"). Unlike the
    reference, input and output are taken from the same (last) example.
    """
    text = as_text(text)
    inputs = list(_TEST_INPUT.finditer(text))
    if not inputs:
        return UnitTest("", "", "missing_input")
    after_input = text[inputs[-1].end():]
    output_label = _TEST_OUTPUT.search(after_input)
    if output_label is None:
        return UnitTest("", "", "missing_output")
    output_section = after_input[output_label.end():]
    end = _SECTION_END.search(output_section)
    test_input, input_fenced = _section_value(after_input[:output_label.start()])
    test_output, output_fenced = _section_value(output_section[:end.start()] if end else output_section)
    if not test_input:
        return UnitTest("", "", "empty_input")
    if not test_output:
        return UnitTest("", "", "empty_output")
    return UnitTest(test_input, test_output, "ok" if input_fenced and output_fenced else "plain_text")


# ---------------------------------------------------------------- coding: generated task


@dataclasses.dataclass(frozen=True)
class GeneratedTask:
    question: str
    test_inputs: tuple[str, ...]
    test_outputs: tuple[str, ...]
    test_method: str = "stdio"


@dataclasses.dataclass(frozen=True)
class GeneratedTaskParse:
    task: GeneratedTask | None  # None unless ok
    status: str  # "ok" | "invalid_json" | "missing_question" | "tests_not_lists"
    #              | "bad_test_type" | "length_mismatch" | "too_few_tests"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_MAX_LINE_STARTS = 32


def _json_candidates(text: str) -> list[dict]:
    """Decoded JSON objects in text order: top-level `{...}` spans (string-aware) and fenced blocks."""
    spans: list[tuple[int, str]] = []
    depth, start, in_string, skip_at = 0, -1, False, -1
    for match in re.finditer(r'[{}"\\]', text):
        ch, at = match.group(), match.start()
        if at == skip_at:  # the character after a backslash inside a string
            continue
        if in_string:
            if ch == "\\":
                skip_at = at + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            if depth == 0:
                start = at
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, text[start:at + 1]))
    # A stray '{' or '"' in the reasoning can hide the answer from the scan above: also try
    # fenced blocks and the last objects that open a line (a bounded number of tries).
    spans.extend((at, body) for at, _, body in _fenced_blocks(text) if body.lstrip().startswith("{"))
    line_starts = [m.start(1) for m in re.finditer(r"(?m)^[ \t]*(\{)", text)][-_MAX_LINE_STARTS:]
    objects: list[tuple[int, dict]] = []
    for at, span in spans:
        try:
            obj = json.loads(span)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            objects.append((at, obj))
    decoder = json.JSONDecoder()
    for at in line_starts:
        try:
            obj, _ = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            objects.append((at, obj))
    return [obj for _, obj in sorted(objects, key=lambda item: item[0])]


def parse_generated_task(text: Any, min_tests: int = 4) -> GeneratedTaskParse:
    """`{question, test_input[], test_output[]}` from the env model's answer.

    The last JSON object with a "question" key wins (else the last object, to
    report what is wrong with it). Numbers in test lists are read as strings,
    as the reference's str() does; the time limit comes from config, not the model.
    """
    objects = _json_candidates(as_text(text))
    if not objects:
        return GeneratedTaskParse(None, "invalid_json")
    with_question = [obj for obj in objects if "question" in obj]
    obj: Mapping[str, Any] = (with_question or objects)[-1]
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        return GeneratedTaskParse(None, "missing_question")
    inputs, outputs = obj.get("test_input"), obj.get("test_output")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        return GeneratedTaskParse(None, "tests_not_lists")
    scalar = (str, int, float)
    if any(isinstance(x, bool) or not isinstance(x, scalar) for x in inputs + outputs):
        return GeneratedTaskParse(None, "bad_test_type")
    if len(inputs) != len(outputs):
        return GeneratedTaskParse(None, "length_mismatch")
    if len(inputs) < min_tests:
        return GeneratedTaskParse(None, "too_few_tests")
    task = GeneratedTask(question.strip(), tuple(map(str, inputs)), tuple(map(str, outputs)))
    return GeneratedTaskParse(task, "ok")
