"""Warm start: supervised fine-tuning of the policy and the reward model on expert data.

Policy: the expert's walkthroughs as token records built exactly as a rollout builds
them (first prompt, response, turn delta, ...), with the scenario's answer for each
expert action as the response. Reward model: the judge prompt of expert steps
labelled +1 and of other admissible actions from the same states (played in the real
engine to get their next observation) labelled -1, as an expert annotator would.

SFT reuses the policy-gradient train step: with advantage 1 and the sampler
log-probabilities unknown (NaN: on-policy), PPO-clip's gradient is the gradient of
the responses' mean log-likelihood and the KL term vanishes.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence

import numpy as np

from rlanything_jax.agents.chat_tokens import first_prompt, turn_delta
from rlanything_jax.agents.trajectory import Episode, StepRecord
from rlanything_jax.envs.base import Observation, Task, make_env
from rlanything_jax.rl.data import Example
from rlanything_jax.rl.examples import episode_examples
from rlanything_jax.rl.phase import Learner, train_phase
from rlanything_jax.rl.train_state import TrainState


@dataclasses.dataclass(frozen=True)
class ExpertStep:
    observation: Observation
    action: str
    next_observation: Observation


def play_expert(task: Task, actions: Sequence[str], env=None, optional: Collection[str] = ()) -> list[ExpertStep]:
    """Plays `actions` in a fresh env; stops at the end of the game or of the plan. An action in
    `optional` is played only where the game lists it."""
    env = env or make_env(task.kind)
    observation = env.reset(task)
    steps = []
    for action in actions:
        if action in optional and action not in observation.admissible_actions:
            continue
        result = env.step(action)
        steps.append(ExpertStep(observation, action, result.observation))
        observation = result.observation
        if result.done:
            break
    return steps


def play_searching_expert(task: Task, plan: Sequence[str], rng: np.random.Generator, env=None) -> list[ExpertStep]:
    """An expert that does not know where the object is: it visits other receptacles in a random order
    (opening the closed ones to look inside) and, once the plan's first receptacle comes up, plays the
    plan. The number of wrong visits is uniform over 0..all, as in a blind search, so the demonstrations
    show what to do when a guess was wrong (the walkthrough alone goes straight to the object)."""
    if not plan or not plan[0].startswith("go to "):
        return play_expert(task, plan, env)
    env = env or make_env(task.kind)
    wrong = [a for a in env.reset(task).admissible_actions if a.startswith("go to ") and a != plan[0]]
    wrong = [wrong[i] for i in rng.permutation(len(wrong))][:int(rng.integers(0, len(wrong) + 1))]
    opens = ["open " + go[len("go to "):] for go in wrong]   # looking inside the closed ones
    detour = [action for pair in zip(wrong, opens) for action in pair]
    return play_expert(task, detour + list(plan), env, optional=set(opens))


def progress_label(plan: Sequence[str], earlier_actions: Sequence[str], action: str) -> int:
    """The expert's judgment of a step: +1 when the action is the next walkthrough step not yet done
    (the earlier actions are matched against the walkthrough in order), -1 otherwise. Going to the
    goal receptacle before holding the object is then a wrong visit, and going there later is progress."""
    done = _walkthrough_done(plan, earlier_actions)
    return 1 if done < len(plan) and action == plan[done] else -1


def _walkthrough_done(plan: Sequence[str], earlier_actions: Sequence[str]) -> int:
    done = 0
    for earlier in earlier_actions:
        if done < len(plan) and earlier == plan[done]:
            done += 1
    return done


_PLACE = ("go to ", "open ", "close ")


def _place_of(action: str) -> str | None:
    """Where an action happens: the receptacle it goes to, opens, takes from, puts in/on or uses."""
    for prefix in _PLACE:
        if action.startswith(prefix):
            return action[len(prefix):]
    for word in (" from ", " to ", " in ", " on ", " with "):
        if word in action:
            return action.rsplit(word, 1)[1]
    return None


def search_label(plan: Sequence[str], earlier_actions: Sequence[str], action: str,
                 admissible: Sequence[str] = ()) -> int:
    """The judgment of an expert who knows only what the agent has seen (`progress_label`'s expert also
    knows where the object is hidden, so it calls every search step wrong).

    Until the agent has reached the receptacle of the walkthrough's first step (and opened it, where the
    walkthrough does), it is searching: going to a receptacle not visited yet is +1, and so is opening
    the one it stands at; while that one is closed and unopened (`admissible` lists "open" for it),
    opening it is the only good step. Once the object is found, the walkthrough's next step is +1, as
    is going back to where that step happens; the rest is -1."""
    if not plan or not plan[0].startswith("go to "):
        return progress_label(plan, earlier_actions, action)
    goes = [a[len("go to "):] for a in earlier_actions if a.startswith("go to ")]
    at = goes[-1] if goes else None
    reach = 2 if len(plan) > 1 and plan[1] == "open " + plan[0][len("go to "):] else 1
    done = _walkthrough_done(plan, earlier_actions)
    if done < reach:
        look_inside = f"open {at}"
        if at is not None and look_inside in admissible and look_inside not in earlier_actions:
            return 1 if action == look_inside else -1
        if action.startswith("go to "):
            return 1 if action[len("go to "):] not in goes else -1
        return 1 if action == look_inside and action not in earlier_actions else -1
    if done >= len(plan):
        return -1
    if action == plan[done]:
        return 1
    place = _place_of(plan[done])
    returns = not plan[done].startswith("go to ") and place is not None and place != at
    return 1 if returns and action == f"go to {place}" else -1


def step_label(kind: str, plan: Sequence[str], earlier_actions: Sequence[str], action: str,
               admissible: Sequence[str] = ()) -> int:
    """The expert's label of a step: "walkthrough" (`progress_label`: an expert who knows where
    everything is) or "search" (`search_label`: one who knows only what the agent has seen)."""
    if kind == "search":
        return search_label(plan, earlier_actions, action, admissible)
    return progress_label(plan, earlier_actions, action)


def end_of_turn_id(tokenizer) -> int:
    """The token a chat model ends its turn with: ChatML's <|im_end|> where the vocabulary has it."""
    token_id = tokenizer.token_to_id("<|im_end|>")
    return tokenizer.eos_id if token_id is None else token_id


def expert_episode(task: Task, expert_steps: Sequence[ExpertStep], scenario, tokenizer=None) -> Episode:
    """The expert's game as the rollout would record it had the policy answered like the expert.

    With a tokenizer, every step carries the exact prompt and response tokens (the stop
    token ends each response); without one, only the text fields (enough for judge prompts).
    """
    episode = Episode(task=task, group_index=0, won=True, end_reason="won")
    history: list[int] = []
    stop_id = end_of_turn_id(tokenizer) if tokenizer is not None else None
    for t, step in enumerate(expert_steps):
        answer = scenario.answer_text(step.observation, step.action)
        response: list[int] = []
        if tokenizer is not None:
            if t == 0:
                history = first_prompt(tokenizer, scenario.initial_messages(task, step.observation))
            else:
                history = history + turn_delta(tokenizer, scenario.turn_message(episode, step.observation), "stop",
                                               tokenizer.decode([stop_id]))
            response = tokenizer.encode(answer) + [stop_id]
        episode.steps.append(StepRecord(
            observation=step.observation, prompt_tokens=list(history), response_tokens=response,
            logprobs=[float("nan")] * len(response), response_text=answer, finish_reason="stop",
            action=step.action, parse_status="ok", next_observation=step.next_observation))
        history = history + response
    return episode


def policy_sft_examples(episode: Episode, pack: bool = True) -> list[Example]:
    """The expert's answers (+ stop token) after the conversation so far: one example per step,
    or with `pack` one example holding every step (`rl.data.pack_turns`: same loss, O(T) tokens)."""
    return episode_examples(episode, [1.0] * len(episode.steps), pack_turns=pack)


@dataclasses.dataclass(frozen=True)
class LabelledStep:
    """A step for the reward model to judge: the expert's steps so far, then the judged one, and its label."""
    steps: tuple[ExpertStep, ...]
    label: int


def labelled_steps(task: Task, expert_steps: Sequence[ExpertStep], rng: np.random.Generator,
                   negatives_per_step: int = 1, env=None, plan: Sequence[str] | None = None,
                   labels: str = "walkthrough") -> list[LabelledStep]:
    """Each expert step and `negatives_per_step` other actions from its state (played in the real engine
    after replaying the expert's prefix). Without `plan` the expert's steps are labelled +1 and the
    others -1; with the walkthrough `plan`, every action gets the `step_label` of kind `labels`."""
    env = env or make_env(task.kind)
    out = []
    for t, step in enumerate(expert_steps):
        earlier = [s.action for s in expert_steps[:t]]
        others = [a for a in step.observation.admissible_actions if a != step.action]
        chosen = list(rng.choice(others, size=min(negatives_per_step, len(others)), replace=False)) if others else []
        for action in [step.action] + [str(a) for a in chosen]:
            label = ((1 if action == step.action else -1) if plan is None else
                     step_label(labels, plan, earlier, action, step.observation.admissible_actions))
            if action == step.action:
                next_observation = step.next_observation
            else:
                env.reset(task)
                for prior in expert_steps[:t]:
                    env.step(prior.action)
                next_observation = env.step(action).observation
            out.append(LabelledStep(tuple(expert_steps[:t]) + (ExpertStep(step.observation, action, next_observation),),
                                    label))
    return out


def judge_prompt(tokenizer, scenario, task: Task, labelled: LabelledStep) -> list[int]:
    """The reward model's prompt for the last step of `labelled`."""
    episode = expert_episode(task, labelled.steps, scenario)
    return tokenizer.encode_chat(scenario.judge_messages(task, episode, len(labelled.steps) - 1))


def reward_sft_examples(tokenizer, scenario, task: Task, expert_steps: Sequence[ExpertStep],
                        rng: np.random.Generator, negatives_per_step: int = 1, env=None,
                        plan: Sequence[str] | None = None, labels: str = "walkthrough") -> list[Example]:
    """Judge examples (prompt, the judgment of its label) for the `labelled_steps` of an expert game."""
    examples = []
    for labelled in labelled_steps(task, expert_steps, rng, negatives_per_step, env, plan, labels):
        response = tokenizer.encode(scenario.judgment_text(labelled.label)) + [end_of_turn_id(tokenizer)]
        examples.append(Example(judge_prompt(tokenizer, scenario, task, labelled), response, 1.0,
                                [float("nan")] * len(response)))
    return examples


def supervised_epochs(learner: Learner, state: TrainState, examples: Sequence[Example], epochs: int, seed: int,
                      prefix: str, log: Callable[[str], None] = print) -> tuple[TrainState, list[float]]:
    """`epochs` passes over `examples`; returns the state and each epoch's mean loss."""
    losses = []
    started = time.perf_counter()
    for epoch in range(epochs):
        metrics: Counter = Counter()
        state, epoch_metrics = train_phase(learner, state, examples, seed=seed + epoch, metrics=metrics,
                                           prefix=prefix)
        losses.append(epoch_metrics.get(f"{prefix}/entropy", float("nan")))  # = the targets' mean NLL
        log(f"warm start {prefix}: epoch {epoch + 1}/{epochs} token NLL {losses[-1]:.4f} "
            f"({time.perf_counter() - started:.0f} s)")
    return state, losses
