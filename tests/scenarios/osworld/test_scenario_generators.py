"""Desktop task rewrites: the environment model's one-key answers, read defensively, and the knob moves."""

from rlanything_jax.scenarios import make_scenario
from rlanything_jax.scenarios.osworld.bundled_tasks import bundled_tasks
from rlanything_jax.scenarios.osworld.generators import (
    KnobGenerator,
    parse_rewrite,
    rewrite_prompt,
    rewritten_task,
    with_variants,
)
from rlanything_jax.scenarios.osworld.tasks import task_from_json

TEMPLATE = {"evaluator1": "Rename dir1 and dir2.", "evaluator2": "Rename dir1, dir2 and dir3."}


def test_rewrites_parse_to_one_template_key_or_a_counted_fallback():
    assert parse_rewrite('thinking... {"evaluator2": " Rename dir1, dir2 and dir3 now. "}', TEMPLATE) == \
        (("evaluator2", "Rename dir1, dir2 and dir3 now."), "ok")
    assert parse_rewrite('{"current_task": {"evaluator1": "x"}}', TEMPLATE)[0] == ("evaluator1", "x")
    assert parse_rewrite("{'evaluator1': 'python literal'}", TEMPLATE)[0] == ("evaluator1", "python literal")
    for text, status in [("", "empty"), (None, "empty"), ("no json", "no_json"),
                         ('{"evaluator1": "a", "evaluator2": "b"}', "not_one_key"),
                         ('{"evaluator9": "a"}', "unknown_key"), ('{"evaluator1": ""}', "empty_instruction"),
                         ('{"evaluator1": "' + "x" * 2000 + '"}', "too_long"), ("{" * 5000, "no_json")]:
        assert parse_rewrite(text, TEMPLATE) == (None, status)


def test_a_rewrite_plays_the_chosen_evaluator_with_the_new_instruction():
    data = {"id": "t", "instruction": "old", "config": [], "evaluator": {"func": "infeasible"},
            "task_template": TEMPLATE, "current_task": {"evaluator1": TEMPLATE["evaluator1"]},
            "evaluator_list": {"evaluator1": {"func": "infeasible"}, "evaluator2": {"func": "exact_match"}}}
    task = task_from_json(rewritten_task(data, "evaluator2", "new words"))
    assert (task.variant, task.instruction, task.evaluator["func"]) == ("evaluator2", "new words", "exact_match")
    plain = with_variants(bundled_tasks("train")[0])   # a task without variants offers its own instruction
    assert list(plain["task_template"]) == ["evaluator1"]
    assert "Goal: make the task HARDER." in rewrite_prompt(plain, "harder")[1]["content"]


def test_knob_rewrites_move_from_the_active_task():
    scenario = make_scenario("osworld", {"provider": "local"})
    raw = scenario.make_task(bundled_tasks("train")[0])
    generator = KnobGenerator(scenario.make_task)
    harder, _ = generator.propose(raw, raw, "harder", 1.0, [], 1)
    assert harder.payload["source"]["rla_knobs"]["n"] == 2 and harder.payload["raw_task_id"] == raw.task_id
    again, _ = generator.propose(raw, harder, "harder", 1.0, [], 2)
    assert again.payload["source"]["rla_knobs"]["n"] == 3
    hinted, _ = generator.propose(raw, raw, "easier", 0.0, [], 1)   # n = 1: easier adds a hint
    assert hinted.payload["source"]["rla_knobs"]["hint"] == 1 and hinted.goal.startswith(raw.goal + " (Hint:")
    spelled_out, _ = generator.propose(raw, hinted, "easier", 0.0, [], 2)
    # The whole command: the easiest.
    assert generator.propose(raw, spelled_out, "easier", 0.0, [], 3) == (None, {"osworld/knobs/at_limit": 1})
