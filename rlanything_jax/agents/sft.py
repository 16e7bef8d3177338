"""Warm start: supervised fine-tuning of the policy and the reward model on expert data.

Policy: the expert's demonstrations as token records built exactly as a rollout builds
them (first prompt, response, turn delta, ...), with the scenario's answer for each
expert action as the response. Reward model: the judge prompts of labelled steps (the
expert's and other admissible actions from the same states, played in the real engine
to get their next observation) with the judgment of the scenario expert's label.

SFT reuses the policy-gradient train step: with advantage 1 and the sampler
log-probabilities unknown (NaN: on-policy), PPO-clip's gradient is the gradient of
the responses' mean log-likelihood and the KL term vanishes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.examples import episode_examples
from rlanything_jax.agents.prompt_tokens import ImageCache, encode_prompt, next_prompt
from rlanything_jax.agents.trajectory import Episode, ExpertStep, LabelledStep, StepRecord
from rlanything_jax.core.rl.data import Example
from rlanything_jax.core.rl.phase import Learner, train_phase
from rlanything_jax.core.rl.train_state import TrainState
from rlanything_jax.core.seeds import derive_seed


def end_of_turn_id(tokenizer) -> int:
    """The token a chat model ends its turn with: ChatML's <|im_end|> where the vocabulary has it."""
    token_id = tokenizer.token_to_id("<|im_end|>")
    return tokenizer.eos_id if token_id is None else token_id


def expert_episode(task: Task, expert_steps: Sequence[ExpertStep], prompts, tokenizer=None) -> Episode:
    """The expert's game as the rollout would record it had the policy answered like the expert.

    With a tokenizer, every step carries the exact prompt and response tokens (the stop
    token ends each response); without one, only the text fields (enough for judge prompts).
    """
    steps: list[StepRecord] = []
    history: list[int] = []
    images: tuple = ()
    cache = ImageCache()
    stop_id = end_of_turn_id(tokenizer) if tokenizer is not None else None
    for step in expert_steps:
        answer = prompts.answer_text(step.observation, step.action)
        response: list[int] = []
        if tokenizer is not None:
            so_far = Episode(task=task, group_index=0, steps=tuple(steps))
            prompt = next_prompt(tokenizer, prompts, task, so_far, step.observation, history, images, "stop",
                                 tokenizer.decode([stop_id]), cache)
            history, images = list(prompt.tokens), prompt.images
            response = tokenizer.encode(answer) + [stop_id]
        steps.append(StepRecord(
            observation=step.observation, prompt_tokens=tuple(history), response_tokens=tuple(response),
            logprobs=(float("nan"),) * len(response), response_text=answer, finish_reason="stop",
            action=step.action, parse_status="ok", next_observation=step.next_observation, prompt_images=images))
        history = history + response
    return Episode(task=task, group_index=0, steps=tuple(steps), won=True, end_reason="won")


def policy_sft_examples(episode: Episode, pack: bool = True) -> list[Example]:
    """The expert's answers (+ stop token) after the conversation so far: one example per step,
    or with `pack` one example holding every step (`rl.data.pack_turns`: same loss, O(T) tokens)."""
    return episode_examples(episode, [1.0] * len(episode.steps), pack_turns=pack)[0]


def judge_prompt(tokenizer, prompts, task: Task, labelled: LabelledStep,
                 image_inputs=None) -> tuple[list[int], list]:
    """The reward model's prompt for the last step of `labelled`: its tokens and images (encoded by
    `image_inputs`, the reward model's, where the prompt has images)."""
    episode = expert_episode(task, labelled.steps, prompts)
    return encode_prompt(tokenizer, prompts.judge_messages(task, episode, len(labelled.steps) - 1),
                         image_inputs=image_inputs)


def reward_sft_examples(tokenizer, prompts, task: Task, labelled: Sequence[LabelledStep],
                        image_inputs=None) -> list[Example]:
    """Judge examples (prompt, the judgment of its label) for labelled steps of an expert game."""
    examples = []
    for step in labelled:
        response = tokenizer.encode(prompts.judgment_text(step.label)) + [end_of_turn_id(tokenizer)]
        tokens, images = judge_prompt(tokenizer, prompts, task, step, image_inputs)
        examples.append(Example(tokens, response, 1.0, [float("nan")] * len(response), images=images or None))
    return examples


def supervised_epochs(learner: Learner, state: TrainState, examples: Sequence[Example], epochs: int, seed: int,
                      prefix: str, log: Callable[[str], None] = print) -> tuple[TrainState, list[float]]:
    """`epochs` passes over `examples`; returns the state and each epoch's mean loss."""
    losses = []
    started = time.perf_counter()
    for epoch in range(epochs):
        state, epoch_metrics = train_phase(learner, state, examples, seed=derive_seed(seed, epoch), prefix=prefix)
        losses.append(epoch_metrics.get(f"{prefix}/entropy", float("nan")))  # = the targets' mean NLL
        log(f"warm start {prefix}: epoch {epoch + 1}/{epochs} token NLL {losses[-1]:.4f} "
            f"({time.perf_counter() - started:.0f} s)")
    return state, losses
