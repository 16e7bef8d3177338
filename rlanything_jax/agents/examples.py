"""Judged rollouts -> training examples for the policy and the reward model (ALGORITHM.md 2.2, 3.3).

Policy: per task, R[g, t] = w_O * O_g + lambda * mean_j S[g, t, j] (minus `action_fallback_penalty`
where a parser fallback chose the action; plus `bonus[g]`, e.g. the unit tests of a reward model that
writes them, when given), z-scored per step index over the task's rollouts. O is +1 / -1 (won / lost), or
the environment's score where it gives one (coding: the fraction of ground-truth tests passed). Every step
is one (prompt, response, advantage) example, or with `pack_turns` every episode is one example holding all its steps
(`core/rl/data.pack_turns`: the same loss at O(T) instead of O(T^2) tokens). Reward
model: per judged step, R * S_j (the penalty when S_j did not parse), z-scored
over the step's m judgments; only tasks whose accuracy is in the band. The
ablations of the paper are weights here: outcome only (lambda = 0), step-wise
reward only (the policy's w_O = 0; the reward model's label keeps O).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from rlanything_jax.agents.trajectory import Episode, JudgedEpisode, group_arrays, task_accuracy
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.rl.advantages import stepwise_group_advantages
from rlanything_jax.core.rl.data import Example
from rlanything_jax.core.rl.data import pack_turns as pack_episode
from rlanything_jax.core.rl.rewards import consistency_advantages, integrated_step_reward, sign_balance_weights


@dataclasses.dataclass(frozen=True)
class SignalConfig:
    num_judgments: int = 3
    # w_O of the policy's reward R = w_O * O + lambda * mean(S); 0 = step-wise reward only (Fig. 1(2)).
    outcome_weight: float = 1.0
    # w_O of the integrated label that the reward model's consistency reward R * S_j is built on: its own
    # switch, so that a policy trained on step-wise rewards only still has its reward model trained with
    # outcome supervision, as in the paper's Fig. 1(2) "optimized step-wise reward" row.
    reward_model_outcome_weight: float = 1.0
    step_weight: float = 1.0          # lambda; 0 = outcome only (GRPO-style)
    advantage_singleton: str = "raw"  # a step index reached by one rollout: "raw" or "zero"
    policy_acc_low: float = 1 / 8     # policy data: tasks with accuracy in [low, high]
    policy_acc_high: float = 7 / 8
    band_low: float = 0.2             # reward-model data: tasks with accuracy in [low, high]
    band_high: float = 0.8
    invalid_judgment_reward: float = -2.0
    # Subtracted from the policy's step reward where the action was not read as written (a parser
    # fallback chose it), as agent RL setups often do; 0 = the reference (the RM's reward is unchanged).
    action_fallback_penalty: float = 0.0
    # Weigh the reward model's examples so that a task's steps with positive and negative integrated
    # reward count equally (rewards.sign_balance_weights); False = the reference.
    balance_labels: bool = False


def step_rewards(judged: Sequence[JudgedEpisode], cfg: SignalConfig,
                 outcome_weight: float) -> tuple[np.ndarray, np.ndarray, object]:
    """Integrated step rewards R [G, T] = outcome_weight * O + lambda * mean(S) and the step mask of one
    task's trainable rollouts."""
    arrays = group_arrays(judged, cfg.num_judgments)
    outcome = outcome_weight * arrays.outcome[:, None]
    rewards = np.asarray(integrated_step_reward(outcome, arrays.judgments, arrays.valid, cfg.step_weight))
    return rewards, arrays.step_mask, arrays


def _in_band(acc: float | None, low: float, high: float) -> bool:
    return acc is not None and low - 1e-9 <= acc <= high + 1e-9


def policy_examples(groups: Mapping[str, Sequence[JudgedEpisode]], cfg: SignalConfig,
                    pack_turns: bool = False,
                    bonus: Mapping[str, np.ndarray] | None = None) -> tuple[list[Example], Counts]:
    """Policy examples of the tasks in the accuracy band: one per step, or with `pack_turns` one per
    multi-step episode (per step when its prompts do not extend each other, counted as unpacked).
    `bonus[task_id]` [G] is added to every step reward of the task's trainable rollouts, in order.
    With their counts (`policy_data/...`)."""
    metrics: Counter = Counter()
    examples = []
    for task_id, judged in groups.items():
        if not _in_band(task_accuracy(judged), cfg.policy_acc_low, cfg.policy_acc_high):
            metrics["policy_data/tasks_out_of_band"] += 1
            continue
        trainable = [j for j in judged if j.episode.trainable]
        rewards, mask, arrays = step_rewards(trainable, cfg, cfg.outcome_weight)
        rewards = rewards - cfg.action_fallback_penalty * arrays.fallback
        if bonus is not None and task_id in bonus:
            rewards = rewards + np.asarray(bonus[task_id], np.float32)[:, None] * mask
        advantages = np.asarray(stepwise_group_advantages(rewards, mask, cfg.advantage_singleton))
        votes = np.asarray(integrated_step_reward(0.0, arrays.judgments, arrays.valid, cfg.step_weight))
        without = np.asarray(stepwise_group_advantages(rewards - votes * mask, mask, cfg.advantage_singleton))
        metrics.update(judgment_sway(advantages, without, mask))
        metrics["policy_data/tasks"] += 1
        for g, item in enumerate(trainable):
            episode_rows, packing = episode_examples(item.episode, advantages[g], pack_turns)
            examples += episode_rows
            metrics.update(packing)
    metrics["policy_data/examples"] += len(examples)
    return examples, dict(metrics)


def judgment_sway(advantages: np.ndarray, without_judgments: np.ndarray, mask: np.ndarray) -> Counts:
    """How much the judgments decide the policy's signal: of a task's steps (`policy_data/steps`), those
    whose advantage has another sign than the same rewards give without the judgments' term (a zero counts
    as a sign: a turn that only lost rollouts reach has an advantage through the judgments alone), and
    those whose sign the judgments reverse."""
    def sign(values: np.ndarray) -> np.ndarray:
        return np.where(np.abs(values) < 1e-6, 0, np.sign(values))
    steps = mask.astype(bool)
    with_, without = sign(advantages), sign(without_judgments)
    changed = steps & (with_ != without)
    return {"policy_data/steps": int(steps.sum()), "policy_data/judgment_sign_changes": int(changed.sum()),
            "policy_data/judgment_sign_reversals": int((changed & (with_ == -without)).sum())}


def episode_examples(episode: Episode, advantages: Sequence[float],
                     pack_turns: bool) -> tuple[list[Example], Counts]:
    """An episode's steps as examples with these per-step advantages: one per step, or with `pack_turns`
    one holding every step (per step when its prompts do not extend each other, counted as unpacked);
    with the packing's count."""
    steps = [Example(step.prompt_tokens, step.response_tokens, float(advantages[t]), step.logprobs,
                     images=step.prompt_images or None, stop_string=step.finish_reason == "stop_string")
             for t, step in enumerate(episode.steps)]
    if pack_turns and len(steps) > 1:  # a one-step episode is its own packed example
        packed = pack_episode(steps)
        counts = {f"policy_data/{'unpacked' if packed is None else 'packed'}_episodes": 1}
        return (steps if packed is None else [packed]), counts
    return steps, {}


def reward_model_examples(groups: Mapping[str, Sequence[JudgedEpisode]],
                          cfg: SignalConfig) -> tuple[list[Example], Counts]:
    """The step judge's examples: its judgments' consistency advantages, for the tasks in the band; with
    their counts (`reward_model_data/...`)."""
    metrics: Counter = Counter()
    examples = []
    for judged in groups.values():
        if not _in_band(task_accuracy(judged), cfg.band_low, cfg.band_high):
            metrics["reward_model_data/tasks_out_of_band"] += 1
            continue
        trainable = [j for j in judged if j.episode.trainable and j.judgments is not None]
        if not trainable:
            continue
        rewards, mask, arrays = step_rewards(trainable, cfg, cfg.reward_model_outcome_weight)
        advantages = np.asarray(consistency_advantages(rewards, arrays.judgments, arrays.valid,
                                                       cfg.invalid_judgment_reward))
        if cfg.balance_labels:
            advantages = advantages * np.asarray(sign_balance_weights(rewards, mask))[..., None]
        metrics["reward_model_data/tasks"] += 1
        for g, item in enumerate(trainable):
            judgments = item.judgments
            for t in range(len(item.episode.steps)):
                images = judgments.prompt_images[t] if judgments.prompt_images else None
                for j, (tokens, logprobs) in enumerate(judgments.samples[t]):
                    if not tokens:   # not generated: the judge prompt was over the sampler's limit
                        continue
                    examples.append(Example(judgments.prompts[t], tokens, float(advantages[g, t, j]), logprobs,
                                            images=images or None))
    metrics["reward_model_data/examples"] += len(examples)
    return examples, dict(metrics)
