"""Warm start: supervised fine-tuning of the policy and the reward model on expert data.

Policy: every step of the expert's walkthroughs, as the policy would have seen it in
its multi-turn chat, with the answer "\\boxed{k}" (k = the expert action's index).
Reward model: the judge prompt of expert steps labelled "\\boxed{1}" and of other
admissible actions from the same states (played in the real engine to get their next
observation) labelled "\\boxed{-1}", as an expert annotator would.

SFT reuses the policy-gradient train step: with advantage 1 and the sampler
log-probabilities unknown (NaN: on-policy), PPO-clip's gradient is the gradient of
the responses' mean log-likelihood and the KL term vanishes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from rlanything_jax.agents import prompts
from rlanything_jax.agents.text_game import TextGameScenario
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.envs.base import Observation, Task, make_env
from rlanything_jax.rl.data import Example
from rlanything_jax.rl.phase import Learner, train_phase
from rlanything_jax.rl.train_state import TrainState


@dataclasses.dataclass(frozen=True)
class ExpertStep:
    observation: Observation
    action: str
    next_observation: Observation


def play_expert(task: Task, actions: Sequence[str], env=None) -> list[ExpertStep]:
    """Plays `actions` in a fresh env; stops at the end of the game or of the plan."""
    env = env or make_env(task.kind)
    observation = env.reset(task)
    steps = []
    for action in actions:
        result = env.step(action)
        steps.append(ExpertStep(observation, action, result.observation))
        observation = result.observation
        if result.done:
            break
    return steps


def answer_text(observation: Observation, action: str) -> str:
    return "\\boxed{%d}" % prompts.candidate_actions(observation.admissible_actions).index(action)


def expert_dialogue(expert_steps: Sequence[ExpertStep]) -> list[tuple[prompts.PolicyDialogue, str]]:
    """The policy's chat before each expert step, with that step's answer; the last entry's
    dialogue advanced by its answer is the whole game."""
    turns = []
    if not expert_steps:
        return turns
    first = expert_steps[0].observation
    dialogue = prompts.PolicyDialogue.start(first.text, first.admissible_actions)
    for step in expert_steps:
        answer = answer_text(step.observation, step.action)
        turns.append((dialogue, answer))
        dialogue = dialogue.advance(answer, step.next_observation.text, step.next_observation.admissible_actions,
                                    action_taken=step.action)
    return turns


def whole_expert_dialogue(expert_steps: Sequence[ExpertStep]) -> prompts.PolicyDialogue | None:
    turns = expert_dialogue(expert_steps)
    if not turns:
        return None
    dialogue, answer = turns[-1]
    last = expert_steps[-1]
    return dialogue.advance(answer, last.next_observation.text, last.next_observation.admissible_actions,
                            action_taken=last.action)


def policy_sft_examples(tokenizer, expert_steps: Sequence[ExpertStep]) -> list[Example]:
    """One example per expert step: the chat so far (prompt) and the boxed index + end of turn."""
    end = tokenizer.encode("<|im_end|>")
    examples = []
    for dialogue, answer in expert_dialogue(expert_steps):
        response = tokenizer.encode(answer) + end
        examples.append(Example(tokenizer.encode_chat(dialogue.messages), response, 1.0,
                                [float("nan")] * len(response)))
    return examples


def _episode_of(task: Task, steps: Sequence[tuple[Observation, str, str, Observation]]) -> Episode:
    records = [StepRecord(observation=o, prompt_tokens=[], response_tokens=[], logprobs=[], response_text=r,
                          finish_reason="stop", action=a, parse_status="ok", next_observation=n)
               for o, a, r, n in steps]
    return Episode(task=task, group_index=0, steps=records)


def reward_sft_examples(tokenizer, task: Task, expert_steps: Sequence[ExpertStep], rng: np.random.Generator,
                        negatives_per_step: int = 1, env=None) -> list[Example]:
    """Judge examples: each expert step labelled +1 and `negatives_per_step` other actions labelled -1."""
    scenario = TextGameScenario()
    env = env or make_env(task.kind)
    end = tokenizer.encode("<|im_end|>")
    examples = []
    history: list[tuple[Observation, str, str, Observation]] = []
    for t, step in enumerate(expert_steps):
        others = [a for a in step.observation.admissible_actions if a != step.action]
        chosen = list(rng.choice(others, size=min(negatives_per_step, len(others)), replace=False)) if others else []
        for action, label in [(step.action, 1)] + [(str(a), -1) for a in chosen]:
            if label == 1:
                next_observation = step.next_observation
            else:  # replay the expert prefix, then take the other action
                env.reset(task)
                for earlier in expert_steps[:t]:
                    env.step(earlier.action)
                next_observation = env.step(action).observation
            steps = history + [(step.observation, action, answer_text(step.observation, action), next_observation)]
            prompt = tokenizer.encode_chat(scenario.judge_messages(task, _episode_of(task, steps), t))
            response = tokenizer.encode("\\boxed{%d}" % label) + end
            examples.append(Example(prompt, response, 1.0, [float("nan")] * len(response)))
        history.append((step.observation, step.action, answer_text(step.observation, step.action),
                        step.next_observation))
    return examples


def supervised_epochs(learner: Learner, state: TrainState, examples: Sequence[Example], epochs: int, seed: int,
                      prefix: str, log: Callable[[str], None] = print) -> tuple[TrainState, list[float]]:
    """`epochs` passes over `examples`; returns the state and each epoch's mean loss."""
    losses = []
    for epoch in range(epochs):
        metrics: Counter = Counter()
        state, epoch_metrics = train_phase(learner, state, examples, seed=seed + epoch, metrics=metrics,
                                           prefix=prefix)
        losses.append(epoch_metrics.get(f"{prefix}/entropy", float("nan")))  # = the targets' mean NLL
        log(f"warm start {prefix}: epoch {epoch + 1}/{epochs} token NLL {losses[-1]:.4f}")
    return state, losses
