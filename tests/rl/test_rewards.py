"""Hand-computed cases for the reward formulas (ALGORITHM.md 2.1, 3.3, 3.4)."""

import jax
import numpy as np
import pytest

from rlanything_jax.core.rl import (
    consistency_advantages,
    integrated_step_reward,
    sign_balance_weights,
    unit_test_raw_rewards,
    unit_test_rewards,
)

T, F = True, False


def test_integrated_step_reward():
    outcome = np.array([1.0, -1.0, -1.0, 1.0])
    judgments = np.array([[1, -1, 1], [1, 0, -1], [1, 1, 1], [-1, -1, -1]])
    valid = np.array([[T, T, T], [T, F, T], [T, T, F], [T, T, T]])
    # 1 + (1-1+1)/3; -1 + (1+0-1)/3; -1 + (1+1+0)/3 (the invalid vote counts as 0 but stays in m); 1 - 1
    expected = [1 + 1 / 3, -1.0, -1 + 2 / 3, 0.0]
    np.testing.assert_allclose(integrated_step_reward(outcome, judgments, valid), expected, atol=1e-6)
    # lambda = 0.5: 1 + 0.5 * (1/3)
    np.testing.assert_allclose(integrated_step_reward(1.0, np.array([1, 1, -1]), np.array([T, T, T]), lam=0.5),
                               1 + 0.5 / 3, atol=1e-6)


def test_consistency_advantages():
    # Step A: R = 0.5, votes +1, -1, invalid -> raw [0.5, -0.5, -2]; mean -2/3;
    # population std sqrt(((7/6)^2 + (1/6)^2 + (4/3)^2) / 3) = 1.0274023
    # Step B: R = 4/3, votes +1, -1, +1 -> raw [4/3, -4/3, 4/3] -> z [1/sqrt2, -sqrt2, 1/sqrt2]
    # Step C: all votes agree -> zero variance -> 0
    step_reward = np.array([0.5, 4 / 3, -1.0])
    judgments = np.array([[1, -1, 1], [1, -1, 1], [-1, -1, -1]])
    valid = np.array([[T, T, F], [T, T, T], [T, T, T]])
    std_a = np.sqrt(((7 / 6) ** 2 + (1 / 6) ** 2 + (4 / 3) ** 2) / 3)
    expected = [[(7 / 6) / std_a, (1 / 6) / std_a, (-4 / 3) / std_a],
                [2 ** -0.5, -(2 ** 0.5), 2 ** -0.5],
                [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(consistency_advantages(step_reward, judgments, valid), expected, atol=1e-5)


def test_consistency_invalid_penalty_and_padding():
    # R = 1, votes [+1, invalid], penalty -3 -> raw [1, -3] -> z [1, -1]; a padded third sample is ignored.
    out = consistency_advantages(np.array(1.0), np.array([1, 1, 1]), np.array([T, F, T]), invalid_penalty=-3.0,
                                 sample_mask=np.array([T, T, F]))
    np.testing.assert_allclose(out, [1.0, -1.0, 0.0], atol=1e-6)


def test_sign_balance_weights():
    # A won rollout of 2 steps (R > 0) and a lost one of 4 steps (R < 0, one of them R = 0), padded to T = 4.
    # n+ = 2, n- = 3, n = 5: positive steps weigh 5/4, negative ones 5/6 (2 * 5/4 = 3 * 5/6 = 5/2), R = 0 weighs 1.
    reward = np.array([[1.3, 0.7, 0.0, 0.0], [-1.0, -0.7, 0.0, -1.3]])
    mask = np.array([[T, T, F, F], [T, T, T, T]])
    np.testing.assert_allclose(sign_balance_weights(reward, mask), [[5 / 4, 5 / 4, 0, 0], [5 / 6, 5 / 6, 1, 5 / 6]],
                               atol=1e-6)
    # One sign only: nothing to balance.
    np.testing.assert_allclose(sign_balance_weights(np.array([[-1.0, -0.3]]), np.array([[T, T]])), [[1, 1]])


# Codes 0, 1 pass every ground-truth test ("GT codes"); codes 2, 3 do not.
PASSES_GT = np.array([T, T, F, F])
PASSES_UT = np.array([[T, T, F],
                      [T, F, F],
                      [F, T, T],
                      [T, T, F]])


def test_unit_test_raw_rewards():
    # UT0: both GT codes pass -> GT test; non-GT code 2 fails it -> +1.
    # UT1: GT code 1 fails -> not a GT test; non-GT codes 2 and 3 pass it -> -2.
    # UT2: GT code 0 fails -> not a GT test; non-GT code 2 passes it -> -1.
    np.testing.assert_array_equal(unit_test_raw_rewards(PASSES_GT, PASSES_UT), [1.0, -2.0, -1.0])


def test_unit_test_rewards_zscore_per_task():
    # raw [1, -2, -1]: mean -2/3, population std sqrt(14/9) = 1.2472191
    std = np.sqrt(14 / 9)
    expected = [(5 / 3) / std, (-4 / 3) / std, (-1 / 3) / std]
    np.testing.assert_allclose(unit_test_rewards(PASSES_GT, PASSES_UT), expected, atol=1e-5)


def test_unit_tests_when_every_code_is_gt_or_none_is():
    all_gt = np.array([T, T, T])
    passes = np.array([[T, T], [T, F], [T, T]])
    # No non-GT code: +1 for a test all pass, -1 otherwise -> raw [1, -1] -> z [1, -1].
    np.testing.assert_array_equal(unit_test_raw_rewards(all_gt, passes), [1.0, -1.0])
    np.testing.assert_allclose(unit_test_rewards(all_gt, passes), [1.0, -1.0], atol=1e-6)
    # No GT code: the task is skipped.
    np.testing.assert_array_equal(unit_test_rewards(np.array([F, F, F]), passes), [0.0, 0.0])


def test_unit_tests_batched_with_padding_and_jit():
    # Task 0 as above plus a padded code and a padded test; task 1 has no GT code.
    gt = np.array([[T, T, F, F, F], [F, F, F, F, F]])
    ut = np.zeros((2, 5, 4), bool)
    ut[0, :4, :3] = PASSES_UT
    ut[0, 4] = True  # the padded code passes everything: must not count as non-GT
    code_mask = np.array([[T, T, T, T, F], [T, T, T, F, F]])
    ut_mask = np.array([[T, T, T, F], [T, T, F, F]])
    out = jax.jit(unit_test_rewards)(gt, ut, code_mask, ut_mask)
    np.testing.assert_allclose(out[0, :3], unit_test_rewards(PASSES_GT, PASSES_UT), atol=1e-6)
    assert out[0, 3] == 0 and not np.any(out[1])


@pytest.mark.parametrize("fn", [integrated_step_reward])
def test_jit_friendly(fn):
    out = jax.jit(fn)(np.ones(2), np.ones((2, 3)), np.ones((2, 3), bool))
    np.testing.assert_allclose(out, [2.0, 2.0])
