"""Generated easy stdio problems: reference solutions pass their own tests in the real sandbox, wrong
programs do not, and the coding scenario builds disjoint training, held-out and warm-start sets."""

import pytest

from rlanything_jax.agents.scenario import TaskCounts
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.scenarios.coding import CodingOptions, easy_problems
from rlanything_jax.scenarios.coding import env as coding

pytestmark = pytest.mark.filterwarnings("ignore:UNTRUSTED CODE SANDBOX IS WEAK:RuntimeWarning")

ECHO = "print(input())\n"
NUM_TEMPLATES = len(easy_problems.TEMPLATES)


def _check_problems(seeds):
    failures = []
    for seed in seeds:
        task = easy_problems.easy_task(seed)
        tests = coding.stdio_tests(task)
        assert len(tests) >= 4 and len({stdin for stdin, _ in tests}) == len(tests), task.task_id
        passes = coding.run_unit_tests([task.payload["reference_solution"], ECHO, ""], tests)
        if not passes[0].all():
            failures.append(task.task_id)
        assert not passes[1].all() and not passes[2].any(), task.task_id   # the tests tell wrong code apart
    assert failures == []


def test_every_template_reference_passes_its_tests_and_a_wrong_program_fails():
    _check_problems(list(range(NUM_TEMPLATES)) + [1_000_003, 2_000_017])


@pytest.mark.slow
def test_many_problems_references_pass_their_tests():
    _check_problems(list(range(NUM_TEMPLATES, 6 * NUM_TEMPLATES)) + list(range(1_000_000, 1_000_040)))


def test_problems_are_fixed_by_their_seed():
    assert easy_problems.easy_record(3) == easy_problems.easy_record(3)
    assert easy_problems.easy_record(3) != easy_problems.easy_record(3 + NUM_TEMPLATES)   # same template
    record = easy_problems.easy_record(0)
    assert record["task_id"] == "easy/0-sum_two"
    assert record["question"] == "Read two integers a and b on one line. Print a + b."
    assert (record["test_input"][0], record["test_output"][0]) == ("1 2\n", "3\n")   # the simple case first
    for stdin, stdout in zip(record["test_input"], record["test_output"]):   # a + b, by hand
        a, b = map(int, stdin.split())
        assert stdout == f"{a + b}\n"
    assert [t.task_id.split("-", 1)[1] for t in easy_problems.easy_tasks(range(NUM_TEMPLATES))] == \
        list(easy_problems.TEMPLATES)


def test_easy_source_builds_disjoint_sets_with_reference_solutions(tmp_path):
    scenario = make_scenario("coding", {"source": "easy"})
    tasks = scenario.build_tasks(TaskCounts(train=24, eval=6, warm_start=10), tmp_path)
    ids = [[t.task_id for t in part] for part in (tasks.train, tasks.eval, tasks.warm_start)]
    assert [len(part) for part in ids] == [24, 6, 10]
    assert len(set(ids[0]) | set(ids[1]) | set(ids[2])) == 40
    assert ids[0][:2] == ["easy/0-sum_two", "easy/1-reverse_word"] and ids[1][0].startswith("easy/1000000-")
    expert = scenario.expert
    for task in tasks.warm_start:
        assert expert.plan(task) == [task.payload["reference_solution"]]
        assert scenario.prompts.reference_solution(task) == task.payload["reference_solution"]
        assert scenario.prompts.ground_truth_tests(task) == coding.stdio_tests(task)
    assert scenario.play_task(4, "easy", tmp_path).task_id == "easy/4-parity"
    few = make_scenario("coding", {"source": "easy", "max_tests": 4}).build_tasks(TaskCounts(2, 0, 0), tmp_path)
    assert [len(coding.stdio_tests(t)) for t in few.train] == [4, 4]


def test_reference_solution_only_for_stdio_tasks():
    prompts = make_scenario("coding").prompts
    humaneval = coding.humaneval_tasks()[0]
    assert prompts.reference_solution(humaneval) is None and prompts.ground_truth_tests(humaneval) == []
    demo = coding.builtin_stdio_tasks()[0]
    assert prompts.reference_solution(demo) == demo.payload["reference_solution"]


def test_unknown_source_is_a_config_error():
    with pytest.raises(ConfigError):
        CodingOptions(source="leetcode")
