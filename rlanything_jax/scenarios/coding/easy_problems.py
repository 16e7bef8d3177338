"""Easy stdin/stdout problems with reference solutions, generated from a seed (the CPU runs' tasks).

A problem is one of a family of templates (sum, difference, product, max/min/sum/sort of a
list, reverse a word, count a letter, string length, parity, ...), some with a constant drawn
from the seed (add k, count the letter c). Its first tests are the template's simple cases (small
inputs one checks by hand, "1 2" or "abc": what a careful test writer starts with; with a
constant, inputs whose answer is fixed or is the constant itself, as n = 0 for "print n + k"),
the others have random inputs; expected outputs are computed here, independently of the
reference solution, and a test checks that every reference solution passes its own problem's
tests in the sandbox. Problem `seed` is
`TEMPLATES[seed % len(TEMPLATES)]` with constants and inputs from the seed, so disjoint seed
ranges give disjoint problem instances (a template recurs; its constants and tests differ).
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable

import numpy as np

from rlanything_jax.agents.envs.base import Task
from rlanything_jax.core.seeds import derive_rng
from rlanything_jax.scenarios.coding.env import stdio_task

NUM_TESTS = 5            # per problem: the template's two simple cases, then random cases
TIME_LIMIT_S = 4.0
_TWO_INTS = "Read two integers a and b on one line."
_INT_LIST = "Read a line of integers."


@dataclasses.dataclass(frozen=True)
class Problem:
    """One instance of a template: its text, reference program, and how its tests are made."""

    question: str
    reference_solution: str
    simple_inputs: tuple[str, ...]                     # the first tests: small cases anyone can check by hand
    random_input: Callable[[np.random.Generator], str]  # the other tests' inputs
    solve: Callable[[str], str]                        # stdin -> expected stdout (not by running the reference)


def _line(*values) -> str:
    return " ".join(str(v) for v in values) + "\n"


def _one_int(question: str, solution: str, simple: tuple[int, ...], f: Callable[[int], object], low: int = -50,
             high: int = 50) -> Problem:
    return Problem(question, solution, tuple(_line(n) for n in simple),
                   lambda r: _line(int(r.integers(low, high + 1))), lambda stdin: _line(f(int(stdin))))


def _two_ints(question: str, solution: str, f: Callable[[int, int], object],
              simple: tuple[tuple[int, int], ...] = ((1, 2), (5, 3))) -> Problem:
    return Problem(f"{_TWO_INTS} {question}", solution, tuple(_line(*pair) for pair in simple),
                   lambda r: _line(*(int(x) for x in r.integers(-50, 51, size=2))),
                   lambda stdin: _line(f(*map(int, stdin.split()))))


def _int_list(question: str, solution: str, f: Callable[[list[int]], object]) -> Problem:
    return Problem(f"{_INT_LIST} {question}", solution, (_line(3, 1, 2), _line(4, 5)),
                   lambda r: _line(*(int(x) for x in r.integers(-50, 51, size=int(r.integers(2, 7))))),
                   lambda stdin: _line(f([int(x) for x in stdin.split()])))


def _word(question: str, solution: str, f: Callable[[str], object], letters: str = string.ascii_lowercase,
          simple: tuple[str, ...] = ("abc", "hello")) -> Problem:
    def random_word(r: np.random.Generator) -> str:
        return _line("".join(r.choice(list(letters), size=int(r.integers(3, 9)))))
    return Problem(question, solution, tuple(_line(w) for w in simple), random_word,
                   lambda stdin: _line(f(stdin.strip())))


# ---------------------------------------------------------------- templates: rng -> Problem


def add_constant(rng):
    k = int(rng.integers(2, 21))
    return _one_int(f"Read an integer n. Print n + {k}.", f"n = int(input())\nprint(n + {k})\n", (0, 1),
                    lambda n: n + k)


def multiply_constant(rng):
    k = int(rng.integers(2, 10))
    return _one_int(f"Read an integer n. Print n * {k}.", f"n = int(input())\nprint(n * {k})\n", (1, 0),
                    lambda n: n * k)


def remainder(rng):
    k = int(rng.integers(2, 10))
    return _one_int(f"Read a non-negative integer n. Print the remainder of n divided by {k}.",
                    f"n = int(input())\nprint(n % {k})\n", (1, k), lambda n: n % k, 0, 100)


def square(rng):
    return _one_int("Read an integer n. Print n * n.", "n = int(input())\nprint(n * n)\n", (3, 2), lambda n: n * n)


def parity(rng):
    return _one_int("Read an integer n. Print even if n is even, otherwise print odd.",
                    "n = int(input())\nprint('even' if n % 2 == 0 else 'odd')\n", (2, 3),
                    lambda n: "even" if n % 2 == 0 else "odd")


def sum_two(rng):
    return _two_ints("Print a + b.", "a, b = map(int, input().split())\nprint(a + b)\n", lambda a, b: a + b)


def difference(rng):
    return _two_ints("Print a - b.", "a, b = map(int, input().split())\nprint(a - b)\n", lambda a, b: a - b)


def product(rng):
    return _two_ints("Print a * b.", "a, b = map(int, input().split())\nprint(a * b)\n", lambda a, b: a * b)


def larger(rng):
    return _two_ints("Print the larger of the two.", "a, b = map(int, input().split())\nprint(max(a, b))\n", max)


def list_max(rng):
    return _int_list("Print the largest of them.", "print(max(map(int, input().split())))\n", max)


def list_min(rng):
    return _int_list("Print the smallest of them.", "print(min(map(int, input().split())))\n", min)


def list_sum(rng):
    return _int_list("Print their sum.", "print(sum(map(int, input().split())))\n", sum)


def list_count(rng):
    return _int_list("Print how many integers there are.", "print(len(input().split()))\n", len)


def sort_numbers(rng):
    return _int_list("Print them in increasing order, separated by spaces.",
                     "print(*sorted(map(int, input().split())))\n", lambda values: " ".join(map(str, sorted(values))))


def reverse_word(rng):
    return _word("Read a word. Print it reversed.", "print(input().strip()[::-1])\n", lambda w: w[::-1])


def word_length(rng):
    return _word("Read a word. Print its length.", "print(len(input().strip()))\n", len)


def upper_case(rng):
    return _word("Read a word. Print it in upper case.", "print(input().strip().upper())\n", str.upper)


def first_letter(rng):
    return _word("Read a word. Print its first letter.", "print(input().strip()[0])\n", lambda w: w[0])


def count_letter(rng):
    letter = str(rng.choice(list("abcde")))
    return _word(f"Read a word. Print how many times the letter {letter} appears in it.",
                 f"print(input().count('{letter}'))\n", lambda w: w.count(letter), letters="abcde",  # counts vary
                 simple=("abcde", "xyz"))   # 1 and 0 whatever the letter


def repeat_word(rng):
    k = int(rng.integers(2, 5))
    return _word(f"Read a word. Print it {k} times in a row, with no spaces.", f"print(input().strip() * {k})\n",
                 lambda w: w * k, simple=("a", "ab"))


TEMPLATES: dict[str, Callable[[np.random.Generator], Problem]] = {f.__name__: f for f in (
    sum_two, reverse_word, list_max, add_constant, parity, word_length, difference, list_min, count_letter,
    sort_numbers, product, upper_case, multiply_constant, list_sum, first_letter, remainder, larger,
    list_count, repeat_word, square)}


def easy_record(seed: int, num_tests: int = NUM_TESTS) -> dict:
    """Problem `seed` in the reference's stdio record format, with its reference solution: the template's
    simple cases, then random cases, `num_tests` tests with distinct inputs."""
    name = list(TEMPLATES)[seed % len(TEMPLATES)]
    rng = derive_rng(seed, "easy_coding_problem")
    problem = TEMPLATES[name](rng)
    inputs = list(problem.simple_inputs[:num_tests])
    for _ in range(20 * num_tests):  # a template with few inputs may repeat one
        if len(inputs) >= num_tests:
            break
        stdin = problem.random_input(rng)
        if stdin not in inputs:
            inputs.append(stdin)
    return {"task_id": f"easy/{seed}-{name}", "question": problem.question, "test_method": "stdio",
            "test_time_limit": TIME_LIMIT_S, "test_input": inputs, "test_output": [problem.solve(x) for x in inputs],
            "reference_solution": problem.reference_solution}


def easy_task(seed: int, num_tests: int = NUM_TESTS) -> Task:
    record = easy_record(seed, num_tests)
    return stdio_task(record, record["task_id"])


def easy_tasks(seeds, num_tests: int = NUM_TESTS) -> list[Task]:
    return [easy_task(seed, num_tests) for seed in seeds]
