"""A compact text-game scenario for small models trained from scratch (`prompt_style="compact"`).

The reference's prompts (`reference.py`) suit instruct models: a guide, the
numbered admissible commands every turn, an index in `\\boxed{}`, and a judge that
reads the whole trajectory. A 1M-parameter model built by the run itself has no
use for the guide and pays for every token on a CPU, so here:
- the policy sees the game's own text only (no banner, no command list) and answers
  with a command; a command the game does not list maps to the closest listed one
  (counted as a fallback), so untrusted text never reaches the engine unchecked;
- the reward model sees the goal, the earlier commands, the judged command and its
  outcome, and answers `\\boxed{1}` or `\\boxed{-1}` (the reference's parser).
Each prompt is about a tenth of the reference's length.

`CompactChoicePrompts` (`prompt_style="compact_choice"`) keeps the game text but
numbers the useful commands under it (moving, opening, taking, placing, using: not
look / inventory / examine / help) and takes the answer's first number: a one-token
action, so a small model need not spell object names it has never seen, and each
decision's credit falls on one token.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Observation, Task
from rlanything_jax.agents.judging import step_context
from rlanything_jax.agents.parsers import parse_judgment
from rlanything_jax.agents.trajectory import Episode, ParsedAction, ParsedJudgment

_BANNER = re.compile(r"^\s*-=.*?=-\s*", re.S)
_GOAL = re.compile(r"Your task is to:\s*(.+?)\s*$", re.M)
_WORD = re.compile(r"[a-z0-9]+")
_NO_ACTION_FALLBACK = "look"


def game_text(observation: Observation) -> str:
    """The observation without the engine's welcome banner."""
    return _BANNER.sub("", observation.text, count=1).strip()


def goal_of(episode: Episode) -> str:
    """The goal sentence of the episode's first observation ("" when it has none)."""
    if not episode.steps:
        return ""
    match = _GOAL.search(episode.steps[0].observation.text)
    return match.group(1) if match else ""


def closest_action(text: str, admissible: Sequence[str]) -> ParsedAction:
    """The admissible command the response names, else the one sharing most words with it."""
    said = " ".join(_WORD.findall(text.lower()))
    if not admissible:
        return ParsedAction(_NO_ACTION_FALLBACK, "no_actions")
    for action in admissible:
        if " ".join(_WORD.findall(action.lower())) == said:
            return ParsedAction(action, "ok")
    if not said:
        return ParsedAction(admissible[0], "empty")
    words = set(said.split())
    best = max(admissible, key=lambda a: (len(words & set(_WORD.findall(a.lower()))), -len(a)))
    return ParsedAction(best, "closest")


@dataclasses.dataclass(frozen=True)
class CompactPrompts:
    name: str = "compact_game"

    # ---------------------------------------------------------------- policy

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        del task  # the first observation states the goal
        return [{"role": "user", "content": game_text(observation)}]

    def turn_message(self, episode: Episode, observation: Observation) -> Message:
        del episode
        return {"role": "user", "content": game_text(observation)}

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction:
        return closest_action(response_text, observation.admissible_actions)

    def answer_text(self, observation: Observation, action: str) -> str:
        """What the policy should write to take `action` (the warm start's target)."""
        del observation
        return action

    # ---------------------------------------------------------------- reward model

    def judge_messages(self, task: Task, episode: Episode, step_index: int) -> list[Message]:
        del task
        step, earlier = step_context(episode, step_index)
        outcome = game_text(step.next_observation) if step.next_observation is not None else ""
        lines = [f"goal: {goal_of(episode)}",
                 f"done: {'; '.join(s.action for s in earlier) or 'nothing'}",
                 f"now: {game_text(step.observation) if step_index else 'start'}",
                 f"action: {step.action}",
                 f"result: {outcome}",
                 "good?"]
        return [{"role": "user", "content": "\n".join(lines)}]

    def judgment_text(self, label: int) -> str:
        return "\\boxed{%d}" % label

    def parse_judgment(self, text: str) -> ParsedJudgment:
        judgment = parse_judgment(text)
        return ParsedJudgment(score=int(judgment.score), valid=bool(judgment.valid), status=judgment.status)


# Commands a compact choice list leaves out: they never change the game's state.
_UNLISTED = ("look", "inventory", "examine ", "help")
_NUMBER = re.compile(r"\d+")


def listed_commands(observation: Observation) -> list[str]:
    """The admissible commands a choice prompt numbers, in the game's order."""
    return [a for a in observation.admissible_actions if not a.startswith(_UNLISTED)]


@dataclasses.dataclass(frozen=True)
class CompactChoicePrompts(CompactPrompts):
    name: str = "compact_choice"

    def _game_with_choices(self, observation: Observation) -> str:
        choices = "\n".join(f"{i + 1} {a}" for i, a in enumerate(listed_commands(observation)))
        return f"{game_text(observation)}\n{choices}"

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        del task
        return [{"role": "user", "content": self._game_with_choices(observation)}]

    def turn_message(self, episode: Episode, observation: Observation) -> Message:
        del episode
        return {"role": "user", "content": self._game_with_choices(observation)}

    def parse_action(self, response_text: str, observation: Observation) -> ParsedAction:
        """The first number in the answer, 1-based into the listed commands; without a usable number,
        the closest listed command to the answer's words (counted as a fallback)."""
        listed = listed_commands(observation) or list(observation.admissible_actions)
        match = _NUMBER.search(response_text)
        if match is not None and len(match.group()) <= 3 and 1 <= int(match.group()) <= len(listed):
            return ParsedAction(listed[int(match.group()) - 1], "ok")
        fallback = closest_action(response_text, listed)
        status = "no_number" if match is None else "out_of_range"
        return ParsedAction(fallback.action, status if fallback.status != "no_actions" else "no_actions")

    def answer_text(self, observation: Observation, action: str) -> str:
        """The listed command's number; an unlisted command (look, examine, ...: judged steps of the
        reward model's warm start may take one) is written out, as the parser's fallback reads it."""
        listed = listed_commands(observation)
        return str(listed.index(action) + 1) if action in listed else action


NUMBERED_CHOICE_INSTRUCTION = "You play a text game. Reply with only the number of the command you take."
NUMBERED_JUDGE_INSTRUCTION = ("Judge the action of a text-game player. Reply \\boxed{1} if it brings the goal "
                              "closer, else \\boxed{-1}.")


@dataclasses.dataclass(frozen=True)
class NumberedChoicePrompts(CompactChoicePrompts):
    """`compact_choice` for pretrained instruct models (`prompt_style="numbered_choice"`): the same game text,
    numbered commands and one-number answers, with a one-line instruction at the start of the game and of
    each judgment (an instruct model told nothing writes a story instead of a number)."""

    name: str = "numbered_choice"

    def initial_messages(self, task: Task, observation: Observation) -> list[Message]:
        del task
        return [{"role": "user", "content": f"{NUMBERED_CHOICE_INSTRUCTION}\n\n{self._game_with_choices(observation)}"}]

    def judge_messages(self, task: Task, episode: Episode, step_index: int) -> list[Message]:
        message = super().judge_messages(task, episode, step_index)[0]
        return [{"role": "user", "content": f"{NUMBERED_JUDGE_INSTRUCTION}\n\n{message['content']}"}]
