"""What a scenario plugs into the loop: the declared boundary between generic code and a task family.

Generic code (rollout, judging, warm start, probe, curriculum, the run) calls a scenario
only through these protocols; everything that knows a game, a desktop or a coding
problem lives in a package under `rlanything_jax/scenarios/`, registered by name
(`scenarios.register_scenario`). Optional parts are `None`: a scenario without an
expert has no warm start or probe. How its reward model is used is a role it names
(`rlanything_jax.agents.reward_models`), which reads the scenario's `reward_prompts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Env, Observation, Task
from rlanything_jax.agents.trajectory import Episode, ExpertStep, LabelledStep, ParsedAction, ParsedJudgment


class PolicyPrompts(Protocol):
    """How the policy sees a task and how its answers become actions."""

    name: str

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]: ...

    def turn_message(self, episode: Episode, observation: Observation) -> Message: ...

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction: ...

    def answer_text(self, observation: Observation, action: str) -> str:
        """What the policy should write to take `action` (the warm start's target)."""


@runtime_checkable
class StepJudgePrompts(Protocol):
    """How the reward model sees one policy step and how its judgment is read."""

    name: str

    def judge_messages(self, task: Task, episode: Episode, step_index: int) -> list[Message]: ...

    def parse_judgment(self, text: str) -> ParsedJudgment: ...

    def judgment_text(self, label: int) -> str:
        """What the reward model should write to give `label` (+1 or -1; the warm start's target)."""


class Expert(Protocol):
    """Demonstrations and step labels of an expert who can play the scenario's tasks."""

    def plan(self, task: Task) -> list[str]:
        """The expert's actions for a task (a walkthrough, a reference program)."""

    def demonstration(self, task: Task, env: Env, rng: np.random.Generator) -> list[ExpertStep]:
        """The expert's play of `task` in `env`, as the warm start learns it."""

    def labelled_steps(self, task: Task, steps: Sequence[ExpertStep], env: Env, rng: np.random.Generator,
                       negatives_per_step: int) -> list[LabelledStep]:
        """Steps for the reward model with the expert's +1/-1 label (the demonstration's and others)."""

    def step_label(self, episode: Episode, step_index: int) -> int | None:
        """The expert's label of a played step (+1 good, -1 bad, None unknown)."""


@dataclasses.dataclass(frozen=True)
class TaskCounts:
    train: int        # the task pool's slots
    eval: int         # held out
    warm_start: int   # expert games for the warm start (0: none)


@dataclasses.dataclass(frozen=True)
class TaskSets:
    train: list[Task]       # the task pool's raw tasks
    eval: list[Task]        # held out
    warm_start: list[Task]  # the expert's tasks for the warm start (none of the above)
    # Further named evaluation splits a benchmark defines (e.g. in- and out-of-distribution), beside
    # "train" and "eval"; `split` finds any of them by name.
    splits: dict[str, list[Task]] = dataclasses.field(default_factory=dict)

    def split_names(self) -> tuple[str, ...]:
        return ("train", "eval", "warm_start", *self.splits)

    def split(self, name: str) -> list[Task]:
        if name in ("train", "eval", "warm_start"):
            return getattr(self, name)
        if name not in self.splits:
            raise ValueError(f"no split {name!r}: this scenario's task sets have {', '.join(self.split_names())}")
        return self.splits[name]


@dataclasses.dataclass(frozen=True)
class GeneratorContext:
    """What a scenario's task generator may use (ALGORITHM.md 4.3)."""

    generator: str                 # curriculum.generator: "procedural" (no model) or "env_model" (the environment LLM)
    out_dir: Path                  # where generated tasks' files go
    environment_sampler: Any = None  # sampling.Sampler of the environment model ("env_model")
    candidates_per_task: int = 8   # the curriculum section's keys, under the same names and defaults
    temperature: float = 0.8
    max_new_tokens: int = 8192
    seed: int = 0
    continuous_batching: bool = True   # the environment model refills its rows across tasks' rewrites


class Scenario(Protocol):
    """One task family, as the loop uses it."""

    name: str
    env_module: str          # imported by environment workers: registers the scenario's envs
    reward_model_role: str   # how its reward model is used: a registered role (`rlanything_jax.agents.reward_models`)
    prompts: PolicyPrompts
    reward_prompts: Any      # what its role reads (the role's registered prompts type, checked when it is made)
    expert: Expert | None    # None: no warm start, no probe, no step accuracy
    runs_untrusted_code: bool  # its environment executes model-written code (needs the sandbox)

    def build_tasks(self, counts: TaskCounts, out_dir: Path) -> TaskSets:
        """Disjoint training, held-out and warm-start tasks (deterministic)."""

    def play_task(self, seed: int, task_type: str | None, out_dir: Path) -> Task:
        """One task for `play`: `task_type` picks a kind of task where the scenario has several."""

    def task_generator(self, context: GeneratorContext) -> Any:
        """A `curriculum.generators.TaskGenerator` for environment adaptation, or None."""
