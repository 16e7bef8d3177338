"""The reward model's unit tests (ALGORITHM.md 3.4): rewards, advantages and metrics against hand-computed
values; parsing and running tests in the real sandbox; writing them with a real sampler end to end."""

from collections import Counter

import numpy as np
import pytest

from rlanything_jax.agents.envs.base import Observation
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.reward_models import RewardModel
from rlanything_jax.agents.reward_models.unit_test_writing import UnitTestWriting
from rlanything_jax.agents.reward_models.unit_tests import (
    ParsedUnitTest,
    UnitTestJudgments,
    judge_texts,
    task_codes,
    unit_test_advantages,
    unit_test_examples,
    unit_test_metrics,
    write_unit_tests,
)
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.core.models import load_pretrained
from rlanything_jax.core.models.scratch import ScratchArchitecture, build_scratch_model_dir
from rlanything_jax.core.models.tokenizer import Tokenizer
from rlanything_jax.core.sampling.sampler import Sampler
from rlanything_jax.scenarios.coding import env as coding
from rlanything_jax.scenarios.coding.scenario import CodingPrompts

pytestmark = pytest.mark.filterwarnings("ignore:UNTRUSTED CODE SANDBOX IS WEAK:RuntimeWarning")

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUBTRACT = "a, b = map(int, input().split())\nprint(a - b)\n"   # right only on demo/sum_two's "0 0"
VALID = ParsedUnitTest("1", "1", True, "ok")
INVALID = ParsedUnitTest("", "", False, "missing_input")


def _judged(passes, is_gt, valid, has_reference=False):
    passes = np.array(passes, bool)
    m = passes.shape[1]
    samples = tuple(((100 + k, 7), (-0.5 - k, -0.25)) for k in range(m))
    return UnitTestJudgments(prompt=(1, 2, 3), samples=samples, tests=tuple(VALID if v else INVALID for v in valid),
                             program_passes=passes, program_is_gt=np.array(is_gt, bool), has_reference=has_reference)


# Two GT codes, two non-GT codes, five tests (the last unparseable: failed by every code).
TASK_A = _judged(passes=[[1, 1, 0, 1, 0],     # GT
                         [1, 1, 1, 0, 0],     # GT
                         [1, 0, 0, 0, 0],     # non-GT
                         [0, 0, 1, 0, 0]],    # non-GT
                 is_gt=[1, 1, 0, 0], valid=[1, 1, 1, 1, 0], has_reference=True)
# Raw rewards: test 0 is a GT test failed by 1 non-GT code (+1), test 1 by 2 (+2); test 2 is not a GT test
# and 1 non-GT code passes it (-1); test 3 none (-0); the unparseable test 4 is a non-GT test no code passes (0).
RAW_A = [1.0, 2.0, -1.0, 0.0, 0.0]
# z-score: mean 0.4, population variance (0.36 + 2.56 + 1.96 + 0.16 + 0.16) / 5 = 1.04
Z_A = [0.6 / 1.04 ** 0.5, 1.6 / 1.04 ** 0.5, -1.4 / 1.04 ** 0.5, -0.4 / 1.04 ** 0.5, -0.4 / 1.04 ** 0.5]
# Only GT codes: +1 for a GT test, -1 otherwise: raw [1, -1, -1], mean -1/3, variance 8/9.
TASK_B = _judged(passes=[[1, 0, 1], [1, 0, 0]], is_gt=[1, 1], valid=[1, 1, 1])
Z_B = [(4 / 3) / (8 / 9) ** 0.5, (-2 / 3) / (8 / 9) ** 0.5, (-2 / 3) / (8 / 9) ** 0.5]
# No GT code: no data (the reference skips such tasks).
TASK_C = _judged(passes=[[1, 0], [0, 0]], is_gt=[0, 0], valid=[1, 1])


def test_advantages_follow_the_reference_formula():
    np.testing.assert_allclose(unit_test_advantages(TASK_A), Z_A, rtol=1e-5)
    np.testing.assert_allclose(unit_test_advantages(TASK_B), Z_B, rtol=1e-5)
    np.testing.assert_array_equal(unit_test_advantages(TASK_C), [0.0, 0.0])
    # A set reward for unparseable tests replaces theirs: raw [1, 2, -1, 0, -2], mean 0, variance 2.
    np.testing.assert_allclose(unit_test_advantages(TASK_A, invalid_test_reward=-2.0),
                               np.array([1, 2, -1, 0, -2]) / 2 ** 0.5, rtol=1e-5)
    np.testing.assert_array_equal(unit_test_advantages(TASK_C, invalid_test_reward=-2.0), [0.0, 0.0])


def test_examples_one_per_test_of_tasks_with_a_gt_code():
    examples, metrics = unit_test_examples({"a": TASK_A, "b": TASK_B, "c": TASK_C})
    assert len(examples) == 5 + 3
    np.testing.assert_allclose([e.advantage for e in examples], Z_A + Z_B, rtol=1e-5)
    for k, example in enumerate(examples[:5]):
        assert tuple(example.prompt_ids) == (1, 2, 3)
        assert tuple(example.response_ids) == (100 + k, 7) and tuple(example.old_logprobs) == (-0.5 - k, -0.25)
    assert metrics == Counter({"reward_model_data/tasks": 2, "reward_model_data/tasks_without_gt_code": 1,
                               "reward_model_data/examples": 8})


def test_metrics_are_the_references_syn_ut_acc_and_perfect_ut_rate():
    metrics = unit_test_metrics({"a": TASK_A, "b": TASK_B, "c": TASK_C})
    # GT tests: A's tests 0 and 1, B's test 0, over the 5 + 3 tests of tasks with a GT code (C has none).
    assert metrics["reward_model/unit_test_accuracy"] == pytest.approx(3 / 8)
    # Detect: only A has both kinds of codes; its test 1 passes both GT codes and fails both others.
    assert metrics["reward_model/unit_test_detect"] == pytest.approx(1 / 5)
    assert metrics["reward_model/unit_test_valid"] == pytest.approx(9 / 10)   # A's test 4 did not parse
    only_b = unit_test_metrics({"b": TASK_B})
    assert "reward_model/unit_test_detect" not in only_b and only_b["reward_model/unit_test_accuracy"] == 1 / 3
    assert unit_test_metrics({"c": TASK_C}) == {"reward_model/unit_test_valid": 1.0}
    assert (TASK_A.num_policy_programs, TASK_B.num_policy_programs) == (3, 2)
    np.testing.assert_array_equal(TASK_A.valid, [True, True, True, True, False])


# ---------------------------------------------------------------- parsing and running, real sandbox


def _test_text(stdin, stdout):
    return CodingPrompts().unit_test_text(stdin, stdout) + "\n\n**Explanation:**\nby hand."


TEXTS = [_test_text("2 3", "5"),                       # ADD and the reference pass, SUBTRACT does not
         "Thinking... " + _test_text("0 0", "0"),      # everyone passes
         _test_text("1 1", "3"),                       # a wrong test: nobody passes
         "I am not sure, maybe 4.",                    # unparseable
         "**Test Input:**\n7 2\n\n**Test Output:**\n5\n"]   # unfenced but valid: only SUBTRACT passes


@pytest.fixture(scope="module")
def sum_two():
    return next(t for t in coding.builtin_stdio_tasks() if t.task_id == "demo/sum_two")


def test_judge_texts_parses_and_runs_every_valid_test_against_every_code(sum_two):
    prompts = CodingPrompts()
    codes = [ADD, SUBTRACT, sum_two.payload["reference_solution"]]
    tests, passes, is_gt, metrics = judge_texts(prompts, sum_two, codes, TEXTS)
    assert [(t.stdin, t.expected_stdout, t.valid) for t in tests] == [
        ("2 3", "5", True), ("0 0", "0", True), ("1 1", "3", True), ("", "", False), ("7 2", "5", True)]
    np.testing.assert_array_equal(passes, [[1, 1, 0, 0, 0], [0, 1, 0, 0, 1], [1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(is_gt, [True, False, True])   # SUBTRACT fails 4 of the 5 GT tests
    assert metrics["parse/coding_unit_test/ok"] == 3 and metrics["parse/coding_unit_test/plain_text"] == 1
    assert metrics["parse/coding_unit_test/missing_input"] == 1
    assert metrics["unit_tests/sandbox_runs"] == 3 * (4 + 5)   # 4 valid generated tests + 5 GT tests
    judged = UnitTestJudgments(prompt=(), samples=(((1,), (0.0,)),) * 5, tests=tests, program_passes=passes,
                               program_is_gt=is_gt, has_reference=True)
    # non-GT code: SUBTRACT. Raw: +1 (it fails test 0), 0 (passes test 1), -0 (wrong test 2, it fails it),
    # 0 (unparseable), -1 (it passes non-GT test 4): mean 0, variance 2/5.
    np.testing.assert_allclose(unit_test_advantages(judged), np.array([1, 0, 0, 0, -1]) / 0.4 ** 0.5, atol=1e-6)


def _episode(task, group_index, action=None, env_error=None):
    steps = () if action is None else (StepRecord(
        observation=Observation(task.goal), prompt_tokens=(1,), response_tokens=(2,), logprobs=(-0.1,),
        response_text="", finish_reason="stop", action=action, parse_status="ok"),)
    return Episode(task=task, group_index=group_index, steps=steps, env_error=env_error)


def test_task_codes_are_played_programs_then_the_reference(sum_two):
    episodes = [_episode(sum_two, 0, SUBTRACT), _episode(sum_two, 1, ADD, env_error="crash"),
                _episode(sum_two, 2), _episode(sum_two, 3, "")]
    codes, has_reference = task_codes(CodingPrompts(), sum_two, episodes)
    assert codes == [SUBTRACT, "", sum_two.payload["reference_solution"]] and has_reference
    humaneval = coding.humaneval_tasks()[0]
    assert task_codes(CodingPrompts(), humaneval, [_episode(humaneval, 0, "x")]) == (["x"], False)


# ---------------------------------------------------------------- a real sampler


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory, sum_two):
    prompts = CodingPrompts()
    corpus = [m["content"] for t in coding.builtin_stdio_tasks() for m in prompts.unit_test_messages(t)]
    corpus += [prompts.unit_test_text(i, o) for i, o in coding.stdio_tests(sum_two)]
    arch = ScratchArchitecture(num_layers=1, hidden_size=32, intermediate_size=64, num_heads=2, num_kv_heads=1,
                               head_dim=16, vocab_size=320)
    path = build_scratch_model_dir(tmp_path_factory.mktemp("unit_test_writer"), corpus, arch, seed=0)
    return Sampler(load_pretrained(path), tokenizer=Tokenizer.from_dir(path))


def test_write_unit_tests_with_a_real_sampler(reward_model, sum_two):
    prompts = CodingPrompts()
    reverse = next(t for t in coding.builtin_stdio_tasks() if t.task_id == "demo/reverse_string")
    humaneval = coding.humaneval_tasks()[0]
    groups = {sum_two.task_id: [_episode(sum_two, 0, ADD), _episode(sum_two, 1, SUBTRACT),
                                _episode(sum_two, 2, ADD, env_error="crash"), _episode(sum_two, 3)],
              reverse.task_id: [_episode(reverse, 0, "print(input())")],
              humaneval.task_id: [_episode(humaneval, 0, "def f(): pass")]}
    config = JudgeConfig(continuous_batching=True, num_judgments=3, max_new_tokens=8, temperature=0.0, batch_size=3)
    rows_before = reward_model.prefilled["rows"]
    judgments, metrics = write_unit_tests(reward_model, prompts, groups, config, 0)
    assert reward_model.prefilled["rows"] - rows_before == 2   # one prefill per task, m samples each
    assert set(judgments) == {sum_two.task_id, reverse.task_id}
    assert metrics["unit_tests/tasks_without_gt_tests"] == 1 and metrics["unit_tests/tasks"] == 2
    assert not metrics.get("unit_tests/prompts_over_limit")

    judged = judgments[sum_two.task_id]
    full = reward_model.tokenizer.encode_chat(prompts.unit_test_messages(sum_two))
    assert judged.prompt == tuple(full)   # whole: its instructions come first
    # the GT tests really ran: ADD and the reference pass all, SUBTRACT does not (the failed episode is out)
    np.testing.assert_array_equal(judged.program_is_gt, [True, False, True])
    assert judged.has_reference and judged.num_policy_programs == 2
    assert judged.program_passes.shape == (3, 3) and len(judged.tests) == len(judged.samples) == 3
    [alone] = reward_model.generate([list(judged.prompt)], 8)   # greedy: each sample is the prompt's continuation
    for (tokens, logprobs), test in zip(judged.samples, judged.tests):
        assert tokens == tuple(alone.token_ids) and len(logprobs) == len(tokens)
        assert test == prompts.parse_unit_test(alone.text)
    assert not judged.program_passes[:, ~judged.valid].any()
    np.testing.assert_array_equal(judgments[reverse.task_id].program_is_gt, [False, True])
    assert sum(v for k, v in metrics.items() if k.startswith("parse/coding_unit_test/")) == 6
    assert metrics["unit_tests/tokens"] == sum(len(t) for j in judgments.values() for t, _ in j.samples)

    role = UnitTestWriting(prompts)   # the role, as the loop uses it: every episode of the step, grouped by task
    again = role.judge(reward_model, [e for episodes in groups.values() for e in episodes], config, 0)[0].tasks
    assert again[sum_two.task_id].samples == judged.samples


def test_sampled_tests_of_one_task_differ(reward_model, sum_two):
    config = JudgeConfig(continuous_batching=True, num_judgments=4, max_new_tokens=8, temperature=1.0, top_p=1.0)
    judged, _ = write_unit_tests(reward_model, CodingPrompts(), {"t": [_episode(sum_two, 0, ADD)]}, config, 3)
    assert len({tokens for tokens, _ in judged["t"].samples}) > 1


class _PlayedPrograms:
    """A policy whose held-out programs are given: the evaluation's input, not what is tested."""

    def __init__(self, programs):
        self.programs = programs

    def play(self, tasks, config, seed):
        return [_episode(t, g, program) for t in tasks for g, program in enumerate(self.programs[t.task_id])], {}

    def update_params(self, params):
        pass


def test_evaluation_measures_the_reward_models_unit_tests_on_held_out_tasks(reward_model, sum_two):
    """eval/reward_model/unit_test_*: the reward model's tests of each held-out task, run against its
    played programs and its reference solution, as the reference's coding evaluation measures them."""
    from rlanything_jax.agents.rollout import RolloutConfig
    from rlanything_jax.system import evaluation

    reverse = next(t for t in coding.builtin_stdio_tasks() if t.task_id == "demo/reverse_string")
    programs = {sum_two.task_id: [ADD, SUBTRACT], reverse.task_id: ["print(input()[::-1])"]}
    config = JudgeConfig(continuous_batching=True, num_judgments=3, max_new_tokens=8, temperature=0.0, batch_size=3)
    prompts = CodingPrompts()
    episodes, report = evaluation.held_out(_PlayedPrograms(programs), [sum_two, reverse],
                                              RolloutConfig(continuous_batching=True, group_size=2), 0)
    _, figures = evaluation.reward_model_report(episodes, RewardModel(UnitTestWriting(prompts), reward_model), config,
                                                0, None)
    groups = {t.task_id: [_episode(t, g, p) for g, p in enumerate(programs[t.task_id])] for t in (sum_two, reverse)}
    expected = unit_test_metrics(write_unit_tests(reward_model, prompts, groups, config, 0)[0])
    assert set(expected) == {"reward_model/unit_test_accuracy", "reward_model/unit_test_detect",
                             "reward_model/unit_test_valid"}
    assert figures == expected
    assert report["episodes"] == 3
