"""The reward model's prompt for one desktop step, as the reference builds it (ALGORITHM.md 3.2;
`qwen3vl_agent_local.py` with `max_reward_image_history_length=1`, texts from
`mm_agents/opencua/prompts.py`), and the parser of its judgment.

One user message, in order: "Previous Actions:" with the one-line summaries of every earlier step;
the screenshot before the step; the objective and the agent's full response; "Next observation
after executing this action:" with the screenshot after it; the rubric. The screenshots are
resized as the agent's are. The score is the last `\\boxed{...}`, which must be exactly 1, +1 or
-1; anything else is an invalid judgment (score 0), counted by status.
"""

from __future__ import annotations

import re
from typing import Any

from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.parsers import as_text
from rlanything_jax.agents.trajectory import Episode, ParsedJudgment
from rlanything_jax.scenarios.osworld.agent_prompts import ScreenshotResizer, action_summary

SYSTEM_PROMPT = ("You are an evaluator for the most recent step of a GUI agent.\n"
                 "You are provided with:\n"
                 "1) the interaction history between the agent and the environment,\n"
                 "2) the agent\u2019s objective, and\n"
                 "3) the agent\u2019s most recent step to evaluate.")
INSTRUCTION = ("\nYou are a strict evaluator to evaluate the most recent step of the agent in the following.\n\n"
               "Objective of Agent:\n{instruction}\n\n"
               "Agent's most recent step (reasoning + action):\n{response}\n\n")
# The reference appends this text unformatted, so the model reads the doubled backslash and braces.
RUBRIC = ("\nEvaluate ONLY the single most recent step using the information above.\n\n"
          "Use the next observation AFTER executing this step (i.e., the environment state after this action) to "
          "judge whether the action actually took effect.\n\n"
          "Assign a score of +1 if ALL of the following are true:\n"
          "- The step is clearly relevant to the stated objective;\n"
          "- The action is executable and coherent given the next observation;\n"
          "- The next observation shows concrete progress toward the objective, not just a no-op.\n\n"
          "Otherwise assign a score of -1, for example if the step is incorrect, irrelevant, impossible in context, "
          "has no visible effect,\n"
          "undoes progress, contradicts the next observation, or hallucinates tools/objects/facts.\n\n"
          "Think carefully, then provide your reasoning and put the final score in \\\\boxed{{}}.\n")
_BOXED = "\\boxed{"
_SCORE = re.compile(r"[+-]?1")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), or None."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len(_BOXED):i]
        i += 1
    return None


def parse_step_score(text: Any) -> ParsedJudgment:
    boxed = last_boxed(as_text(text))
    if boxed is None:
        return ParsedJudgment(0, False, "no_boxed")
    value = boxed.strip()
    if not _SCORE.fullmatch(value):
        return ParsedJudgment(0, False, "not_plus_minus_one")
    return ParsedJudgment(int(value), True, "ok")


class DesktopJudgePrompts:
    """The reward-model side of the scenario (`StepJudgePrompts`)."""

    name = "osworld"

    def __init__(self, resize: ScreenshotResizer):
        self.resize = resize

    def judge_messages(self, task: Task, episode: Episode, step_index: int) -> list[dict[str, Any]]:
        step = episode.steps[step_index]
        earlier = [f"Step {i + 1}: {action_summary(s.response_text)}" for i, s in enumerate(episode.steps[:step_index])]
        after = step.next_observation if step.next_observation is not None else step.observation
        content = [
            {"type": "text", "text": "Previous Actions:\n " + ("\n".join(earlier) if earlier else "None")},
            {"type": "text", "text": "Agent's current observation:\n"},
            {"type": "image", "image": self.resize(step.observation.images[0])},
            {"type": "text", "text": "\n" + INSTRUCTION.format(instruction=task.goal, response=step.response_text)},
            {"type": "text", "text": "\nNext observation after executing this action:\n"},
            {"type": "image", "image": self.resize(after.images[0])},
            {"type": "text", "text": RUBRIC},
        ]
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]

    def parse_judgment(self, text: str) -> ParsedJudgment:
        return parse_step_score(text)

    def judgment_text(self, label: int) -> str:
        verdict = "shows progress toward the objective" if label > 0 else "does not show progress"
        return f"The next observation {verdict}.\n\\boxed{{{1 if label > 0 else -1}}}"
