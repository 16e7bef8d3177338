"""The reference's text-game prompts (ALFWorld, TextWorld): how the policy and the reward model see a game.

The policy plays a growing chat (one user message per observation, ending with the
numbered admissible commands) and answers with an index in \\boxed{}; the reward
model judges one step from the reference's full-history view of the step prompt,
the response and the next observation.
"""

from __future__ import annotations

import dataclasses

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.parsers import parse_judgment
from rlanything_jax.agents.trajectory import Episode, ParsedAction, ParsedJudgment
from rlanything_jax.envs.base import Observation, Task
from rlanything_jax.scenarios.text_games import prompts
from rlanything_jax.scenarios.text_games.parsers import parse_action_index


@dataclasses.dataclass(frozen=True)
class ReferencePrompts:
    name: str = "text_game"

    # ---------------------------------------------------------------- policy

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        del task  # the observation already states the goal ("Your task is to: ...")
        return prompts.PolicyDialogue.start(observation.text, observation.admissible_actions).messages

    def turn_message(self, episode: Episode, observation: Observation) -> Message:
        last_action = episode.steps[-1].action if episode.steps else None
        text = prompts.policy_next_user_text(observation.text, observation.admissible_actions, last_action)
        return {"role": "user", "content": text}

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
        steps = episode.steps[:step_index + 1]
        step = steps[-1]
        agent_prompt = prompts.policy_step_text([s.observation.text for s in steps], [s.action for s in steps[:-1]],
                                                step.observation.admissible_actions)
        next_text = step.next_observation.text if step.next_observation is not None else ""
        return prompts.judge_messages(agent_prompt, step.response_text, next_text)

    def judgment_text(self, label: int) -> str:
        return "\\boxed{%d}" % label

    def parse_judgment(self, text: str) -> ParsedJudgment:
        judgment = parse_judgment(text)
        return ParsedJudgment(score=int(judgment.score), valid=bool(judgment.valid), status=judgment.status)
