"""The reference's text-game prompts (ALFWorld, TextWorld): how the policy and the reward model see a game.

`ReferencePrompts` (`prompt_style="reference"`, every paper config): as in the reference, each turn's
prompt is built afresh from the task's observations so far, the actions taken on them and the current
numbered admissible commands, in one user message; earlier responses are not in it. The prompt grows by
about one observation and one action a turn (the expert's 8-step ALFWorld game: about 600 tokens at its
last turn), and a turn's prompt does not extend the last one (the candidates move to the end), so every
turn is prefilled afresh (`rollout/reprefills`).

`DialoguePrompts` (`prompt_style="dialogue"`): the same first prompt, then a growing chat, one user
message per observation and one assistant message per response, so each turn's prompt extends the last
prompt and response and the KV cache carries over (only the new message is prefilled). It keeps every
earlier response, so a long game fills its context after a few turns of long answers (163-token answers:
2357 prompt tokens at turn 7). No shipped config uses it: it is for runs with short answers, where
prefilling the whole trajectory every turn costs more than the decoding.

The policy answers with an index in \\boxed{}; the reward model judges one step from the reference's
full-history view of the step prompt, the response and the next observation (both styles).
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.parsers import parse_judgment
from rlanything_jax.agents.trajectory import Episode, ParsedAction, ParsedJudgment
from rlanything_jax.scenarios.text_games import prompts
from rlanything_jax.scenarios.text_games.parsers import parse_action_index


def step_text(episode: Episode, observation: Observation) -> str:
    """The reference's user text for the turn at `observation` after `episode`'s steps (the policy's
    prompt's user message, and what the judge reads as the agent's prompt): the whole trajectory
    (observations and the actions executed on them) and the numbered candidates."""
    observations = [s.observation.text for s in episode.steps] + [observation.text]
    return prompts.policy_step_text(observations, [s.action for s in episode.steps], observation.admissible_actions)


@dataclasses.dataclass(frozen=True)
class ReferencePrompts:
    name: str = "text_game"
    rebuilds_history = True   # each turn's prompt is built afresh (agents.prompt_tokens.next_prompt)

    # ---------------------------------------------------------------- policy

    def step_messages(self, task: Task, episode: Episode, observation: Observation) -> list[Message]:
        del task  # the first observation states the goal ("Your task is to: ...")
        observations = [s.observation.text for s in episode.steps] + [observation.text]
        return prompts.policy_messages_full_history(observations, [s.action for s in episode.steps],
                                                    observation.admissible_actions)

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        return self.step_messages(task, Episode(task=task, group_index=0), observation)

    def turn_message(self, episode: Episode, observation: Observation) -> Message:
        """The last message of the turn's prompt (the whole prompt is `step_messages`)."""
        return self.step_messages(episode.task, episode, observation)[-1]

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction:
        candidates = prompts.candidate_actions(observation.admissible_actions)
        choice = parse_action_index(response_text, len(candidates))
        return ParsedAction(action=candidates[choice.index], status=choice.status)

    def answer_text(self, observation: Observation, action: str) -> str:
        """What the policy should write to take `action` (the warm start's target): its index, boxed."""
        return "\\boxed{%d}" % prompts.candidate_actions(observation.admissible_actions).index(action)

    # ---------------------------------------------------------------- reward model

    def judge_messages(self, task: Task, episode: Episode, step_index: int) -> list[Message]:
        del task
        step = episode.steps[step_index]
        agent_prompt = step_text(dataclasses.replace(episode, steps=episode.steps[:step_index]), step.observation)
        next_text = step.next_observation.text if step.next_observation is not None else ""
        return prompts.judge_messages(agent_prompt, step.response_text, next_text)

    def judgment_text(self, label: int) -> str:
        return "\\boxed{%d}" % label

    def parse_judgment(self, text: str) -> ParsedJudgment:
        judgment = parse_judgment(text)
        return ParsedJudgment(score=int(judgment.score), valid=bool(judgment.valid), status=judgment.status)


@dataclasses.dataclass(frozen=True)
class DialoguePrompts(ReferencePrompts):
    """The reference's first prompt, then a growing chat whose turns extend each other (see the module)."""

    name: str = "text_game"
    rebuilds_history = False

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        del task
        return prompts.PolicyDialogue.start(observation.text, observation.admissible_actions).messages

    def turn_message(self, episode: Episode, observation: Observation) -> Message:
        last_action = episode.steps[-1].action if episode.steps else None
        text = prompts.policy_next_user_text(observation.text, observation.admissible_actions, last_action)
        return {"role": "user", "content": text}
