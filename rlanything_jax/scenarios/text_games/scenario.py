"""What ALFWorld and TextWorld share as scenarios: options, prompts by style, the expert, task sets.

A text-game scenario plays generated games whose seeds fix them: training games use seeds
0..n-1, held-out games and the warm start's expert games seeds from their own disjoint
ranges, so no game is in two sets. The policy's and the reward model's prompts come in
four styles (`prompt_style`): the reference's and its dialogue form (`reference.py`, for instruct
models) and two compact ones for small models built from scratch (`compact.py`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.scenario import GeneratorContext, TaskCounts, TaskSets
from rlanything_jax.core import validation
from rlanything_jax.scenarios.text_games.compact import CompactChoicePrompts, CompactPrompts, NumberedChoicePrompts
from rlanything_jax.scenarios.text_games.expert import EXPERT_KINDS, TextGameExpert
from rlanything_jax.scenarios.text_games.reference import DialoguePrompts, ReferencePrompts

PROMPT_STYLES = {"reference": ReferencePrompts, "dialogue": DialoguePrompts, "compact": CompactPrompts,
                 "compact_choice": CompactChoicePrompts,
                 "numbered_choice": NumberedChoicePrompts}
EVAL_SEED_OFFSET = 1_000_000        # held-out games use seeds no training game uses
WARM_START_SEED_OFFSET = 2_000_000  # so do the expert games of the warm start


@dataclasses.dataclass(frozen=True)
class TextGameOptions:
    """The `tasks` section of a text-game config. `knobs` are the scenario's difficulty knobs."""

    task_types: str = ""             # comma-separated; game i has type i mod len(task types)
    knobs: dict = dataclasses.field(default_factory=dict)
    # "reference" (the reference's prompts, for instruct models: each turn's prompt rebuilt from the whole
    # trajectory), "dialogue" (the same as a growing chat whose KV cache carries over: short-answer runs),
    # "compact" (game text in, command out) or "compact_choice" (game text + numbered commands in, a number
    # out): the compact styles are for small models built from scratch; "numbered_choice" is compact_choice
    # with a one-line instruction, for small pretrained instruct models (configs/learn.py).
    prompt_style: str = "reference"
    # The warm start's demonstrations: the expert's "walkthrough" (it knows where everything is), or
    # "search": it first visits a random number of other receptacles, as an agent that does not know would.
    demonstrations: str = "walkthrough"
    # The expert's step labels, for the reward model's warm start, its step accuracy and the probe:
    # "walkthrough" (every search step is wrong) or "search" (visiting an unvisited receptacle is good
    # until the object is found).
    step_labels: str = "walkthrough"

    def __post_init__(self):
        validation.check("task_types", isinstance(self.task_types, str) and bool(self.types),
                         "must name at least one task type (comma-separated)", self.task_types)
        validation.check("knobs", isinstance(self.knobs, dict), "must be a mapping of knob names to values",
                         self.knobs)
        validation.one_of("prompt_style", self.prompt_style, PROMPT_STYLES)
        validation.one_of("demonstrations", self.demonstrations, EXPERT_KINDS)
        validation.one_of("step_labels", self.step_labels, EXPERT_KINDS)

    @property
    def types(self) -> list[str]:
        return [t.strip() for t in str(self.task_types).split(",") if t.strip()]


class TextGameScenario:
    """The shared half of a text-game scenario; a subclass gives the engine-specific half."""

    name: str
    env_module: str
    known_task_types: tuple[str, ...]
    reward_model_role = "judge_steps"   # its reward model judges every step (reward_models.step_judging)
    runs_untrusted_code = False

    def __init__(self, options: TextGameOptions):
        self.options = options
        self.prompts = PROMPT_STYLES[options.prompt_style]()
        self.reward_prompts = self.prompts   # one object holds the policy's and the reward model's prompts
        self.expert = TextGameExpert(self.walkthrough, options.demonstrations, options.step_labels)

    # -- the engine-specific half

    def make_task(self, seed: int, task_type: str, out_dir: Path) -> Task:
        raise NotImplementedError

    def walkthrough(self, task: Task) -> list[str]:
        raise NotImplementedError

    def task_generator(self, context: GeneratorContext) -> Any:
        raise NotImplementedError

    # -- shared

    def build_tasks(self, counts: TaskCounts, out_dir: Path) -> TaskSets:
        types = self.options.types

        def make(seed: int) -> Task:
            return self.make_task(seed, types[seed % len(types)], out_dir)

        return TaskSets(train=[make(s) for s in range(counts.train)],
                        eval=[make(EVAL_SEED_OFFSET + s) for s in range(counts.eval)],
                        warm_start=[make(WARM_START_SEED_OFFSET + s) for s in range(counts.warm_start)])

    def play_task(self, seed: int, task_type: str | None, out_dir: Path) -> Task:
        if task_type is not None and task_type not in self.known_task_types:
            raise ValueError(f"{self.name} has no task type {task_type!r}; task types: "
                             f"{', '.join(self.known_task_types)}")
        types = self.options.types
        return self.make_task(seed, task_type or types[seed % len(types)], out_dir)
