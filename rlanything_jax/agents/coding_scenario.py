"""The coding scenario: one turn, the policy writes a program; the environment runs the tests."""

from __future__ import annotations

import dataclasses

from rlanything_jax.agents.coding_parsers import parse_code_block
from rlanything_jax.agents.coding_prompts import coding_policy_messages
from rlanything_jax.agents.rollout import Message, ParsedAction
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.envs.base import Observation, Task


@dataclasses.dataclass(frozen=True)
class CodingScenario:
    name: str = "coding"
    for_eval: bool = False

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        return coding_policy_messages(observation.text, for_eval=self.for_eval)

    def turn_message(self, episode: Episode, observation: Observation) -> Message:
        raise RuntimeError("coding episodes end after one turn")

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction:
        extraction = parse_code_block(response_text)
        return ParsedAction(action=extraction.code or "", status=extraction.status)
