"""The official ALFWorld games (`alfworld-download`: `json_2.1.1/{train,valid_seen,valid_unseen}`).

The game files of a split are listed by the `alfworld` package's own loader
(`AlfredTWEnv.collect_game_files`: task types kept, movable and sliced trajectories, games
without a file and unsolvable games skipped), sorted so every machine gets the same order.
A game becomes a `Task` of the same kind as the generated games, so the same engine plays it.
Its expert is the game file's `walkthrough`, the winning play `alfworld-generate` recorded.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

from rlanything_jax.agents.envs.base import Task

KIND = "alfworld"
# Split name -> the directory under json_2.1.1, as AlfredTWEnv names them (train_eval).
SPLIT_DIRS = {"train": "train", "eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}
_TASK_LINE = re.compile(r"Your task is to: ([^\"\n]*)")
_DATASET_KEYS = {"train": "data_path", "eval_in_distribution": "eval_id_data_path",
                 "eval_out_of_distribution": "eval_ood_data_path"}


def alfworld_config(data_dir: str, task_types: list[str]) -> dict:
    """The part of an alfworld config `AlfredTWEnv` reads to collect a split's games."""
    from alfworld.agents.environment.alfred_tw_env import TASK_TYPES

    ids = [number for number, name in TASK_TYPES.items() if name in task_types]
    dataset = {key: os.path.join(data_dir, SPLIT_DIRS[split]) for split, key in _DATASET_KEYS.items()}
    return {"env": {"task_types": ids, "goal_desc_human_anns_prob": 0},
            "dataset": {**dataset, "num_train_games": -1, "num_eval_games": -1}}


def game_files(data_dir: str, split: str, task_types: list[str]) -> list[str]:
    """The split's game files, as `AlfredTWEnv(config, split)` collects them, sorted."""
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    if split not in SPLIT_DIRS:
        raise ValueError(f"no ALFWorld split {split!r}; splits: {', '.join(SPLIT_DIRS)}")
    path = os.path.join(data_dir, SPLIT_DIRS[split])
    if not os.path.isdir(path):
        raise FileNotFoundError(f"tasks.data_dir: no {path} (get the games with `alfworld-download` and "
                                f"pass its json_2.1.1 directory)")
    collector = AlfredTWEnv.__new__(AlfredTWEnv)  # its __init__ only prints and collects
    collector.config, collector.train_eval = alfworld_config(data_dir, task_types), split
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        collector.collect_game_files(verbose=False)
    return sorted(collector.game_files)


def official_task(game_file: str, data_dir: str, split: str) -> Task:
    """The task of one official game: its type and goal types from the trajectory's traj_data.json, its goal
    the task line of the game's grammar (alfworld-generate picks one of several templates)."""
    trial_dir = os.path.dirname(os.path.abspath(game_file))
    with open(os.path.join(trial_dir, "traj_data.json")) as f:
        traj = json.load(f)
    with open(game_file) as f:
        task_line = _TASK_LINE.search(json.load(f)["grammar"])
    params = traj["pddl_params"]
    task_type = traj["task_type"]
    light = task_type == "look_at_obj_in_light"
    name = os.path.relpath(trial_dir, os.path.abspath(data_dir)).replace(os.sep, "/")
    task_id = f"{KIND}/{name}"
    return Task(task_id=task_id, kind=KIND, goal=task_line.group(1).strip() if task_line else "", payload={
        "game_file": os.path.abspath(game_file), "task_type": task_type, "split": split, "official": True,
        "goal_object_type": params["object_target"],
        "goal_receptacle_type": params["toggle_target"] if light else params["parent_target"],
        "floor_plan": f"FloorPlan{traj.get('scene', {}).get('scene_num', '')}", "raw_task_id": task_id,
    })


def split_tasks(data_dir: str, split: str, task_types: list[str]) -> list[Task]:
    return [official_task(path, data_dir, split) for path in game_files(data_dir, split, task_types)]


def walkthrough(task: Task) -> list[str]:
    """The winning commands `alfworld-generate` stored in the game file."""
    with open(task.payload["game_file"]) as f:
        return list(json.load(f).get("walkthrough") or [])
