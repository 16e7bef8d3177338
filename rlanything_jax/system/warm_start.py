"""The warm start: SFT of the policy and the reward model on the scenario expert's data, before RL.

Policy: the expert's demonstrations as the rollout would record them. Reward model: what its
role makes of the expert's play (`RewardModelRole.warm_start_examples`: e.g. the judge prompts of
the expert's labelled steps with the judgment of their label, or each task's test prompt answered
with its ground-truth tests).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from rlanything_jax.agents import sft
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.reward_models import RewardModelRole
from rlanything_jax.agents.scenario import Scenario
from rlanything_jax.core.rl.data import Example
from rlanything_jax.core.rl.phase import Learner
from rlanything_jax.core.rl.train_state import TrainState, init_train_state
from rlanything_jax.core.seeds import derive_rng, derive_seed
from rlanything_jax.system.config_sections import WarmStartConfig


def warm_start_examples(scenario: Scenario, role: RewardModelRole, tasks: Sequence[Task], env: Env, policy_tokenizer,
                        reward_tokenizer, cfg: WarmStartConfig, seed: int,
                        reward_image_inputs=None) -> tuple[list[Example], list[Example]]:
    """(policy examples, reward-model examples of its `role`) from the expert's play of `tasks`."""
    rng = derive_rng(seed, "warm_start")
    policy, reward = [], []
    for task in tasks:
        steps = scenario.expert.demonstration(task, env, rng)
        if not steps:
            continue
        policy += sft.policy_sft_examples(sft.expert_episode(task, steps, scenario.prompts, policy_tokenizer))
        if not cfg.reward_epochs:
            continue
        reward += role.warm_start_examples(reward_tokenizer, task, steps, scenario.expert, env, rng,
                                           cfg.negatives_per_step, image_inputs=reward_image_inputs)
    return policy, reward


def supervised(learner: Learner, learning_rate: float, batch_size: int, num_examples: int) -> Learner:
    """The learner with SFT settings: its own constant learning rate (not the RL schedule), one pass in
    updates of `batch_size` examples."""
    config = dataclasses.replace(learner.train_config, learning_rate=learning_rate, schedule="constant",
                                 ppo_epochs=1, micro_batch_size=batch_size,
                                 updates_per_step=max(1, math.ceil(num_examples / batch_size)))
    return dataclasses.replace(learner, train_config=config, compiled={})


def train_supervised(learner: Learner, state: TrainState, examples: Sequence[Example], cfg: WarmStartConfig,
                     epochs: int, seed: int, prefix: str, log: Callable[[str], None]) -> TrainState:
    """`epochs` SFT passes over `examples`; the returned state has fresh RL optimizer moments."""
    if not examples or not epochs:
        return state
    sft_learner = supervised(learner, cfg.learning_rate, cfg.batch_size, len(examples))
    start = init_train_state(state.params, sft_learner.tx, master_copy=sft_learner.train_config.master_copy,
                             base=state.base, lora_scale=state.lora_scale)
    trained, _ = sft.supervised_epochs(sft_learner, start, examples,
                                       epochs, derive_seed(seed, "sft", prefix), prefix, log)
    # With a frozen KL reference, the warm-started model is it. Under LoRA the base stays, the adapters go on.
    fresh = (learner.fresh_state(trained.params) if trained.base is None else
             learner.fresh_state(trained.base, adapters=trained.params))
    # A float32 master copy goes on from the SFT's own, not from its bfloat16 rounding.
    return fresh if fresh.master is None or trained.master is None else fresh.replace(master=trained.master)
