"""A test-only scenario, added without touching the package: walk right along a line to the goal.

It is one package (this one) plus one config file (`config.py`): registering it by name is all
the package needs, and the generic run (`rlanything_jax.main`) plays it, judges it, warm-starts
it, rewrites its tasks and trains on it like any built-in scenario.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rlanything_jax.agents import demonstrations
from rlanything_jax.agents.curriculum.generators import ProceduralGenerator
from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.parsers import parse_judgment
from rlanything_jax.agents.scenario import GeneratorContext, TaskCounts, TaskSets
from rlanything_jax.agents.trajectory import Episode, ParsedAction, ParsedJudgment
from rlanything_jax.core import validation
from rlanything_jax.scenarios import register_scenario
from tests.walk_scenario.env import ACTIONS, KIND, walk_task

NAME = "walk"


@dataclasses.dataclass(frozen=True)
class WalkOptions:
    min_distance: int = 2
    max_distance: int = 4

    def __post_init__(self):
        validation.positive_int("min_distance", self.min_distance)
        ok = validation.is_int(self.max_distance) and self.max_distance >= self.min_distance
        validation.check("max_distance", ok, "must be an integer >= min_distance", self.max_distance)


class WalkPrompts:
    name = "walk"

    def initial_messages(self, task: Task, observation: Observation):
        return [{"role": "user", "content": observation.text}]

    def turn_message(self, episode: Episode, observation: Observation):
        return {"role": "user", "content": observation.text}

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction:
        words = re.findall(r"[a-z]+", (response_text or "").lower())
        said = next((w for w in words if w in ACTIONS), None)
        return ParsedAction(said, "ok") if said else ParsedAction("stay", "no_action")

    def answer_text(self, observation: Observation, action: str) -> str:
        return action

    def judge_messages(self, task: Task, episode: Episode, step_index: int):
        step = episode.steps[step_index]
        after = step.next_observation.text if step.next_observation is not None else ""
        return [{"role": "user", "content": f"{step.observation.text} | {step.action} | {after} | good?"}]

    def parse_judgment(self, text: str) -> ParsedJudgment:
        judgment = parse_judgment(text)
        return ParsedJudgment(int(judgment.score), bool(judgment.valid), judgment.status)

    def judgment_text(self, label: int) -> str:
        return "\\boxed{%d}" % label


class WalkExpert:
    def plan(self, task: Task) -> list[str]:
        return ["right"] * task.payload["distance"]

    def demonstration(self, task, env, rng):
        return demonstrations.play_expert(task, self.plan(task), env)

    def labelled_steps(self, task, steps, env, rng, negatives_per_step):
        return demonstrations.labelled_steps(task, steps, rng, negatives_per_step, env,
                                             lambda earlier, action, admissible: 1 if action == "right" else -1)

    def step_label(self, episode: Episode, step_index: int) -> int | None:
        return 1 if episode.steps[step_index].action == "right" else -1


def _farther_or_nearer(raw: Task, direction: str):
    distance = raw.payload["distance"] + (1 if direction == "harder" else -1)
    if distance < 1:
        return None
    return lambda seed: walk_task(distance, f"{raw.task_id}/{direction}-{seed % 97}")


class WalkScenario:
    name = NAME
    env_module = "tests.walk_scenario.env"
    reward_model_role = "judge_steps"   # its reward model judges every step (reward_models.step_judging)
    runs_untrusted_code = False

    def __init__(self, options: WalkOptions):
        self.options = options
        self.prompts = WalkPrompts()
        self.reward_prompts = self.prompts   # one object holds the policy's and the reward model's prompts
        self.expert = WalkExpert()

    def _distance(self, seed: int) -> int:
        span = self.options.max_distance - self.options.min_distance + 1
        return self.options.min_distance + seed % span

    def build_tasks(self, counts: TaskCounts, out_dir: Path) -> TaskSets:
        def make(seed: int) -> Task:
            return walk_task(self._distance(seed), f"{KIND}/{seed}")

        return TaskSets(train=[make(s) for s in range(counts.train)],
                        eval=[make(1000 + s) for s in range(counts.eval)],
                        warm_start=[make(2000 + s) for s in range(counts.warm_start)])

    def play_task(self, seed: int, task_type: str | None, out_dir: Path) -> Task:
        return walk_task(self._distance(seed), f"{KIND}/{seed}")

    def task_generator(self, context: GeneratorContext):
        return ProceduralGenerator(_farther_or_nearer)


register_scenario(NAME, WalkScenario, WalkOptions)
