"""Parsers of model outputs: every rule and fallback, and that no input makes one raise."""

import json
import random
import signal

import pytest

from rlanything_jax.agents.parsers import ParseCounter, last_boxed, parse_judgment
from rlanything_jax.scenarios.alfworld.goal_prompts import parse_goal_types
from rlanything_jax.scenarios.coding.parsers import parse_code_block, parse_generated_task, parse_unit_test
from rlanything_jax.scenarios.text_games.parsers import parse_action_index, parse_failure_summary

# ---------------------------------------------------------------- \boxed{}


@pytest.mark.parametrize("text,content,status", [
    (r"answer \boxed{3}", "3", "ok"),
    (r"\boxed{\frac{1}{2}} done", r"\frac{1}{2}", "ok"),             # nested braces kept
    (r"\boxed{1} draft, final \boxed{ 2 }", " 2 ", "ok"),             # the last box wins
    (r"\boxed{\boxed{4}}", "4", "ok"),                                # the last opener is the inner one
    (r"\boxed{1} then cut off \boxed{2", None, "unclosed_boxed"),     # no fallback to a draft
    ("no box here {1}", None, "no_boxed"),
    (r"\boxed{}", "", "ok"),
])
def test_last_boxed(text, content, status):
    assert last_boxed(text).content == content
    assert last_boxed(text).status == status


# ---------------------------------------------------------------- policy action index


@pytest.mark.parametrize("text,num_actions,index,status", [
    (r"I go to the fridge. \boxed{2}", 5, 2, "ok"),
    (r"\boxed{0}", 1, 0, "ok"),
    (r"\boxed{007}", 10, 7, "ok"),
    (r"\boxed{3) open fridge 1}", 5, 3, "ok"),                 # the first integer, as the reference
    (r"\boxed{Action 4 (of 9)}", 5, 4, "ok"),
    (r"\boxed{5}", 5, 4, "out_of_range"),                      # clamped to the last action
    (r"\boxed{99999999999999999999999}", 5, 4, "out_of_range"),
    (r"\boxed{-1}", 5, 0, "out_of_range"),                     # clamped to 0
    (r"\boxed{\u22122}".replace("\\u2212", "\u2212"), 5, 0, "out_of_range"),  # unicode minus
    (r"\boxed{-0}", 5, 0, "ok"),
    (r"\boxed{open the fridge}", 5, 0, "not_integer"),
    ("I choose 3", 5, 0, "no_boxed"),
    (r"\boxed{3", 5, 0, "unclosed_boxed"),
    (r"\boxed{1}", 0, 0, "no_actions"),
])
def test_parse_action_index(text, num_actions, index, status):
    choice = parse_action_index(text, num_actions)
    assert (choice.index, choice.status) == (index, status)
    assert choice.ok == (status == "ok")


# ---------------------------------------------------------------- reward model judgment


@pytest.mark.parametrize("text,score,valid,status", [
    (r"Good step. \boxed{1}", 1, True, "ok"),
    (r"\boxed{+1}", 1, True, "ok"),
    (r"\boxed{ -1 }", -1, True, "ok"),
    ("\\boxed{\u22121}", -1, True, "ok"),                      # unicode minus sign
    ("\\boxed{\u20131}", -1, True, "ok"),                      # en dash
    (r"\boxed{-1} on reflection \boxed{1}", 1, True, "ok"),    # several boxes: the last one
    (r"\boxed{\text{-1}}", -1, True, "extracted"),             # nested braces inside the box
    (r"\boxed{Score: -1 (index 3 is wrong)}", -1, True, "extracted"),  # exactly one of +-1
    (r"\boxed{01}", 1, True, "extracted"),
    (r"\boxed{1/8}", 0, False, "fraction"),
    (r"\boxed{ 1 / 2 }", 0, False, "fraction"),
    (r"\boxed{1 or -1}", 0, False, "invalid"),                 # two votes: ambiguous
    (r"\boxed{2}", 0, False, "invalid"),
    (r"\boxed{good}", 0, False, "invalid"),
    (r"\boxed{}", 0, False, "invalid"),
    ("the score is -1", 0, False, "no_boxed"),                 # an unboxed score is not read
    (r"\boxed{1", 0, False, "unclosed_boxed"),
])
def test_parse_judgment(text, score, valid, status):
    judgment = parse_judgment(text)
    assert (judgment.score, judgment.valid, judgment.status) == (score, valid, status)


# ---------------------------------------------------------------- env model (ALFWorld)


@pytest.mark.parametrize("text,types,status", [
    (r"\boxed{AppleType,FridgeType}", ("AppleType", "FridgeType"), "ok"),
    (r"\boxed{ Apple , Fridge }", ("Apple", "Fridge"), "ok"),
    (r"\boxed{['AppleType', 'FridgeType']}", ("AppleType", "FridgeType"), "ok"),
    ("\\boxed{AppleType\uff0cFridgeType}", ("AppleType", "FridgeType"), "ok"),  # full-width comma
    (r"\boxed{A,B,C}", ("A", "B"), "ok"),
    (r"draft \boxed{X,Y} final \boxed{(DeskLampType, KeyChainType)}", ("DeskLampType", "KeyChainType"), "ok"),
    (r"\boxed{AppleType FridgeType}", ("AppleType", "FridgeType"), "space_separated"),
    (r"\boxed{AppleType}", None, "not_two_tokens"),
    (r"\boxed{, ,}", None, "not_two_tokens"),
    ("AppleType, FridgeType", None, "no_boxed"),
])
def test_parse_goal_types(text, types, status):
    parsed = parse_goal_types(text)
    assert (parsed.types, parsed.status) == (types, status)


@pytest.mark.parametrize("text,summary,status", [
    (r"<think>...</think>\boxed{The agent looped between cabinets. It never opened the fridge.}",
     "The agent looped between cabinets. It never opened the fridge.", "ok"),
    (r"\boxed{  }", "", "empty"),
    ("It looped.", "", "no_boxed"),
])
def test_parse_failure_summary(text, summary, status):
    parsed = parse_failure_summary(text)
    assert (parsed.summary, parsed.status) == (summary, status)


# ---------------------------------------------------------------- coding: code


@pytest.mark.parametrize("text,code,status", [
    ("Plan.\n```python\nprint(1)\n```\nBetter:\n```python\nn = int(input())\nprint(n)\n```\n",
     "n = int(input())\nprint(n)", "ok"),                       # the last python block
    ("```python3\nprint(3)\n```", "print(3)", "ok"),            # the tag is not part of the code
    ("```py\nprint(4)\n```", "print(4)", "ok"),
    ("```Python\nprint(5)\n```", "print(5)", "ok"),
    ("```python print(6)```", "print(6)", "ok"),                # one-line block
    ("```python\nx = 1\n```\n```text\n1\n```", "x = 1", "ok"),  # python preferred over a later block
    ("```\nprint(7)\n```", "print(7)", "other_fence"),
    ("```cpp\nint main(){}\n```", "int main(){}", "other_fence"),
    ("```python\n\n```", "", "empty_code"),
    ("```python\nprint(8)\n", "", "no_code"),                    # unclosed (truncated) block
    ("print(9)", "", "no_code"),
])
def test_parse_code_block(text, code, status):
    parsed = parse_code_block(text)
    assert (parsed.code, parsed.status) == (code, status)


# ---------------------------------------------------------------- coding: unit test

_UT = "Reasoning...\n\n**Test Input:**\n```\n{inp}\n```\n\n**Test Output:**\n```\n{out}\n```\n\n**Explanation:**\nok\n"


@pytest.mark.parametrize("text,test_input,test_output,status", [
    (_UT.format(inp="3\n1 2 3", out="6"), "3\n1 2 3", "6", "ok"),
    (_UT.format(inp="  2\n", out="x  "), "  2", "x  ", "ok"),   # spaces kept, outer newlines dropped
    ("**Test Input:**\n```text\n5\n```\n**Test Output:**\n```text\n25\n```", "5", "25", "ok"),
    ("**Test Input:**\r\n```\r\n1\r\n2\r\n```\r\n**Test Output:**\r\n```\r\n3\r\n```", "1\n2", "3", "ok"),
    (_UT.format(inp="1", out="1") + _UT.format(inp="2", out="4"), "2", "4", "ok"),  # the last example
    ("**Test Input:** 4 5\n**Test Output:** 9\n**Explanation:** sum", "4 5", "9", "plain_text"),
    ("**Test Input**:\n```\n7\n```\n**Test Output**:\n```\n49\n```", "7", "49", "ok"),
    ("**Test Input:**\nThe input is:\n```\n8\n```\n**Test Output:**\n```\n64\n```", "8", "64", "ok"),
    ("**Test Output:**\n```\n1\n```", "", "", "missing_input"),
    ("**Test Input:**\n```\n1\n```\n", "", "", "missing_output"),
    ("**Test Input:**\n```\n\n```\n**Test Output:**\n```\n1\n```", "", "", "empty_input"),
    ("**Test Input:**\n```\n1\n```\n**Test Output:**\n**Explanation:** none", "", "", "empty_output"),
])
def test_parse_unit_test(text, test_input, test_output, status):
    parsed = parse_unit_test(text)
    assert (parsed.test_input, parsed.test_output, parsed.status) == (test_input, test_output, status)
    assert parsed.valid == (status in ("ok", "plain_text"))


# ---------------------------------------------------------------- coding: generated task


def _task_json(**overrides):
    task = {"question": "Sum two numbers.", "test_method": "stdio", "test_time_limit": 4,
            "test_input": ["1 2", "3 4", "0 0", "5 5"], "test_output": ["3", "7", "0", "10"]}
    task.update(overrides)
    return json.dumps(task)


def test_parse_generated_task_reads_json_in_or_out_of_a_fence():
    for text in (_task_json(), f"```json\n{_task_json()}\n```", f"<think>hmm</think>\nHere:\n{_task_json()}\nDone."):
        parsed = parse_generated_task(text)
        assert parsed.status == "ok"
        assert parsed.task.question == "Sum two numbers."
        assert parsed.task.test_inputs == ("1 2", "3 4", "0 0", "5 5")
        assert parsed.task.test_outputs == ("3", "7", "0", "10")


def test_parse_generated_task_picks_the_last_object_with_a_question():
    draft = _task_json(question="draft")
    text = f'{draft}\nfinal:\n{_task_json(question="final")}\n{{"note": "done"}}'
    assert parse_generated_task(text).task.question == "final"


def test_parse_generated_task_survives_braces_and_quotes_in_strings_and_prose():
    tricky = _task_json(question='Print "{" then \\ then }', test_input=["{", "}", '"', "\\"])
    assert parse_generated_task(tricky).task.question == 'Print "{" then \\ then }'
    # An unmatched "{" in the reasoning hides the answer from the brace scan; fences and line starts rescue it.
    assert parse_generated_task(f"I use a dict {{ like this\n```json\n{_task_json()}\n```").status == "ok"
    assert parse_generated_task(f'It says "5\\" screen {{\n{_task_json()}\n').status == "ok"


@pytest.mark.parametrize("text,status", [
    (_task_json(test_input=[1, 2, 3.5, "x"]), "ok"),                 # numbers read as strings
    ("no json at all", "invalid_json"),
    ('{"question": "q", "test_input": [1, 2,}', "invalid_json"),
    ('["question", "not an object"]', "invalid_json"),
    (_task_json(question="  "), "missing_question"),
    (_task_json(question=None), "missing_question"),
    ('{"test_input": [], "test_output": []}', "missing_question"),
    (_task_json(test_input="1 2"), "tests_not_lists"),
    (_task_json(test_output=None), "tests_not_lists"),
    (_task_json(test_input=[[1], "2", "3", "4"]), "bad_test_type"),
    (_task_json(test_input=[True, "2", "3", "4"]), "bad_test_type"),
    (_task_json(test_output=["3", "7", "0"]), "length_mismatch"),
    (_task_json(test_input=["1"], test_output=["1"]), "too_few_tests"),
])
def test_parse_generated_task_statuses(text, status):
    parsed = parse_generated_task(text)
    assert parsed.status == status
    assert (parsed.task is not None) == (status == "ok")


def test_parse_generated_task_min_tests():
    one = _task_json(test_input=["1"], test_output=["1"])
    assert parse_generated_task(one, min_tests=1).ok
    assert parse_generated_task(one, min_tests=2).status == "too_few_tests"


# ---------------------------------------------------------------- robustness

_PARSERS = (
    lambda t: parse_action_index(t, 7), parse_judgment, parse_goal_types, parse_failure_summary,
    parse_code_block, parse_unit_test, parse_generated_task, last_boxed,
)
_PIECES = ("\\boxed{", "}", "{", "-1", "+1", "1", "/", "8", "```", "```python\n", "\n", " ", "**Test Input:**",
           "**Test Output:**", "**Explanation:**", '"', "\\", '{"question": ', "[", "]", ",", "\u2212", "\uff0c",
           "\u00e9", "\U0001f600", "\x00", "\ud800", "<think>", "</think>", "<|im_end|>", "\r\n", "99999999999")


@pytest.mark.parametrize("parser", _PARSERS)
def test_parsers_never_raise_on_odd_inputs(parser):
    fixed = [None, "", 0, 3.5, b"bytes", ["list"], "\\boxed{" * 1000, "}" * 1000, "{" * 5000 + "}" * 5000,
             "\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}", "```" * 999, '{"a":' * 2000]
    rng = random.Random(0)
    fuzz = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    for text in fixed + fuzz:
        result = parser(text)
        assert isinstance(result.status, str)


class _Hang(Exception):
    pass


def _raise_hang(signum, frame):
    raise _Hang


@pytest.mark.parametrize("parser", _PARSERS)
def test_parsers_return_on_huge_inputs(parser):
    """Hostile sizes and nestings: every parser returns a status. The alarm is a hang guard, not a speed
    bound (a quadratic rule on these inputs takes hours; the linear ones take milliseconds, see bench/)."""
    huge = ["1" * 200_000, "\\boxed{" + "1" * 200_000 + "}", "x" * 1_000_000 + "\\boxed{1}",
            "**Test Input:**" * 20_000, "```json\n{" * 20_000, '{"q": "' + "\\\"" * 100_000 + '"}',
            "\n{" * 50_000, "*" * 1_000_000, "\\boxed{" + "{" * 200_000,
            '{"a":' * 50_000 + "1" + "}" * 50_000]  # the last: valid JSON nested too deep to decode
    previous = signal.signal(signal.SIGALRM, _raise_hang)
    signal.alarm(300)
    try:
        for text in huge:
            assert isinstance(parser(text).status, str)
    except _Hang:
        pytest.fail(f"{parser.__name__} did not return within 300 s on a huge input (super-linear rule?)")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class _Unprintable:
    def __str__(self):
        raise RuntimeError("no text")


def test_non_string_inputs_read_as_text():
    assert parse_judgment(_Unprintable()).status == "no_boxed"
    assert parse_action_index(None, 3).status == "no_boxed"


def test_huge_inputs_still_parse():
    assert parse_action_index("x" * 1_000_000 + "\\boxed{2}", 3).index == 2
    assert parse_judgment("\\boxed{" + "1" * 100_000 + "}").status == "invalid"
    assert parse_judgment("\\boxed{" + "1" * 100_000 + "/8}").status == "fraction"
    assert parse_action_index("\\boxed{" + "1" * 100_000 + "}", 3).status == "out_of_range"


def test_unicode_content_round_trips():
    assert parse_failure_summary("\\boxed{L'agent a tourn\u00e9 en rond \U0001f600.}").summary == \
        "L'agent a tourn\u00e9 en rond \U0001f600."
    assert parse_goal_types("\\boxed{\u82f9\u679c,\u51b0\u7bb1}").types == ("\u82f9\u679c", "\u51b0\u7bb1")
    assert parse_code_block("```python\nprint('\u00e9')\n```").code == "print('\u00e9')"


# ---------------------------------------------------------------- ParseCounter


def test_parse_counter_tallies_statuses_per_parser():
    counter = ParseCounter()
    for text in (r"\boxed{1}", r"\boxed{-1}", r"\boxed{1/8}", "no box"):
        result = counter.record("judgment", parse_judgment(text))
        assert result.status  # record hands the result back
    counter.record("action", "ok")
    assert counter.counts() == {"judgment": {"ok": 2, "fraction": 1, "no_boxed": 1}, "action": {"ok": 1}}
    assert counter.total("judgment") == 4 and counter.total("missing") == 0
    assert counter.fallback_rate("judgment") == 0.5
    assert counter.fallback_rate("missing") == 0.0
    other = ParseCounter()
    other.record("action", parse_action_index("none", 3))
    counter.merge(other)
    metrics = counter.metrics()
    assert metrics["parse/action/no_boxed"] == 1.0
    assert metrics["parse/action/fallback_rate"] == 0.5
    assert metrics["parse/judgment/ok"] == 2.0
