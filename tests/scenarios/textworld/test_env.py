"""TextWorld games against the real engine: generation, caching, the Env and the expert."""

import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import pytest
import textworld.generator

from rlanything_jax.agents.envs.base import Observation, StepResult, make_env
from rlanything_jax.scenarios.textworld.env import (
    TextWorldEnv,
    TextWorldKnobs,
    clean_feedback,
    easier,
    expert_actions,
    expert_trajectory,
    harder,
    knobs_of,
    make_task,
    sanitize_command,
)

CUSTOM = TextWorldKnobs("custom", nb_rooms=3, nb_objects=5, quest_length=3)


@pytest.fixture(scope="session")
def games_dir(tmp_path_factory):
    """One game cache for the whole session (test_runner.py uses the same folder)."""
    path = tmp_path_factory.getbasetemp() / "textworld_games"
    path.mkdir(exist_ok=True)
    return path


def _sha1(path) -> str:
    """The story file's digest without its header's serial number (bytes 0x12-0x17): Inform
    stamps the compile date there (YYMMDD), so a run that crosses midnight would differ."""
    with open(path, "rb") as f:
        story = bytearray(f.read())
    story[0x12:0x18] = b"000000"
    return hashlib.sha1(story).hexdigest()


# ----------------------------------------------------------------------------- knobs


def test_harder_and_easier_move_one_notch_and_clamp():
    assert harder(TextWorldKnobs("coin_collector", level=5)).level == 6
    assert easier(TextWorldKnobs("coin_collector", level=1)).level == 1
    # Coin collector stays in its hundred: 100 -> 101 would shorten the quest to one step.
    assert harder(TextWorldKnobs("coin_collector", level=100)).level == 100
    assert easier(TextWorldKnobs("coin_collector", level=101)).level == 101
    assert harder(TextWorldKnobs("treasure_hunter", level=30)).level == 30
    assert easier(TextWorldKnobs("treasure_hunter", level=7)).level == 6
    up = harder(CUSTOM)
    assert (up.nb_rooms, up.nb_objects, up.quest_length) == (4, 7, 4)
    assert easier(up) == CUSTOM
    floor = TextWorldKnobs("custom", nb_rooms=1, nb_objects=1, quest_length=1)
    assert easier(floor) == floor


def test_knobs_reject_out_of_range_values():
    with pytest.raises(ValueError):
        TextWorldKnobs("treasure_hunter", level=31)
    with pytest.raises(ValueError):
        TextWorldKnobs("custom", quest_length=0)
    with pytest.raises(ValueError):
        TextWorldKnobs("cooking")


def test_fields_a_kind_ignores_do_not_make_knobs_differ():
    assert TextWorldKnobs("coin_collector", level=4, nb_rooms=9) == TextWorldKnobs("coin_collector", level=4)
    assert TextWorldKnobs("custom", level=7) == TextWorldKnobs("custom")


def test_distinct_knobs_have_distinct_names():
    knobs = [TextWorldKnobs("coin_collector", level=3), TextWorldKnobs("treasure_hunter", level=3),
             CUSTOM, harder(CUSTOM), dataclasses.replace(CUSTOM, nb_objects=6)]
    assert len({k.name for k in knobs}) == len(knobs)


# ----------------------------------------------------------------------------- commands and text


def test_sanitize_command_keeps_one_plain_command():
    assert sanitize_command("  go   north ") == "go north"
    assert sanitize_command("go south\ntake keycard") == "go south"
    assert sanitize_command("look. take coin") == "look"
    assert sanitize_command("inventory then look") == sanitize_command("inventory THEN look") == "inventory"
    assert sanitize_command("take caf\u00e9 \u2603") == "take caf"
    assert sanitize_command("x" * 1000) == "x" * 190
    assert sanitize_command("") == ""
    for meta in ("restart", "QUIT", "undo", "save game", "restore"):
        assert sanitize_command(meta) is None


def test_clean_feedback_drops_banner_status_line_and_restart_question():
    raw = ("\n\n  ______  __\n |      \\|  \\\n  \\$$$$$$| $$\n\nWelcome! Take the coin.\n\n-= Den =-\nA den.\n\n"
           ">                                   -= Den =-0/1")
    assert clean_feedback(raw) == "Welcome! Take the coin.\n\n-= Den =-\nA den."
    end = ("\nYou take the coin.\n\n                  *** The End ***\n\n"
           "You scored 1 out of a possible 1, in 2 turns.\n\n\n"
           "Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command?\n>      -= Den =-1/2")
    assert clean_feedback(end) == ("You take the coin.\n\n*** The End ***\n\n"
                                   "You scored 1 out of a possible 1, in 2 turns.")


# ----------------------------------------------------------------------------- generation


def test_task_is_plain_data_and_reproducible(games_dir, tmp_path):
    task = make_task(11, CUSTOM, games_dir)
    assert task.kind == "textworld" and task.goal
    assert json.loads(json.dumps(task.payload)) == task.payload
    assert knobs_of(task) == CUSTOM and task.payload["seed"] == 11
    again = make_task(11, CUSTOM, tmp_path)  # generated afresh elsewhere
    assert _sha1(again.payload["game_path"]) == _sha1(task.payload["game_path"])
    assert (again.goal, again.task_id) == (task.goal, task.task_id)
    other = make_task(12, CUSTOM, games_dir)
    assert _sha1(other.payload["game_path"]) != _sha1(task.payload["game_path"])


def test_cached_game_is_reused(games_dir, monkeypatch):
    task = make_task(11, CUSTOM, games_dir)
    mtime = os.path.getmtime(task.payload["game_path"])

    def no_generation(*args, **kwargs):
        raise AssertionError("a cached game was generated again")

    # The second call loads the JSON: it neither generates nor compiles, nor rewrites the file.
    monkeypatch.setattr(textworld.generator, "make_game", no_generation)
    monkeypatch.setattr(textworld.generator, "compile_game", no_generation)
    assert make_task(11, CUSTOM, games_dir) == task
    assert os.path.getmtime(task.payload["game_path"]) == mtime


@pytest.mark.slow
def test_generation_does_not_depend_on_the_python_hash_seed(games_dir, tmp_path):
    knobs = TextWorldKnobs("coin_collector", level=4)
    task = make_task(5, knobs, games_dir)
    code = ("import sys; from rlanything_jax.scenarios.textworld.env import make_task, TextWorldKnobs; "
            "print(make_task(5, TextWorldKnobs('coin_collector', level=4), sys.argv[1]).payload['game_path'])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()[-1]
    assert _sha1(out) == _sha1(task.payload["game_path"])


# ----------------------------------------------------------------------------- playing


def test_env_is_registered_and_shows_objective_and_admissible_commands(games_dir):
    task = make_task(11, CUSTOM, games_dir)
    env = make_env("textworld")
    assert isinstance(env, TextWorldEnv)
    obs = env.reset(task)
    assert isinstance(obs, Observation)
    assert task.goal in obs.text and "$$" not in obs.text and "-= " in obs.text
    assert "look" in obs.admissible_actions and "inventory" in obs.admissible_actions
    env.close()


def test_invalid_commands_do_not_crash_or_desynchronise(games_dir):
    task = make_task(11, CUSTOM, games_dir)
    plan = expert_actions(task)
    env = TextWorldEnv()
    first = env.reset(task)
    junk = ["", "   ", "xyzzy plugh", "take the moon", "\u2603\u00e9", "x" * 5000, "restart", "quit",
            "undo", f"look\n{plan[0]}", "save"]
    for command in junk:
        result = env.step(command)
        assert isinstance(result, StepResult) and not result.done and not result.won
        assert result.observation.admissible_actions == first.admissible_actions  # nothing moved
    results = [env.step(action) for action in plan]  # the expert still wins from here
    assert results[-1].done and results[-1].won and not any(r.done for r in results[:-1])
    after = env.step("look")  # a finished episode stays finished
    assert after.done and after.won
    env.close()


def test_taking_the_wrong_object_loses_a_treasure_hunt(games_dir):
    task = make_task(2, TextWorldKnobs("treasure_hunter", level=1), games_dir)
    env = TextWorldEnv()
    obs = env.reset(task)
    target = env.expert_plan()[-1]
    wrong = next(a for a in obs.admissible_actions if a.startswith("take ") and a != target)
    result = env.step(wrong)
    assert result.done and not result.won and result.info["lost"] and result.observation.admissible_actions == ()
    assert env.step(target) == result and env.expert_plan() == []  # a lost game stays lost
    env.close()


def test_reset_replays_identically(games_dir):
    task = make_task(11, CUSTOM, games_dir)
    env = TextWorldEnv()
    runs = []
    for _ in range(2):
        runs.append([env.reset(task)] + [env.step(a) for a in ["look", "inventory", *expert_actions(task)]])
    assert runs[0] == runs[1]
    env.close()


EXPERT_CASES = [
    (TextWorldKnobs("coin_collector", level=1), 1),
    (TextWorldKnobs("coin_collector", level=5), 2),
    (TextWorldKnobs("treasure_hunter", level=1), 1),
    (TextWorldKnobs("treasure_hunter", level=8), 2),
    (CUSTOM, 11),
    (TextWorldKnobs("custom", nb_rooms=1, nb_objects=1, quest_length=1), 3),
]
SLOW_EXPERT_CASES = [
    (TextWorldKnobs("coin_collector", level=25), 3),
    (TextWorldKnobs("coin_collector", level=110), 4),
    (TextWorldKnobs("treasure_hunter", level=15), 3),
    (TextWorldKnobs("treasure_hunter", level=20), 4),
    (harder(harder(CUSTOM)), 5),
    (TextWorldKnobs("custom", nb_rooms=8, nb_objects=12, quest_length=6), 6),
]


def _check_expert_wins(task):
    trajectory = expert_trajectory(task)
    assert trajectory.won, f"expert lost {task.task_id}"
    assert trajectory.steps and all(s.action in s.admissible_actions for s in trajectory.steps)
    assert task.goal in trajectory.steps[0].observation
    assert [s.action for s in trajectory.steps] == expert_actions(task)


@pytest.mark.parametrize("knobs,seed", EXPERT_CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_expert_wins(games_dir, knobs, seed):
    _check_expert_wins(make_task(seed, knobs, games_dir))


@pytest.mark.slow
@pytest.mark.parametrize("knobs,seed", SLOW_EXPERT_CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_expert_wins_harder_games(games_dir, knobs, seed):
    _check_expert_wins(make_task(seed, knobs, games_dir))
