"""Hand-computed cases for the per-step-index group advantages (ALGORITHM.md 2.2)."""

import jax
import numpy as np
import pytest

from rlanything_jax.core.rl import stepwise_group_advantages

# Three rollouts of one task: lengths 3, 2 and 1 steps.
REWARDS = np.array([[1.0, 2.0, 5.0],
                    [3.0, 4.0, 0.0],
                    [2.0, 0.0, 0.0]])
MASK = np.array([[1, 1, 1],
                 [1, 1, 0],
                 [1, 0, 0]], bool)


def test_zscore_per_step_index_and_raw_singletons():
    # t=0: [1, 3, 2] -> mean 2, population std sqrt(2/3) -> [-1.2247449, 1.2247449, 0]
    # t=1: [2, 4]    -> mean 3, std 1 -> [-1, 1]
    # t=2: only rollout 0 reaches it -> its raw reward 5
    expected = [[-1.2247449, -1.0, 5.0],
                [1.2247449, 1.0, 0.0],
                [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(stepwise_group_advantages(REWARDS, MASK), expected, atol=1e-6)


def test_singleton_zero_mode():
    out = stepwise_group_advantages(REWARDS, MASK, singleton="zero")
    assert out[0, 2] == 0.0
    np.testing.assert_allclose(out[:, 0], [-1.2247449, 1.2247449, 0.0], atol=1e-6)


def test_zero_variance_gives_zero():
    rewards = np.array([[1.5, 2.0], [1.5, 2.0], [1.5, -2.0]])
    out = stepwise_group_advantages(rewards, np.ones((3, 2), bool))
    np.testing.assert_array_equal(out[:, 0], [0.0, 0.0, 0.0])
    # t=1: [2, 2, -2] -> mean 2/3, std sqrt(32/9) -> [0.7071068, 0.7071068, -1.4142135]
    np.testing.assert_allclose(out[:, 1], [0.7071068, 0.7071068, -1.4142135], atol=1e-6)


def test_batched_over_tasks_under_jit():
    rewards = np.stack([REWARDS, REWARDS * 2])
    mask = np.stack([MASK, MASK])
    out = jax.jit(stepwise_group_advantages)(rewards, mask)
    np.testing.assert_allclose(out[1, :, :2], out[0, :, :2], atol=1e-6)  # z-scores are scale-free
    assert out[1, 0, 2] == 10.0  # the singleton stays raw


def test_unknown_singleton_mode():
    with pytest.raises(ValueError, match="singleton"):
        stepwise_group_advantages(REWARDS, MASK, singleton="mean")
