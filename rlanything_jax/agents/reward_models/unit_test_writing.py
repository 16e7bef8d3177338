"""The reward model writes m unit tests per task (ALGORITHM.md 3.4): the role of the coding scenario.

Its tests are run against each task's programs (`unit_tests.py`); a test's reward is how well it tells
the task's correct programs from the others, and the policy's reward may get lambda x the fraction of
valid tests each program passes (`reward.unit_tests_in_policy_reward`). Its warm start answers each
task's test prompt with the task's ground-truth tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlanything_jax.agents import sft
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.examples import SignalConfig
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models import register_role
from rlanything_jax.agents.reward_models.role import Judgments, RenderChat
from rlanything_jax.agents.reward_models.unit_tests import (
    UnitTestJudgments,
    UnitTestPrompts,
    unit_test_examples,
    unit_test_metrics,
    write_unit_tests,
)
from rlanything_jax.agents.trajectory import Episode, ExpertStep, JudgedEpisode
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.rl.data import Example

WRITE_UNIT_TESTS = "write_unit_tests"


@dataclasses.dataclass(frozen=True)
class UnitTestWriting:
    """The reward model writing unit tests, over the scenario's unit-test prompts."""

    prompts: UnitTestPrompts
    in_policy_reward: bool = False   # lambda x (valid tests passed) added to the policy's reward
    held_out_judgments: int = 0      # tests per held-out task at each evaluation (the reference's coding eval)
    name: str = WRITE_UNIT_TESTS
    phase: str = "unit tests"

    def judge(self, reward_model: Any, episodes: Sequence[Episode],
              config: JudgeConfig, seed: int) -> tuple[Judgments, Counts]:
        groups: dict[str, list[Episode]] = {}
        for episode in episodes:
            groups.setdefault(episode.task.task_id, []).append(episode)
        tests, counts = self.write(reward_model, groups, config, seed)
        return Judgments(steps=(None,) * len(episodes), tasks=tests,
                         summary=f"{config.num_judgments} tests x {len(tests)} tasks"), counts

    def write(self, reward_model: Any, groups: Mapping[str, Sequence[Episode]],
              config: JudgeConfig, seed: int) -> tuple[dict[str, UnitTestJudgments], Counts]:
        """The reward model's tests of each task of `groups` (task id -> its episodes), run against its codes,
        and their counts."""
        return write_unit_tests(reward_model, self.prompts, groups, config, seed)

    def policy_bonus(self, judgments: Judgments, signal: SignalConfig) -> Mapping[str, np.ndarray] | None:
        return passed_tests_bonus(judgments.tasks, signal.step_weight) if self.in_policy_reward else None

    def training_examples(self, judgments: Judgments, groups: Mapping[str, Sequence[JudgedEpisode]],
                          signal: SignalConfig) -> tuple[list[Example], Counts]:
        return unit_test_examples(judgments.tasks)   # unparseable tests as the reference scores them

    def warm_start_examples(self, tokenizer: Any, task: Task, steps: Sequence[ExpertStep], expert: Any, env: Env,
                            rng: np.random.Generator, negatives_per_step: int,
                            image_inputs: Any = None) -> list[Example]:
        return ground_truth_test_examples(tokenizer, self.prompts, task)

    def corpus_texts(self, render: RenderChat, task: Task, episode: Episode) -> list[str]:
        tests = "".join(self.prompts.unit_test_text(i, o) for i, o in self.prompts.ground_truth_tests(task))
        return [render(self.prompts.unit_test_messages(task), True) + tests]

    def metrics(self, judgments: Judgments) -> dict[str, float]:
        return unit_test_metrics(judgments.tasks) if judgments.tasks else {}

    def probe(self, reward_model: Any, tasks: Sequence[Task], scenario: Any, env: Env, config: JudgeConfig,
              seed: int, negatives_per_step: int) -> Callable[[], dict[str, float]] | None:
        return None   # held out, it is measured at each evaluation (`held_out_judgments`)


def passed_tests_bonus(unit_tests: Mapping[str, UnitTestJudgments], step_weight: float) -> dict[str, np.ndarray]:
    """lambda x the fraction of the reward model's valid tests each policy program passes, per task (the
    policy's programs come first among the judged codes, in the order of the task's trainable episodes)."""
    bonus = {}
    for task_id, judged in unit_tests.items():
        valid = judged.valid
        programs = judged.program_passes[:judged.num_policy_programs]
        passed = programs[:, valid].mean(axis=1) if valid.any() else np.zeros(len(programs))
        bonus[task_id] = step_weight * passed
    return bonus


def ground_truth_test_examples(tokenizer, prompts: UnitTestPrompts, task: Task) -> list[Example]:
    """Unit-test examples for a reward model that writes tests: the task's test prompt, answered with each
    of its ground-truth tests in the format the parser reads."""
    prompt = tokenizer.encode_chat(prompts.unit_test_messages(task))
    examples = []
    for stdin, expected in prompts.ground_truth_tests(task):
        response = tokenizer.encode(prompts.unit_test_text(stdin, expected)) + [sft.end_of_turn_id(tokenizer)]
        examples.append(Example(prompt, response, 1.0, [float("nan")] * len(response)))
    return examples


def _unit_test_writing(prompts: UnitTestPrompts, cfg: Any = None) -> UnitTestWriting:
    if cfg is None:
        return UnitTestWriting(prompts)
    return UnitTestWriting(prompts, in_policy_reward=cfg.reward.unit_tests_in_policy_reward,
                           held_out_judgments=cfg.eval.unit_tests)


register_role(WRITE_UNIT_TESTS, _unit_test_writing, UnitTestPrompts)
