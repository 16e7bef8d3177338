"""RLAnything's rewards (ALGORITHM.md sections 2.1, 3.3, 3.4), as pure array functions.

Judgments S are the reward model's votes in {-1, +1}; `valid` marks the votes that
parsed (an unparseable judgment is invalid).
"""

from __future__ import annotations

import jax.numpy as jnp

from rlanything_jax.core.rl.normalize import masked_zscore


def integrated_step_reward(outcome: jnp.ndarray, judgments: jnp.ndarray, valid: jnp.ndarray,
                           lam: float = 1.0) -> jnp.ndarray:
    """R = O + lam * (1/m) * sum_j S_j over the last axis (m judgments of one step).

    Invalid judgments count as 0 and still count in m, as in the reference.
    `outcome` broadcasts against `judgments[..., 0]`.
    """
    votes = jnp.where(valid.astype(bool), jnp.asarray(judgments, jnp.float32), 0.0)
    return jnp.asarray(outcome, jnp.float32) + lam * jnp.mean(votes, axis=-1)


def consistency_advantages(step_reward: jnp.ndarray, judgments: jnp.ndarray, valid: jnp.ndarray,
                           invalid_penalty: float = -2.0, sample_mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """The reward model's advantages: R * S_j per judgment (the penalty when invalid),
    z-scored over the m judgments of the same step (last axis).

    `step_reward` has the shape of `judgments[..., 0]`. `sample_mask` marks real
    judgments when groups are padded.
    """
    raw = jnp.where(valid.astype(bool), jnp.asarray(step_reward, jnp.float32)[..., None] * judgments,
                    invalid_penalty)
    if sample_mask is None:
        sample_mask = jnp.ones(raw.shape, bool)
    return masked_zscore(raw, sample_mask, axis=-1)


def sign_balance_weights(step_reward: jnp.ndarray, step_mask: jnp.ndarray) -> jnp.ndarray:
    """Per-step weights [G, T] that give one task's steps with R > 0 and with R < 0 equal total weight
    (n / 2n+ and n / 2n-, n = n+ + n-; steps with R = 0 weigh 1; all 1 unless both signs occur).

    The task band balances outcomes per task, not steps: a lost rollout runs to the turn limit and a won
    one ends early, so most of the reward model's labels are negative and its consistency objective
    leans to -1 (ALGORITHM.md 4.4: under imbalance the RM is pushed toward the majority label).
    """
    mask = step_mask.astype(bool)
    positive = mask & (step_reward > 0)
    negative = mask & (step_reward < 0)
    n_pos, n_neg = positive.sum(), negative.sum()
    both = (n_pos > 0) & (n_neg > 0)
    total = (n_pos + n_neg).astype(jnp.float32)
    weights = jnp.where(positive, total / (2.0 * jnp.maximum(n_pos, 1)),
                        jnp.where(negative, total / (2.0 * jnp.maximum(n_neg, 1)), 1.0))
    return jnp.where(both & mask, weights, jnp.where(mask, 1.0, 0.0))


def unit_test_raw_rewards(code_passes_gt: jnp.ndarray, code_passes_ut: jnp.ndarray,
                          code_mask: jnp.ndarray | None = None, ut_mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Raw reward of each generated unit test of a task (ALGORITHM.md 3.4).

    code_passes_gt [..., C]: the code passes all ground-truth tests ("GT code").
    code_passes_ut [..., C, U]: code c passes generated test u.
    A test is a "GT test" if every GT code passes it. With no non-GT code: +1 for a GT
    test, -1 otherwise. Else a GT test earns the number of non-GT codes it fails (it
    discriminates), a non-GT test loses the number of non-GT codes it passes.
    """
    gt = code_passes_gt.astype(bool)
    passes = code_passes_ut.astype(bool)
    codes = jnp.ones(gt.shape, bool) if code_mask is None else code_mask.astype(bool)
    gt = gt & codes
    non_gt = ~gt & codes
    is_gt_test = jnp.all(passes | ~gt[..., :, None], axis=-2)
    non_gt_fail = jnp.sum(~passes & non_gt[..., :, None], axis=-2).astype(jnp.float32)
    non_gt_pass = jnp.sum(passes & non_gt[..., :, None], axis=-2).astype(jnp.float32)
    any_non_gt = jnp.any(non_gt, axis=-1, keepdims=True)
    reward = jnp.where(any_non_gt, jnp.where(is_gt_test, non_gt_fail, -non_gt_pass),
                       jnp.where(is_gt_test, 1.0, -1.0))
    if ut_mask is not None:
        reward = jnp.where(ut_mask.astype(bool), reward, 0.0)
    return reward


def unit_test_rewards(code_passes_gt: jnp.ndarray, code_passes_ut: jnp.ndarray,
                      code_mask: jnp.ndarray | None = None, ut_mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Unit-test advantages: the raw rewards z-scored over each task's tests (last axis).

    Tasks with no GT code are skipped: all their advantages are 0.
    """
    raw = unit_test_raw_rewards(code_passes_gt, code_passes_ut, code_mask, ut_mask)
    tests = jnp.ones(raw.shape, bool) if ut_mask is None else ut_mask.astype(bool)
    codes = jnp.ones(code_passes_gt.shape, bool) if code_mask is None else code_mask.astype(bool)
    has_gt_code = jnp.any(code_passes_gt.astype(bool) & codes, axis=-1, keepdims=True)
    return masked_zscore(raw, tests & has_gt_code, axis=-1)
