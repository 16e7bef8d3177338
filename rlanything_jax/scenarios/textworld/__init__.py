"""The TextWorld scenario: coin collector, treasure hunter and custom quests from TextWorld's generator.

Games are generated offline with the `textworld` package (`env.py`), with difficulty knobs
(a challenge's level, or a custom game's rooms, objects and quest length) and an expert
taken from the engine's winning policy. Task rewrites are procedural (knobs one notch).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rlanything_jax.agents.curriculum.generators import ProceduralGenerator
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.scenario import GeneratorContext
from rlanything_jax.core import validation
from rlanything_jax.scenarios import register_scenario
from rlanything_jax.scenarios.text_games.scenario import TextGameOptions, TextGameScenario

NAME = "textworld"
ENV_MODULE = "rlanything_jax.scenarios.textworld.env"  # imported lazily: TextWorld's import is slow
KINDS = ("coin_collector", "treasure_hunter", "custom")


@dataclasses.dataclass(frozen=True)
class TextWorldOptions(TextGameOptions):
    task_types: str = "coin_collector"

    def __post_init__(self):
        super().__post_init__()
        unknown = [t for t in self.types if t not in KINDS]
        validation.check("task_types", not unknown, f"unknown game kinds {unknown}; known: {', '.join(KINDS)}",
                         self.task_types)
        validation.check("knobs", "kind" not in self.knobs, "the game kind comes from task_types", self.knobs)


def procedural_maker(out_dir: Path):
    def maker(raw: Task, direction: str):
        from rlanything_jax.scenarios.textworld import env

        knobs = env.knobs_of(raw)
        moved = (env.harder if direction == "harder" else env.easier)(knobs)
        if moved == knobs:
            return None
        return lambda seed: env.make_task(seed, moved, str(out_dir))
    return maker


class TextWorldScenario(TextGameScenario):
    name = NAME
    env_module = ENV_MODULE
    known_task_types = KINDS

    def make_task(self, seed: int, task_type: str, out_dir: Path) -> Task:
        from rlanything_jax.scenarios.textworld import env

        return env.make_task(seed, env.TextWorldKnobs(kind=task_type, **self.options.knobs), str(out_dir))

    def walkthrough(self, task: Task) -> list[str]:
        from rlanything_jax.scenarios.textworld import env

        return env.expert_actions(task)

    def task_generator(self, context: GeneratorContext):
        return ProceduralGenerator(procedural_maker(context.out_dir))


register_scenario(NAME, TextWorldScenario, TextWorldOptions)
