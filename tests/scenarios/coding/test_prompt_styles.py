"""The coding scenario's prompt styles: what each renders (hand-written chats), the reward model's warm-start
answers read back by the parser and run in the real sandbox, and the easy problems' simple cases (by hand)."""

import re

import jinja2
import pytest

from rlanything_jax.agents.envs.base import Observation
from rlanything_jax.agents.reward_models.unit_test_writing import ground_truth_test_examples
from rlanything_jax.core.models.scratch import CHATML_TEMPLATE
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.scenarios.coding import CodingOptions, easy_problems
from rlanything_jax.scenarios.coding import env as coding
from rlanything_jax.scenarios.coding.parsers import parse_code_block
from rlanything_jax.scenarios.coding.scenario import CodingPrompts, CompactCodingPrompts

pytestmark = pytest.mark.filterwarnings("ignore:UNTRUSTED CODE SANDBOX IS WEAK:RuntimeWarning")

SUM_TWO = "Read two integers a and b on one line. Print a + b."
STYLES = ("reference", "compact")


def _render(messages) -> str:
    """The chat as a model built from scratch reads it (the run's ChatML template)."""
    return jinja2.Template(CHATML_TEMPLATE).render(messages=messages, add_generation_prompt=True)


def test_prompt_style_option_picks_the_prompts():
    assert type(make_scenario("coding").prompts) is CodingPrompts   # the reference's prompts stay the default
    assert type(make_scenario("coding", {"source": "easy", "prompt_style": "compact"}).prompts) is \
        CompactCodingPrompts
    with pytest.raises(ConfigError, match="prompt_style"):
        CodingOptions(prompt_style="terse")


def test_compact_prompts_render_the_problem_under_one_instruction():
    task = easy_problems.easy_task(0)
    assert task.goal == SUM_TWO
    prompts = CompactCodingPrompts()
    assert _render(prompts.initial_messages(task, Observation(task.goal))) == (
        "<|im_start|>user\nWrite a Python program.\n"
        f"{SUM_TWO}<|im_end|>\n<|im_start|>assistant\n")
    assert _render(prompts.unit_test_messages(task)) == (
        "<|im_start|>user\nWrite a unit test.\n"
        f"{SUM_TWO}<|im_end|>\n<|im_start|>assistant\n")


def test_reference_prompts_are_unchanged_by_the_compact_style():
    task = easy_problems.easy_task(0)
    reference = CodingPrompts()
    policy = reference.initial_messages(task, Observation(task.goal))
    assert [m["role"] for m in policy] == ["system", "user"]
    assert policy[1]["content"].startswith("You need to think first then write python script.")
    assert policy[1]["content"].endswith(f"This is the problem:\n{SUM_TWO}")
    unit_test = reference.unit_test_messages(task)
    assert [m["role"] for m in unit_test] == ["system", "user"]
    assert "exactly ONE new test example" in unit_test[0]["content"]
    assert unit_test[1]["content"].endswith(f"Problem:\n{SUM_TWO}")
    compact = _render(CompactCodingPrompts().unit_test_messages(task))
    assert len(compact) * 10 < len(_render(unit_test))   # the point of the compact style


@pytest.mark.parametrize("style", STYLES)
def test_warm_start_tests_parse_back_and_the_reference_solution_passes_them(style, qwen25_tokenizer):
    """Each ground-truth test written as the reward model's warm-start answer reads back as that test, and the
    test read back is passed by the reference solution and failed by a wrong program, in the sandbox."""
    prompts = make_scenario("coding", {"source": "easy", "prompt_style": style}).prompts
    tok = qwen25_tokenizer
    im_end = tok.token_to_id("<|im_end|>")
    for seed in (0, 3, 8, 18):   # sum_two, add_constant, count_letter, repeat_word
        task = easy_problems.easy_task(seed)
        truth = coding.stdio_tests(task)
        examples = ground_truth_test_examples(tok, prompts, task)
        assert len(examples) == len(truth) == easy_problems.NUM_TESTS
        parsed = []
        for example, (stdin, stdout) in zip(examples, truth):
            assert list(example.prompt_ids) == tok.encode_chat(prompts.unit_test_messages(task))
            assert example.response_ids[-1] == im_end
            test = prompts.parse_unit_test(tok.decode(list(example.response_ids[:-1])))
            assert (test.status, test.stdin, test.expected_stdout) == ("ok", stdin.strip(), stdout.strip())
            parsed.append((test.stdin, test.expected_stdout))
        passes = prompts.run_tests(task, [task.payload["reference_solution"], "print(input())\n"], parsed)
        assert passes[0].all() and not passes[1].all(), task.task_id


@pytest.mark.parametrize("style", STYLES)
def test_the_policy_answer_reads_back_as_the_program(style):
    prompts = make_scenario("coding", {"source": "easy", "prompt_style": style}).prompts
    program = easy_problems.easy_record(0)["reference_solution"]
    answer = prompts.answer_text(Observation(SUM_TWO), program)
    assert parse_code_block(answer).code == program.strip()
    assert prompts.parse_action(answer, Observation(SUM_TWO)).action == program.strip()


def _constant(question: str) -> int:
    return int(re.findall(r"-?\d+", question)[-1])


# The two simple cases of each template, by hand (a template with a constant: as a function of it).
SIMPLE_CASES = {
    "sum_two": lambda q: [("1 2", "3"), ("5 3", "8")],
    "reverse_word": lambda q: [("abc", "cba"), ("hello", "olleh")],
    "list_max": lambda q: [("3 1 2", "3"), ("4 5", "5")],
    "add_constant": lambda q: [("0", str(_constant(q))), ("1", str(_constant(q) + 1))],
    "parity": lambda q: [("2", "even"), ("3", "odd")],
    "word_length": lambda q: [("abc", "3"), ("hello", "5")],
    "difference": lambda q: [("1 2", "-1"), ("5 3", "2")],
    "list_min": lambda q: [("3 1 2", "1"), ("4 5", "4")],
    "count_letter": lambda q: [("abcde", "1"), ("xyz", "0")],
    "sort_numbers": lambda q: [("3 1 2", "1 2 3"), ("4 5", "4 5")],
    "product": lambda q: [("1 2", "2"), ("5 3", "15")],
    "upper_case": lambda q: [("abc", "ABC"), ("hello", "HELLO")],
    "multiply_constant": lambda q: [("1", str(_constant(q))), ("0", "0")],
    "list_sum": lambda q: [("3 1 2", "6"), ("4 5", "9")],
    "first_letter": lambda q: [("abc", "a"), ("hello", "h")],
    "remainder": lambda q: [("1", "1"), (str(_constant(q)), "0")],
    "larger": lambda q: [("1 2", "2"), ("5 3", "5")],
    "list_count": lambda q: [("3 1 2", "3"), ("4 5", "2")],
    "repeat_word": lambda q: [("a", "a" * _constant(q)), ("ab", "ab" * _constant(q))],
    "square": lambda q: [("3", "9"), ("2", "4")],
}


def test_every_problem_starts_with_its_templates_simple_cases():
    assert set(SIMPLE_CASES) == set(easy_problems.TEMPLATES)
    for seed in list(range(2 * len(SIMPLE_CASES))) + [1_000_007, 2_000_011]:
        record = easy_problems.easy_record(seed)
        template = record["task_id"].split("-", 1)[1]
        tests = [(i.strip(), o.strip()) for i, o in zip(record["test_input"], record["test_output"])]
        assert tests[:2] == SIMPLE_CASES[template](record["question"]), record["task_id"]
        assert len({i for i, _ in tests}) == easy_problems.NUM_TESTS   # then distinct random cases
