"""The RLAnything formulas and train steps."""

from rlanything_jax.core.rl.advantages import stepwise_group_advantages
from rlanything_jax.core.rl.losses import ppo_clip_k3_loss, ppo_clip_k3_sums
from rlanything_jax.core.rl.normalize import masked_zscore
from rlanything_jax.core.rl.rewards import (
                                       consistency_advantages,
                                       integrated_step_reward,
                                       sign_balance_weights,
                                       unit_test_raw_rewards,
                                       unit_test_rewards,
)
from rlanything_jax.core.rl.train_config import TrainConfig

__all__ = ["TrainConfig", "consistency_advantages", "integrated_step_reward", "masked_zscore", "ppo_clip_k3_loss",
           "ppo_clip_k3_sums", "sign_balance_weights", "stepwise_group_advantages", "unit_test_raw_rewards",
           "unit_test_rewards"]
