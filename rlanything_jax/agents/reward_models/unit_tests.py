"""The reward model writes unit tests (ALGORITHM.md 3.4): m tests per task, run against the task's programs.

Per task, the reward model is prompted once and sampled m times; each sample is parsed into one
stdin/stdout test. Every valid test and every ground-truth test is run (in the sandbox, through
the scenario's `UnitTestPrompts.run_tests`) against the task's codes: the policy's G programs in
episode order, then the task's reference solution when it has one. A code that passes every
ground-truth test is a "GT code"; a generated test that every GT code passes is a "GT test".
A test's reward (`rl.rewards.unit_test_rewards`) is how many non-GT codes it tells apart
from the GT codes, z-scored over the task's m tests.

Scenario-free: the scenario is reached only through `UnitTestPrompts` (below). The role that uses
these, `unit_test_writing.UnitTestWriting`, is what the loop sees.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.judging import JudgeConfig, sample_each
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.rl.data import Example
from rlanything_jax.core.rl.normalize import masked_zscore
from rlanything_jax.core.rl.rewards import unit_test_raw_rewards, unit_test_rewards
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.core.sampling.stops import Completion

Sample = tuple[tuple[int, ...], tuple[float, ...]]   # a generation's tokens and sampler log-probabilities


@dataclasses.dataclass(frozen=True)
class ParsedUnitTest:
    stdin: str
    expected_stdout: str
    valid: bool
    status: str


@runtime_checkable
class UnitTestPrompts(Protocol):
    """A reward model that writes unit tests (coding): its prompt, its parser, and the test runs."""

    name: str

    def unit_test_messages(self, task: Task) -> list[Message]: ...

    def parse_unit_test(self, text: str) -> ParsedUnitTest: ...

    def unit_test_text(self, stdin: str, expected_stdout: str) -> str:
        """A unit test written in the format the parser reads (the warm start's target)."""

    def ground_truth_tests(self, task: Task) -> list[tuple[str, str]]:
        """The task's own (stdin, expected stdout) tests."""

    def reference_solution(self, task: Task) -> str | None:
        """The task's known-correct program, when it has one (judged as a GT code)."""

    def run_tests(self, task: Task, programs: Sequence[str | None],
                  tests: Sequence[tuple[str, str]]) -> np.ndarray:
        """bool [len(programs), len(tests)]: program p passes test t (run in the sandbox)."""


@dataclasses.dataclass(frozen=True, eq=False)   # eq=False: arrays have no single truth value
class UnitTestJudgments:
    """The reward model's m unit tests for one task and how the task's programs fare on them."""

    prompt: tuple[int, ...]              # the reward model's prompt tokens
    samples: tuple[Sample, ...]          # m generations: (tokens, sampler logprobs)
    tests: tuple[ParsedUnitTest, ...]    # m parsed tests
    program_passes: np.ndarray   # bool [C, m]: code c passes generated test k (an invalid test: False)
    program_is_gt: np.ndarray    # bool [C]: code c passes every ground-truth test ("GT code")
    # codes = the task's G policy programs (in episode order) followed by the task's reference solution when
    # it has one (a known GT code: so the reward model gets data even when no policy program passes)
    has_reference: bool = False  # the last code is the task's reference solution

    @property
    def valid(self) -> np.ndarray:
        """bool [m]: generated test k parsed."""
        return np.array([test.valid for test in self.tests], bool)

    @property
    def num_policy_programs(self) -> int:
        return len(self.program_is_gt) - int(self.has_reference)


# ---------------------------------------------------------------- writing and running tests


def task_codes(prompts: UnitTestPrompts, task: Task, episodes: Sequence[Episode]) -> tuple[list[str], bool]:
    """The codes a task's tests are run against, and whether the last is the reference solution:
    the program of each played episode (one step each; failed or empty episodes are left out),
    then the task's reference solution when it has one."""
    codes = [e.steps[0].action for e in episodes if e.env_error is None and e.steps]
    reference = prompts.reference_solution(task)
    if reference:
        codes.append(reference)
    return codes, bool(reference)


def judge_texts(prompts: UnitTestPrompts, task: Task, codes: Sequence[str], texts: Sequence[str],
                ) -> tuple[tuple[ParsedUnitTest, ...], np.ndarray, np.ndarray, Counts]:
    """(parsed tests, program_passes bool [C, m], program_is_gt bool [C], counts) for the reward model's m texts.

    Valid tests and the ground-truth tests run in one sandbox batch; an invalid test is run by
    nobody and counts as failed by every code (as in the reference: it has "" as input and
    output there, which `reward/execute.py` marks "Invalid Test", not correct).
    """
    metrics: Counter = Counter()
    ground_truth = prompts.ground_truth_tests(task)
    if not ground_truth:
        raise ValueError(f"{task.task_id} has no ground-truth tests: its GT codes are unknown")
    tests = tuple(prompts.parse_unit_test(text) for text in texts)
    for test in tests:
        metrics[f"parse/{prompts.name}_unit_test/{test.status}"] += 1
    valid = [k for k, test in enumerate(tests) if test.valid]
    generated = [(tests[k].stdin, tests[k].expected_stdout) for k in valid]
    started = time.perf_counter()
    passes = np.asarray(prompts.run_tests(task, list(codes), generated + list(ground_truth)), bool)
    metrics["time/unit_test_runs_s"] += time.perf_counter() - started
    metrics["unit_tests/sandbox_runs"] += passes.size
    program_passes = np.zeros((len(codes), len(tests)), bool)
    program_passes[:, valid] = passes[:, :len(valid)]
    program_is_gt = passes[:, len(valid):].all(axis=1)
    return tests, program_passes, program_is_gt, dict(metrics)


def generate_samples(reward_model: Sampler, prompt_tokens: Sequence[Sequence[int]],
                     config: JudgeConfig, seed: int) -> tuple[list[list[Completion]], Counts]:
    """m completions of each prompt (in the given order), as the judgments are sampled (`judging.sample_each`),
    and their counts."""
    started = time.perf_counter()
    out, sampled = sample_each(reward_model, prompt_tokens, config, seed, "unit_tests")
    metrics: Counter = Counter(sampled)
    metrics["unit_tests/tokens"] += sum(len(c.token_ids) for completions in out for c in completions)
    metrics["time/unit_test_sampling_s"] += time.perf_counter() - started
    return out, dict(metrics)


def write_unit_tests(reward_model: Sampler, prompts: UnitTestPrompts, groups: Mapping[str, Sequence[Episode]],
                     config: JudgeConfig, seed: int) -> tuple[dict[str, UnitTestJudgments], Counts]:
    """The reward model's m = `config.num_judgments` unit tests for each task of `groups` (task id -> its
    episodes), run against the task's codes, and the counts of writing and running them. Tasks without
    ground-truth tests or without codes are skipped (counted)."""
    tokenizer = reward_model.tokenizer
    metrics: Counter = Counter()
    jobs = []
    for task_id, episodes in groups.items():
        if not episodes:
            continue
        task = episodes[0].task
        if not prompts.ground_truth_tests(task):
            metrics["unit_tests/tasks_without_gt_tests"] += 1
            continue
        codes, has_reference = task_codes(prompts, task, episodes)
        if not codes:
            metrics["unit_tests/tasks_without_codes"] += 1
            continue
        tokens = tokenizer.encode_chat(prompts.unit_test_messages(task))   # whole: its instructions lead
        jobs.append((task_id, task, codes, has_reference, tuple(tokens)))
    generations, sampled = generate_samples(reward_model, [job[-1] for job in jobs], config, seed)
    metrics.update(sampled)
    out = {}
    for (task_id, task, codes, has_reference, tokens), completions in zip(jobs, generations):
        tests, passes, is_gt, ran = judge_texts(prompts, task, codes, [c.text or "" for c in completions])
        metrics.update(ran)
        out[task_id] = UnitTestJudgments(
            prompt=tokens, samples=tuple((tuple(c.token_ids), tuple(c.logprobs)) for c in completions),
            tests=tests, program_passes=passes, program_is_gt=is_gt, has_reference=has_reference)
    metrics["unit_tests/tasks"] += len(out)
    return out, dict(metrics)


# ---------------------------------------------------------------- training data and metrics


def unit_test_advantages(judged: UnitTestJudgments, invalid_test_reward: float | None = None) -> np.ndarray:
    """float [m]: each generated test's advantage (`rl.rewards.unit_test_rewards`; all 0 without a GT code).

    `invalid_test_reward` None follows the reference: an unparseable test is a test every code fails, so
    it earns -1 when the task has no non-GT code and 0 otherwise (reward/llm_rl_reward.py computes a
    `valid_ut` flag but "does NOT affect reward"), and it is z-scored with the others. A number instead
    sets the raw reward of every unparseable test (before the z-score).
    """
    is_gt = np.asarray(judged.program_is_gt, bool)
    passes = np.asarray(judged.program_passes, bool)
    if invalid_test_reward is None:
        return np.asarray(unit_test_rewards(is_gt, passes), np.float32)
    raw = np.where(judged.valid, np.asarray(unit_test_raw_rewards(is_gt, passes)), invalid_test_reward)
    tests = np.full(raw.shape, is_gt.any(), bool)   # no GT code: every advantage 0
    return np.asarray(masked_zscore(raw, tests, axis=-1), np.float32)


def unit_test_examples(judgments: Mapping[str, UnitTestJudgments],
                       invalid_test_reward: float | None = None) -> tuple[list[Example], Counts]:
    """The reward model's examples: one (prompt, test tokens, advantage, sampler logprobs) per generated
    test of every task with a GT code (tasks without one are skipped and counted, as in the reference);
    with their counts (`reward_model_data/...`)."""
    metrics: Counter = Counter()
    examples = []
    for judged in judgments.values():
        if not np.any(judged.program_is_gt):
            metrics["reward_model_data/tasks_without_gt_code"] += 1
            continue
        advantages = unit_test_advantages(judged, invalid_test_reward)
        metrics["reward_model_data/tasks"] += 1
        for (tokens, logprobs), advantage in zip(judged.samples, advantages):
            if tokens:   # an empty sample was never generated (its prompt was over the sampler's limit)
                examples.append(Example(judged.prompt, tokens, float(advantage), logprobs))
    metrics["reward_model_data/examples"] += len(examples)
    return examples, dict(metrics)


def unit_test_metrics(judgments: Mapping[str, UnitTestJudgments]) -> dict[str, float]:
    """The reward model's test quality over the judged tasks (a key is left out when it has no data):

    - `reward_model/unit_test_accuracy`: the fraction of generated tests that every GT code passes ("GT
      tests"), over tasks with at least one GT code: the reference's `syn_ut_acc`, Table 1's "UT".
    - `reward_model/unit_test_detect`: the fraction that pass every GT code and fail every non-GT code, over
      tasks with both kinds of codes: the reference's `perfect_ut_rate`, Table 1's "Detect".
    - `reward_model/unit_test_valid`: the fraction of generated tests that parse (the reference has no
      such figure; an unparseable test counts as wrong in the two above, as there).

    Codes include the task's reference solution where it has one, so a task always has a GT code then.
    """
    valid = [judged.valid for judged in judgments.values()]
    correct = detected = with_gt = with_both = 0
    for judged in judgments.values():
        is_gt = np.asarray(judged.program_is_gt, bool)
        passes = np.asarray(judged.program_passes, bool)
        if not is_gt.any():
            continue
        gt_test = passes[is_gt].all(axis=0)
        with_gt += len(gt_test)
        correct += int(gt_test.sum())
        if (~is_gt).any():
            with_both += len(gt_test)
            detected += int((gt_test & ~passes[~is_gt].any(axis=0)).sum())
    out = {}
    if with_gt:
        out["reward_model/unit_test_accuracy"] = correct / with_gt
    if with_both:
        out["reward_model/unit_test_detect"] = detected / with_both
    if valid and sum(len(v) for v in valid):
        out["reward_model/unit_test_valid"] = float(np.concatenate(valid).mean())
    return out
