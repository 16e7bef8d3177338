"""Easy stdin/stdout problems with reference solutions, generated from a seed (the CPU runs' tasks).

A problem is one of a family of templates (sum, difference, product, max/min/sum/sort of a
list, reverse a word, count a letter, string length, parity, ...), some with a constant drawn
from the seed (add k, count the letter c). Its tests have random inputs whose expected outputs
are computed here, independently of the reference solution; a test checks that every
reference solution passes its own problem's tests in the sandbox. Problem `seed` is
`TEMPLATES[seed % len(TEMPLATES)]` with constants and inputs from the seed, so disjoint seed
ranges give disjoint problem instances (a template recurs; its constants and tests differ).
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable

import numpy as np

from rlanything_jax.envs.base import Task
from rlanything_jax.scenarios.coding.env import stdio_task
from rlanything_jax.seeds import derive_rng

NUM_TESTS = 5
TIME_LIMIT_S = 4.0
_TWO_INTS = "Read two integers a and b separated by a space on one line."
_INT_LIST = "Read integers separated by spaces on one line."


@dataclasses.dataclass(frozen=True)
class Problem:
    """One instance of a template: its text, reference program and a test maker."""

    question: str
    reference_solution: str
    case: Callable[[np.random.Generator], tuple[str, str]]   # rng -> (stdin, expected stdout)


def _word(rng: np.random.Generator, letters: str = string.ascii_lowercase, low: int = 3, high: int = 8) -> str:
    return "".join(rng.choice(list(letters), size=int(rng.integers(low, high + 1))))


def _int_list(rng: np.random.Generator) -> list[int]:
    return [int(x) for x in rng.integers(-50, 51, size=int(rng.integers(2, 7)))]


def _line(*values) -> str:
    return " ".join(str(v) for v in values) + "\n"


def _one_int(f: Callable[[int], object], low: int = -50, high: int = 50):
    def case(r: np.random.Generator) -> tuple[str, str]:
        n = int(r.integers(low, high + 1))
        return _line(n), _line(f(n))
    return case


def _two_ints(f: Callable[[int, int], object]):
    def case(r: np.random.Generator) -> tuple[str, str]:
        a, b = (int(x) for x in r.integers(-50, 51, size=2))
        return _line(a, b), _line(f(a, b))
    return case


def _int_list_case(f: Callable[[list[int]], object]):
    def case(r: np.random.Generator) -> tuple[str, str]:
        values = _int_list(r)
        return _line(*values), _line(f(values))
    return case


def _word_case(f: Callable[[str], object], letters: str = string.ascii_lowercase):
    def case(r: np.random.Generator) -> tuple[str, str]:
        word = _word(r, letters)
        return _line(word), _line(f(word))
    return case


# ---------------------------------------------------------------- templates: rng -> Problem


def add_constant(rng):
    k = int(rng.integers(2, 21))
    return Problem(f"Read an integer n. Print n + {k}.", f"n = int(input())\nprint(n + {k})\n",
                   _one_int(lambda n: n + k))


def multiply_constant(rng):
    k = int(rng.integers(2, 10))
    return Problem(f"Read an integer n. Print n * {k}.", f"n = int(input())\nprint(n * {k})\n",
                   _one_int(lambda n: n * k))


def remainder(rng):
    k = int(rng.integers(2, 10))
    return Problem(f"Read a non-negative integer n. Print the remainder of n divided by {k}.",
                   f"n = int(input())\nprint(n % {k})\n", _one_int(lambda n: n % k, 0, 100))


def square(rng):
    return Problem("Read an integer n. Print n * n.", "n = int(input())\nprint(n * n)\n",
                   _one_int(lambda n: n * n))


def parity(rng):
    return Problem("Read an integer n. Print even if n is even, otherwise print odd.",
                   "n = int(input())\nprint('even' if n % 2 == 0 else 'odd')\n",
                   _one_int(lambda n: "even" if n % 2 == 0 else "odd"))


def sum_two(rng):
    return Problem(f"{_TWO_INTS} Print a + b.", "a, b = map(int, input().split())\nprint(a + b)\n",
                   _two_ints(lambda a, b: a + b))


def difference(rng):
    return Problem(f"{_TWO_INTS} Print a - b.", "a, b = map(int, input().split())\nprint(a - b)\n",
                   _two_ints(lambda a, b: a - b))


def product(rng):
    return Problem(f"{_TWO_INTS} Print a * b.", "a, b = map(int, input().split())\nprint(a * b)\n",
                   _two_ints(lambda a, b: a * b))


def larger(rng):
    return Problem(f"{_TWO_INTS} Print the larger of the two.",
                   "a, b = map(int, input().split())\nprint(max(a, b))\n", _two_ints(max))


def list_max(rng):
    return Problem(f"{_INT_LIST} Print the largest of them.", "print(max(map(int, input().split())))\n",
                   _int_list_case(max))


def list_min(rng):
    return Problem(f"{_INT_LIST} Print the smallest of them.", "print(min(map(int, input().split())))\n",
                   _int_list_case(min))


def list_sum(rng):
    return Problem(f"{_INT_LIST} Print their sum.", "print(sum(map(int, input().split())))\n",
                   _int_list_case(sum))


def list_count(rng):
    return Problem(f"{_INT_LIST} Print how many integers there are.", "print(len(input().split()))\n",
                   _int_list_case(len))


def sort_numbers(rng):
    return Problem(f"{_INT_LIST} Print them in increasing order, separated by spaces.",
                   "print(*sorted(map(int, input().split())))\n",
                   _int_list_case(lambda values: " ".join(str(v) for v in sorted(values))))


def reverse_word(rng):
    return Problem("Read a word. Print it reversed.", "print(input().strip()[::-1])\n",
                   _word_case(lambda w: w[::-1]))


def word_length(rng):
    return Problem("Read a word. Print its length.", "print(len(input().strip()))\n", _word_case(len))


def upper_case(rng):
    return Problem("Read a word. Print it in upper case.", "print(input().strip().upper())\n",
                   _word_case(str.upper))


def first_letter(rng):
    return Problem("Read a word. Print its first letter.", "print(input().strip()[0])\n",
                   _word_case(lambda w: w[0]))


def count_letter(rng):
    letter = str(rng.choice(list("abcde")))
    return Problem(f"Read a word. Print how many times the letter {letter} appears in it.",
                   f"print(input().count('{letter}'))\n",
                   _word_case(lambda w: w.count(letter), letters="abcde"))   # few letters: counts vary


def repeat_word(rng):
    k = int(rng.integers(2, 5))
    return Problem(f"Read a word. Print it {k} times in a row, with no spaces.", f"print(input().strip() * {k})\n",
                   _word_case(lambda w: w * k))


TEMPLATES: dict[str, Callable[[np.random.Generator], Problem]] = {f.__name__: f for f in (
    sum_two, reverse_word, list_max, add_constant, parity, word_length, difference, list_min, count_letter,
    sort_numbers, product, upper_case, multiply_constant, list_sum, first_letter, remainder, larger,
    list_count, repeat_word, square)}


def easy_record(seed: int, num_tests: int = NUM_TESTS) -> dict:
    """Problem `seed` in the reference's stdio record format, with its reference solution: `num_tests`
    tests with distinct inputs where the template allows."""
    name = list(TEMPLATES)[seed % len(TEMPLATES)]
    rng = derive_rng(seed, "easy_coding_problem")
    problem = TEMPLATES[name](rng)
    tests: dict[str, str] = {}
    for _ in range(20 * num_tests):  # a template with few inputs (one letter) may repeat one
        stdin, stdout = problem.case(rng)
        tests.setdefault(stdin, stdout)
        if len(tests) == num_tests:
            break
    return {"task_id": f"easy/{seed}-{name}", "question": problem.question, "test_method": "stdio",
            "test_time_limit": TIME_LIMIT_S, "test_input": list(tests), "test_output": list(tests.values()),
            "reference_solution": problem.reference_solution}


def easy_task(seed: int, num_tests: int = NUM_TESTS) -> Task:
    record = easy_record(seed, num_tests)
    return stdio_task(record, record["task_id"])


def easy_tasks(seeds, num_tests: int = NUM_TESTS) -> list[Task]:
    return [easy_task(seed, num_tests) for seed in seeds]
