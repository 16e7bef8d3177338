"""Task generators on real games, the real sandbox and a real (tiny, random) environment model.

The model's answers that matter are hand-written and fed to the deterministic part
(`goal_candidate_from_outputs`, `problem_candidate_from_outputs`): our parsers, the goal
rewrite and its engine check. The random model only shows that nonsense is counted, not raised.
"""

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from rlanything_jax.agents.curriculum.generators import (
    ProceduralGenerator,
    derived_seed,
)
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.scenario import GeneratorContext
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.scenarios.alfworld import env as alfworld
from rlanything_jax.scenarios.alfworld import gen
from rlanything_jax.scenarios.alfworld.generators import procedural_maker
from rlanything_jax.scenarios.alfworld.goal_rewrite import (
    failure_summary_prompt,
    goal_candidate_from_outputs,
    high_risk_steps,
    normalize_type_name,
    rejection_class,
)
from rlanything_jax.scenarios.alfworld.knobs import GameKnobs, easier_knobs, harder_knobs
from rlanything_jax.scenarios.alfworld.pddl import parse_problem
from rlanything_jax.scenarios.coding import env as coding
from rlanything_jax.scenarios.coding.problems import (
    measured_pass_rates,
    problem_candidate_from_outputs,
    problem_prompt,
)
from tests.scenarios.generator_inputs import THREE_SUMS, failed_alfworld_episodes, problem_json, step_record


def _problem(task):
    with open(task.payload["game_file"]) as f:
        return json.load(f)["pddl_problem"]


def _plays_to_a_win(task) -> bool:
    env = alfworld.AlfworldEnv()
    try:
        observation, result = env.reset(task), None
        for command in alfworld.expert_actions(task):
            assert command in observation.admissible_actions, command
            result = env.step(command)
            observation = result.observation
        return bool(result and result.won)
    finally:
        env.close()


# ---------------------------------------------------------------- procedural


@pytest.mark.parametrize("direction,move", [("harder", harder_knobs), ("easier", easier_knobs)])
def test_procedural_alfworld_moves_one_notch_and_the_expert_wins(direction, move, games_dir, tmp_path):
    raw = alfworld.make_task(0, "pick_heat_then_place_in_recep", GameKnobs(), games_dir)
    generator = ProceduralGenerator(procedural_maker(tmp_path / "a"))
    candidate, _ = generator.propose(raw, raw, direction, 0.5, [], step=3)
    assert candidate is not None and candidate.kind == "alfworld"
    assert alfworld.knobs_of(candidate) == move(GameKnobs()) != GameKnobs()
    assert candidate.payload["task_type"] == raw.payload["task_type"]
    assert candidate.payload["raw_task_id"] == raw.task_id and candidate.payload["proposed_by"] == "procedural"
    assert candidate.task_id != raw.task_id
    assert _plays_to_a_win(candidate)

    # Reproducible: a fresh generator elsewhere makes the same game; another step a different one.
    again, _ = ProceduralGenerator(procedural_maker(tmp_path / "b")).propose(raw, raw, direction, 0.5, [], step=3)
    assert again.task_id == candidate.task_id
    assert _problem(again) == _problem(candidate)
    later, _ = generator.propose(raw, candidate, direction, 0.5, [], step=4)
    assert later.task_id not in (candidate.task_id, raw.task_id)


def test_procedural_returns_none_at_the_ends_of_the_ladders_and_coding_has_none(tmp_path):
    from rlanything_jax.scenarios.textworld import procedural_maker as textworld_maker

    generator = ProceduralGenerator(procedural_maker(tmp_path))
    at_limit = []
    hardest = GameKnobs(num_receptacles=30, num_distractors=20, rarity=2, hidden_in_closed=True, target_instances=1)
    easiest = GameKnobs(num_receptacles=4, num_distractors=0, rarity=0, hidden_in_closed=False, target_instances=3)
    for knobs, direction in ((hardest, "harder"), (easiest, "easier")):
        raw = Task("alfworld/limit", "alfworld", "x", {"knobs": dataclasses.asdict(knobs), "seed": 0,
                                                      "task_type": "pick_and_place_simple"})
        candidate, counts = generator.propose(raw, raw, direction, 0.5, [], step=1)
        assert candidate is None
        at_limit.append(counts["procedural/alfworld/knobs_at_limit"])
    coin = Task("textworld/coin", "textworld", "x", {"knobs": {"kind": "coin_collector", "level": 1}, "seed": 0})
    textworld_generator = ProceduralGenerator(textworld_maker(tmp_path))
    candidate, counts = textworld_generator.propose(coin, coin, "easier", 0.1, [], step=1)
    assert candidate is None
    assert at_limit == [1, 1]
    assert counts == {"procedural/textworld/knobs_at_limit": 1}
    # Coding problems have no knobs: without the environment model the scenario has no generator.
    assert make_scenario("coding").task_generator(GeneratorContext("procedural", tmp_path)) is None
    assert not list(tmp_path.iterdir())  # nothing generated


def test_procedural_textworld_moves_one_notch_and_the_expert_wins(tmp_path):
    from rlanything_jax.scenarios.textworld import env as tw

    knobs = tw.TextWorldKnobs(kind="custom", nb_rooms=2, nb_objects=3, quest_length=2)
    raw = tw.make_task(3, knobs, tmp_path / "raw")
    generator = make_scenario("textworld").task_generator(GeneratorContext("procedural", tmp_path / "generated"))
    candidate, _ = generator.propose(raw, raw, "harder", 1.0, [], step=2)
    assert tw.knobs_of(candidate) == tw.harder(knobs) != knobs
    assert candidate.task_id != raw.task_id and candidate.payload["raw_task_id"] == raw.task_id
    assert candidate.payload["seed"] == derived_seed(raw, 2, 0)
    assert tw.expert_trajectory(candidate).won


# ---------------------------------------------------------------- ALFWorld: answers -> rewritten task


def test_type_names_are_normalised_to_alfworld_spelling():
    cases = {"apple": "Apple", "sinkbasin": "SinkBasin", "Sink Basin": "SinkBasin", "sink_basin": "SinkBasin",
             "**Mug**": "Mug", "AppleType": "Apple", "appletype": "Apple", "apples": "Apple",
             "tomatoes": "Tomato", "desklamp": "DeskLamp", "Fridge.": "Fridge"}
    for written, canonical in cases.items():
        assert normalize_type_name(written) == canonical, written
    for nonsense in ("", "  ", "xyzzy", "Banana", "<OBJ_TYPE>"):
        assert normalize_type_name(nonsense) is None, nonsense


def test_rejection_reasons_have_classes():
    assert rejection_class("no Apple in this room") == "absent"
    assert rejection_class("no Bed receptacle in this room") == "absent"
    assert rejection_class("a Fridge cannot contain a Pillow") == "cannot_contain"
    assert rejection_class("a Pillow cannot be cooled (not coolable), which x needs") == "lacks_capability"
    assert rejection_class("something new") == "other"


def _deployable_pairs(raw, scratch, count):
    """Pairs the goal rewrite accepts in this room (found with rewrite_goal itself)."""
    facts = parse_problem(_problem(raw))
    old = (raw.payload["goal_object_type"], raw.payload["goal_receptacle_type"])
    found = []
    for rec, obj in sorted(facts.can_contain):
        if (obj, rec) == old or obj not in gen.PICKUPABLE_TYPES:
            continue
        if not isinstance(alfworld.rewrite_goal(raw, obj, rec, scratch), alfworld.RewriteRejected):
            found.append((obj, rec))
            if len(found) == count:
                return found
    raise AssertionError("no deployable goal in the test room")


def test_goal_outputs_become_the_first_deployable_rewrite(raw_alfworld, tmp_path):
    (obj, rec), (obj2, rec2) = _deployable_pairs(raw_alfworld, str(tmp_path / "oracle"), 2)
    facts = parse_problem(_problem(raw_alfworld))
    absent = next(t for t in sorted(gen.PICKUPABLE_TYPES) if t not in set(facts.object_type.values()))
    texts = [
        "I would pick something rarer.",                             # no box
        "\\boxed{Banana, Fridge}",                                   # not an ALFWorld type
        f"so the answer is \\boxed{{{absent}, {rec}}}",              # not in this room
        f"\\boxed{{{absent},{rec}}}",                                # same pair again
        f"reasoning \\boxed{{draft}} ... \\boxed{{{rec.lower()}, {obj.lower()}}}",  # swapped, lowercase
        f"\\boxed{{{obj2}, {rec2}}}",                                # valid too, but a later attempt
    ]
    out = str(tmp_path / "out")
    task, counts = goal_candidate_from_outputs(raw_alfworld, texts, out)
    assert (task.payload["goal_object_type"], task.payload["goal_receptacle_type"]) == (obj, rec)
    assert task.payload["raw_task_id"] == raw_alfworld.task_id and task.task_id != raw_alfworld.task_id
    assert _plays_to_a_win(task)
    assert counts == {"parse/no_boxed": 1, "parse/ok": 5, "unparseable": 1, "parsed": 5,
                      "rejected/unknown_type": 1, "rejected/absent": 1, "duplicate": 1, "accepted": 1,
                      "not_tried": 1}

    # Same answers, same task id (stable); the active task's own goal is not proposed again.
    again, _ = goal_candidate_from_outputs(raw_alfworld, texts, out)
    assert again.task_id == task.task_id
    other, counts = goal_candidate_from_outputs(raw_alfworld, texts, out, exclude_ids={task.task_id})
    assert (other.payload["goal_object_type"], other.payload["goal_receptacle_type"]) == (obj2, rec2)
    assert counts["rejected/same_as_active"] == 1


def test_goal_outputs_without_a_deployable_rewrite_give_none(raw_alfworld, tmp_path):
    old_obj, old_rec = raw_alfworld.payload["goal_object_type"], raw_alfworld.payload["goal_receptacle_type"]
    texts = [None, "", "\\boxed{}", "\\boxed{Apple", f"\\boxed{{{old_obj} {old_rec}}}", "\\boxed{Pillow, Fridge, x}",
             "\x00\ufffd" * 100]
    task, counts = goal_candidate_from_outputs(raw_alfworld, texts, str(tmp_path))
    assert task is None
    assert counts["not_generated"] == 1 and counts["parse/space_separated"] == 1
    assert counts["rejected/unchanged"] == 1
    assert counts["parsed"] + counts["unparseable"] + counts["not_generated"] == len(texts)
    assert not list(Path(tmp_path).iterdir())  # rejected rewrites leave no game behind


def test_failure_summary_prompt_marks_steps_all_votes_called_bad(raw_alfworld):
    lost, _, unjudged = failed_alfworld_episodes(raw_alfworld)
    assert high_risk_steps(lost) == (1,) and high_risk_steps(unjudged) == ()
    text = failure_summary_prompt(lost)[-1]["content"]
    assert "High-risk steps (always -1): [1]" in text
    assert "[2] action: " in text and "[3] observation: Nothing happens." in text
    assert "High-risk" not in failure_summary_prompt(unjudged)[-1]["content"]


# ---------------------------------------------------------------- coding: answers -> new problem


def test_problem_outputs_become_the_first_well_formed_stdio_task(sum_two):
    raw_pairs = list(zip(sum_two.payload["test_input"], sum_two.payload["test_output"]))
    texts = [
        "no json here",
        problem_json("Sum three integers.", THREE_SUMS[:3]),                # too few tests
        problem_json(sum_two.payload["question"], raw_pairs, fenced=False),  # the raw problem again
        problem_json("Read three integers on one line and print their sum.", THREE_SUMS),
        problem_json("Another problem.", THREE_SUMS),
    ]
    task, counts = problem_candidate_from_outputs(sum_two, texts, min_tests=4, max_tests=5)
    assert counts == {"parse/invalid_json": 1, "parse/too_few_tests": 1, "parse/ok": 2, "unparseable": 2,
                      "parsed": 2, "rejected/unchanged": 1, "accepted": 1, "not_tried": 1}
    assert task.kind == "coding" and task.payload["format"] == "stdio"
    assert task.goal.startswith("Read three integers")
    assert task.payload["test_input"] == [i for i, _ in THREE_SUMS[:5]]              # first max_tests
    assert task.payload["test_time_limit"] == sum_two.payload["test_time_limit"]    # not the model's 99
    assert task.task_id.startswith(sum_two.task_id + "/gen-")
    verdicts = coding.task_verdicts(task, "print(sum(map(int, input().split())))")
    assert verdicts == [coding.PASSED] * 5

    again, _ = problem_candidate_from_outputs(sum_two, texts, min_tests=4, max_tests=5)
    assert again.task_id == task.task_id
    other, counts = problem_candidate_from_outputs(sum_two, texts, min_tests=4, max_tests=5,
                                                   exclude_ids={task.task_id})
    assert other.goal == "Another problem." and counts["rejected/same_as_active"] == 1


def test_pass_rates_are_measured_from_the_episodes_programs(sum_two):
    programs = ["a, b = map(int, input().split())\nprint(a + b)", "print(0)", ""]
    episodes = [Episode(task=sum_two, group_index=g, steps=[step_record(sum_two.goal, p)])
                for g, p in enumerate(programs)]
    crashed = Episode(task=sum_two, group_index=3, steps=[step_record(sum_two.goal, "print(0)")], env_error="killed")
    other_task = dataclasses.replace(sum_two, task_id="demo/other")
    elsewhere = Episode(task=other_task, group_index=0, steps=[step_record(sum_two.goal, "print(0)")])
    rates = measured_pass_rates(sum_two, episodes + [crashed, elsewhere])
    # Tests: 1+2=3, -5+5=0, 1e9+1e9, 0+0=0, -7-8: "print(0)" passes the two zeros, "" runs nothing.
    assert rates == pytest.approx((1 / 3, 2 / 3, 1 / 3, 2 / 3, 1 / 3))
    user = problem_prompt(sum_two, sum_two, "harder", rates)[-1]["content"]
    assert '"pass_rate": 0.6667' in user and "make the new problem harder" in user
