"""The RLAnything formulas and train steps."""

from rlanything_jax.curriculum.adaptation import EASIER, HARDER, KEEP, accept_candidate, difficulty_direction
from rlanything_jax.rl.advantages import stepwise_group_advantages
from rlanything_jax.rl.losses import ppo_clip_k3_loss
from rlanything_jax.rl.normalize import masked_zscore
from rlanything_jax.rl.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from rlanything_jax.rl.rewards import (consistency_advantages, integrated_step_reward, sign_balance_weights,
                                       unit_test_raw_rewards, unit_test_rewards)

__all__ = ["ADVANTAGE_ESTIMATORS", "EASIER", "HARDER", "KEEP", "POLICY_LOSSES", "accept_candidate",
           "consistency_advantages", "difficulty_direction", "integrated_step_reward", "masked_zscore",
           "ppo_clip_k3_loss", "sign_balance_weights", "stepwise_group_advantages", "unit_test_raw_rewards", "unit_test_rewards"]
