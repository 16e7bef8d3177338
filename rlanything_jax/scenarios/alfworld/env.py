"""ALFWorld text games: the environment, generated tasks, the expert and the goal rewrite.

`make_task` writes a generated `game.tw-pddl` (see `alfworld_gen`) and returns its `Task`;
`AlfworldEnv` plays it through TextWorld's PDDL engine with ALFWorld's demangler (the same
stack as alfworld's `AlfredTWEnv`); `expert_actions` / `expert_trajectory` give a winning
walkthrough (warm-start data); `rewrite_goal` is the environment model's move (swap the two
goal types in :goal, as the reference's `create_synthetic_task`, but also in the task line,
and only accept it when the expert still wins); `summarize_init` is the text that model reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
from typing import Any

from rlanything_jax.agents.envs.base import Observation, StepResult, Task, register_env
from rlanything_jax.scenarios.alfworld import gen, official
from rlanything_jax.scenarios.alfworld.engine import keep_argv, new_engine
from rlanything_jax.scenarios.alfworld.expert import NoPlan, plan_commands
from rlanything_jax.scenarios.alfworld.knobs import GameKnobs, easier_knobs, harder_knobs, knobs_difficulty  # noqa: F401
from rlanything_jax.scenarios.alfworld.pddl import (
    ProblemFacts,
    known_type,
    parse_problem,
    replace_goal,
    summarize_facts,
)

KIND = "alfworld"


# ---------------------------------------------------------------- tasks

def _knobs_tag(knobs: GameKnobs) -> str:
    return (f"r{knobs.num_receptacles}d{knobs.num_distractors}x{knobs.rarity}"
            f"h{int(knobs.hidden_in_closed)}n{knobs.target_instances}")


def _write_game(path: str, problem: str, goal_sentence: str, walkthrough: list[str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"   # processes of one run may write the same game at once
    with open(tmp, "w") as f:
        f.write(gen.game_json(problem, goal_sentence, walkthrough))
    os.replace(tmp, path)  # a concurrent reader never sees half a file


def make_task(seed: int, task_type: str, knobs: GameKnobs, out_dir: str) -> Task:
    """Generates the game for (seed, task_type, knobs) under out_dir and returns its task."""
    scene = gen.sample_scene(seed, task_type, knobs)
    name = f"{task_type}-{scene.goal_object_type}-{scene.goal_receptacle_type}-{seed}-{_knobs_tag(knobs)}"
    problem = gen.problem_text(scene, f"plan_{name.replace('-', '_')}")
    walkthrough = plan_commands(parse_problem(problem), task_type, scene.goal_object_type, scene.goal_receptacle_type)
    path = os.path.abspath(os.path.join(out_dir, name, "game.tw-pddl"))
    _write_game(path, problem, scene.goal_text, walkthrough)
    task_id = f"{KIND}/{name}"
    return Task(task_id=task_id, kind=KIND, goal=scene.goal_text + ".", payload={
        "game_file": path, "task_type": task_type, "seed": seed, "knobs": dataclasses.asdict(knobs),
        "goal_object_type": scene.goal_object_type, "goal_receptacle_type": scene.goal_receptacle_type,
        "floor_plan": scene.floor_plan, "raw_task_id": task_id,
    })


def knobs_of(task: Task) -> GameKnobs:
    return GameKnobs(**task.payload["knobs"])


def _load_game(task: Task) -> dict[str, Any]:
    with open(task.payload["game_file"]) as f:
        return json.load(f)


def _facts(task: Task) -> ProblemFacts:
    return parse_problem(_load_game(task)["pddl_problem"])


# ---------------------------------------------------------------- the environment

class AlfworldEnv:
    """One ALFWorld game at a time. The engine (and its fast-downward library copy) is built once
    and reused; a reset of the game already loaded skips re-reading the file."""

    def __init__(self) -> None:
        self._engine = None
        self._loaded: tuple | None = None  # (path, mtime, size) of the game in the engine
        self._admissible: tuple[str, ...] = ()

    def reset(self, task: Task) -> Observation:
        if self._engine is None:
            self._engine = new_engine()
        path = task.payload["game_file"]
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size)
        with keep_argv():
            if key != self._loaded:
                self._loaded = None  # stays None if loading fails
                self._engine.load(path)
                self._loaded = key
            state = self._engine.reset()
        return self._observe(state)

    def step(self, action: str) -> StepResult:
        if self._engine is None or self._loaded is None:
            raise RuntimeError("AlfworldEnv.step before reset")
        valid = action.strip() in self._admissible
        state, _, _ = self._engine.step(action)
        won = bool(state["won"])
        # The reference stops an episode once it is won; an unknown command answers "Nothing happens."
        return StepResult(self._observe(state), done=won, won=won, info={"valid_command": valid})

    def _observe(self, state) -> Observation:
        self._admissible = tuple(state["admissible_commands"])
        return Observation(text=state.feedback, admissible_actions=self._admissible)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
        self._engine, self._loaded = None, None


register_env(KIND, AlfworldEnv)


# ---------------------------------------------------------------- the expert

def expert_actions(task: Task) -> list[str]:
    """The expert's full winning walkthrough for the task's game (no engine needed)."""
    p = task.payload
    if p.get("official"):
        return official.walkthrough(task)
    return plan_commands(_facts(task), p["task_type"], p["goal_object_type"], p["goal_receptacle_type"])


@dataclasses.dataclass(frozen=True)
class ExpertTrajectory:
    steps: tuple[tuple[str, tuple[str, ...], str], ...]  # (observation, admissible actions, chosen command)
    won: bool
    final_observation: str


_shared_env: AlfworldEnv | None = None


def _private_env() -> AlfworldEnv:
    global _shared_env  # one engine per process for expert runs, apart from any env a caller holds
    if _shared_env is None:
        _shared_env = AlfworldEnv()
    return _shared_env


def expert_trajectory(task: Task, env: AlfworldEnv | None = None) -> ExpertTrajectory:
    """Plays the expert's walkthrough in the real engine and records what the agent would see."""
    env = env or _private_env()
    observation = env.reset(task)
    steps, won = [], False
    for command in expert_actions(task):
        if command not in observation.admissible_actions:  # stop where the plan and the game disagree
            break
        result = env.step(command)
        steps.append((observation.text, observation.admissible_actions, command))
        observation, won = result.observation, result.won
        if result.done:
            break
    return ExpertTrajectory(tuple(steps), won, observation.text)


# ---------------------------------------------------------------- goal rewrite and the :init summary

@dataclasses.dataclass(frozen=True)
class RewriteRejected:
    reason: str


def _check_rewrite(facts: ProblemFacts, task_type: str, obj: str, rec: str) -> str | None:
    """A reason the (object, receptacle-or-light) goal is impossible in this room, or None."""
    present_objects = set(facts.object_type.values())
    if obj not in gen.PICKUPABLE_TYPES:
        return f"{obj} is not an object the agent can pick up"
    if obj not in present_objects:
        return f"no {obj} in this room"
    if task_type == "look_at_obj_in_light":
        if rec not in gen.LIGHT_TYPES:
            return f"{rec} is not a light; look_at_obj_in_light needs DeskLamp or FloorLamp"
        return None if rec in present_objects else f"no {rec} in this room"
    if task_type in gen.STATE_CHANGES:
        capability, _, verb = gen.STATE_CHANGES[task_type]
        if not any(facts.has(capability, o) for o in facts.objects_of_type(obj)):
            return f"a {obj} cannot be {verb}ed (not {capability}), which {task_type} needs"
    if rec not in set(facts.receptacle_type.values()):
        return f"no {rec} receptacle in this room"
    if (rec, obj) not in facts.can_contain:
        return f"a {rec} cannot contain a {obj}"
    if task_type == "pick_two_obj_and_place" and len(facts.objects_of_type(obj)) < 2:
        return f"pick_two_obj_and_place needs two {obj}, the room has one"
    return None


def _orient(task_type: str, a: str, b: str) -> tuple[str, str]:
    """Puts the pair in (object, receptacle-or-light) order when it was given the other way round
    (the reference's decide_new_types swaps on canContain the same way)."""
    second = gen.LIGHT_TYPES if task_type == "look_at_obj_in_light" else gen.CAN_CONTAIN
    return (b, a) if a in second and b not in second else (a, b)


def rewrite_goal(task: Task, new_object_type: str, new_receptacle_type: str, out_dir: str) -> Task | RewriteRejected:
    """The task with its two goal types replaced, or the reason it cannot be done.

    For look_at_obj_in_light the second type is the light (DeskLamp/FloorLamp). The new game
    is accepted only when it differs from the old goal and the expert wins it in the engine.
    """
    p = task.payload
    task_type = p["task_type"]
    canonical = [known_type(t) for t in (new_object_type, new_receptacle_type)]
    if None in canonical:
        unknown = [t for t, c in zip((new_object_type, new_receptacle_type), canonical) if c is None]
        return RewriteRejected(f"unknown ALFWorld type(s): {', '.join(map(repr, unknown))}")
    game = _load_game(task)
    facts = parse_problem(game["pddl_problem"])
    obj, rec = _orient(task_type, *canonical)
    if (obj, rec) == (p["goal_object_type"], p["goal_receptacle_type"]):
        return RewriteRejected(f"the goal is unchanged ({obj}, {rec})")
    reason = _check_rewrite(facts, task_type, obj, rec)
    if reason:
        return RewriteRejected(reason)
    try:
        walkthrough = plan_commands(facts, task_type, obj, rec)
    except NoPlan as e:
        return RewriteRejected(f"the expert finds no plan: {e}")

    problem = replace_goal(game["pddl_problem"], gen.goal_block(task_type, obj, rec))
    sentence = gen.goal_text(task_type, obj, rec, random.Random(f"{task.task_id}|{obj}|{rec}"))
    digest = hashlib.sha1(f"{task.task_id}|{obj}|{rec}".encode()).hexdigest()[:8]
    name = f"{task_type}-{obj}-{rec}-rw{digest}"
    path = os.path.abspath(os.path.join(out_dir, name, "game.tw-pddl"))
    _write_game(path, problem, sentence, walkthrough)
    new_task = Task(task_id=f"{KIND}/{name}", kind=KIND, goal=sentence + ".", payload={
        **p, "game_file": path, "goal_object_type": obj, "goal_receptacle_type": rec,
        "rewritten_from": task.task_id, "raw_task_id": p.get("raw_task_id", task.task_id),
    })
    if not expert_trajectory(new_task).won:  # the engine is the judge, not our reading of the PDDL
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        return RewriteRejected(f"the expert's plan does not win the rewritten game ({obj}, {rec})")
    return new_task


def summarize_init(task: Task) -> str:
    """English summary of the game's :init and current goal, for the environment-model LLM."""
    p = task.payload
    return summarize_facts(_facts(task), p["task_type"], p["goal_object_type"], p["goal_receptacle_type"],
                           task.goal.rstrip("."))
