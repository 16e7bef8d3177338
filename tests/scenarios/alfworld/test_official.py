"""Official ALFWorld data: a json_2.1.1 directory in the official layout, its game files made by the
`alfworld` package's own `alfworld-generate` (its hand-coded expert decides solvability and writes the
walkthrough), listed by our loader as `AlfredTWEnv` lists them, and won by our expert in our engine."""

import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from rlanything_jax.agents.scenario import TaskCounts
from rlanything_jax.scenarios import make_scenario
from rlanything_jax.scenarios.alfworld import gen, official
from rlanything_jax.scenarios.alfworld.env import GameKnobs, expert_trajectory
from rlanything_jax.scenarios.alfworld.pddl import parse_problem

KNOBS = GameKnobs(num_receptacles=5, num_distractors=0, rarity=0, target_instances=1)
# (split directory, task type, seed) of the games; every split gets two types.
GAMES = [("train", "pick_and_place_simple", 1), ("train", "pick_and_place_simple", 2),
         ("train", "pick_heat_then_place_in_recep", 3), ("valid_seen", "look_at_obj_in_light", 4),
         ("valid_seen", "pick_and_place_simple", 5), ("valid_unseen", "pick_cool_then_place_in_recep", 6),
         ("valid_unseen", "pick_clean_then_place_in_recep", 7)]


def _traj_data(scene) -> dict:
    light = scene.task_type == "look_at_obj_in_light"
    return {"task_type": scene.task_type, "scene": {"scene_num": scene.floor_plan},
            "pddl_params": {"object_target": scene.goal_object_type, "object_sliced": False, "mrecep_target": "",
                            "parent_target": "" if light else scene.goal_receptacle_type,
                            "toggle_target": scene.goal_receptacle_type if light else ""}}


def _write_trial(root, split, name, traj, problem) -> str:
    trial = os.path.join(root, split, name, "trial_T20190101_000000_000000")
    os.makedirs(trial)
    with open(os.path.join(trial, "traj_data.json"), "w") as f:
        json.dump(traj, f)
    if problem is not None:
        with open(os.path.join(trial, "initial_state.pddl"), "w") as f:
            f.write(problem)
    return trial


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """ALFRED trajectories (traj_data.json + initial_state.pddl) turned into game files by alfworld-generate."""
    root = tmp_path_factory.mktemp("alfred")
    ref, out = str(root / "ref"), str(root / "json_2.1.1")
    expected = {}
    for split, task_type, seed in GAMES:
        scene = gen.sample_scene(seed, task_type, KNOBS)
        name = f"{task_type}-{scene.goal_object_type}-None-{scene.goal_receptacle_type}-{scene.floor_plan}-{seed}"
        trial = _write_trial(ref, split, name, _traj_data(scene), gen.problem_text(scene, f"plan_{seed}"))
        expected.setdefault(split, []).append(os.path.join(trial.replace(ref, out), "game.tw-pddl"))
    # Trajectories the loader must skip: movable and sliced ones, one without a game file.
    scene = gen.sample_scene(8, "pick_and_place_simple", KNOBS)
    _write_trial(ref, "train", "pick_and_place_with_movable_recep-Apple-Bowl-Fridge-1", _traj_data(scene),
                 gen.problem_text(scene, "plan_movable"))
    _write_trial(ref, "valid_seen", "pick_and_place_simple-AppleSliced-None-Fridge-1", _traj_data(scene),
                 gen.problem_text(scene, "plan_sliced"))
    _write_trial(ref, "valid_unseen", "pick_and_place_simple-Apple-None-Fridge-2", _traj_data(scene), None)
    logic = root / "logic"
    logic.mkdir()
    shutil.copy(os.path.join(gen.data_dir(), "alfred.pddl"), logic / "alfred.pddl")
    shutil.copy(os.path.join(gen.data_dir(), "alfred.twl2"), logic / "alfred.twl2")
    script = os.path.join(os.path.dirname(sys.executable), "alfworld-generate")
    # Its --end slices the sorted trajectories ([start:end]), -1 would drop the last one.
    subprocess.run([sys.executable, script, "--data_path", ref, "--save_path", out, "--end", "100",
                    "--domain", str(logic / "alfred.pddl"), "--grammar", str(logic / "alfred.twl2")],
                   check=True, capture_output=True, timeout=600)
    # An unsolvable game (as alfworld-generate marks one) and one never checked: both skipped.
    for name, solvable in (("unsolvable", {"solvable": False}), ("unchecked", {})):
        trial = _write_trial(out, "train", f"pick_and_place_simple-Apple-None-Fridge-{name}", _traj_data(scene), None)
        with open(os.path.join(trial, "game.tw-pddl"), "w") as f:
            json.dump({"pddl_domain": "", "grammar": "", "pddl_problem": "", **solvable}, f)
    return out, expected


def _alfredtwenv_files(data_dir, split, task_types):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    return sorted(AlfredTWEnv(official.alfworld_config(data_dir, task_types), split).game_files)


@pytest.mark.parametrize("task_types", [list(gen.TASK_TYPES), ["pick_and_place_simple", "look_at_obj_in_light"]])
def test_splits_list_the_games_alfredtwenv_lists(data_dir, task_types):
    root, expected = data_dir
    for split, directory in official.SPLIT_DIRS.items():
        ours = official.game_files(root, split, task_types)
        assert ours == _alfredtwenv_files(root, split, task_types)
        wanted = [p for p in expected[directory] if os.path.basename(os.path.dirname(os.path.dirname(p)))
                  .split("-")[0] in task_types]
        assert ours == sorted(wanted)  # the hand-coded expert solved every generated game


def test_scenario_tasks_from_the_official_splits_and_the_expert_wins(data_dir):
    root, expected = data_dir
    scenario = make_scenario("alfworld", {"data_dir": root})
    sets = scenario.build_tasks(TaskCounts(train=2, eval=1, warm_start=1), root)
    by_split = {"train": sets.train + sets.warm_start, **sets.splits}
    assert sets.eval == sets.split("eval_in_distribution")[:1]
    for split, directory in official.SPLIT_DIRS.items():
        assert [t.payload["game_file"] for t in by_split[split]] == sorted(expected[directory])
    for task in [t for tasks in by_split.values() for t in tasks]:
        with open(task.payload["game_file"]) as f:
            game = json.load(f)
        assert f"Your task is to: {task.goal}" in game["grammar"]  # the task line the game shows
        facts = parse_problem(game["pddl_problem"])
        assert task.payload["goal_object_type"] in facts.object_type.values()
        assert scenario.walkthrough(task) == game["walkthrough"]
        assert expert_trajectory(task).won, task.task_id
    played = scenario.play_task(5, "pick_heat_then_place_in_recep", root)
    assert played.payload["split"] == "train" and played.payload["task_type"] == "pick_heat_then_place_in_recep"


def test_missing_data_dir_says_what_to_get(tmp_path):
    scenario = make_scenario("alfworld", {"data_dir": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        scenario.build_tasks(TaskCounts(train=1, eval=1, warm_start=0), tmp_path)


@pytest.mark.parametrize("split", ["eval_in_distribution", "eval_out_of_distribution"])
def test_the_evaluate_command_plays_every_game_alfredtwenv_lists_and_the_expert_wins(data_dir, split, tmp_path,
                                                                                    capsys):
    from rlanything_jax import evaluate

    root, _ = data_dir
    config = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs", "alfworld.py:smoke")
    code = evaluate.main([f"--config={config}", f"--config.tasks.data_dir={root}", f"--split={split}",
                          f"--config.tasks.task_types={','.join(gen.TASK_TYPES)}", "--config.env.num_train_tasks=1",
                          "--config.env.num_eval_tasks=1", "--policy=expert",
                          f"--out={tmp_path}", "--traces=0"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    summary = json.loads(captured.out.strip().splitlines()[-1])
    expected = _alfredtwenv_files(root, split, list(gen.TASK_TYPES))
    assert summary["split"] == split and summary["num_tasks"] == len(expected) == 2
    assert summary["success_rate"] == 1.0
