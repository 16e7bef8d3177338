"""Playing one desktop episode from a list of `computer_use` tool calls (an expert's, or a model's
recorded ones): each call is written as the model writes it, parsed by `actions`, and stepped."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlanything_jax.agents.envs.base import Env, StepResult, Task
from rlanything_jax.scenarios.osworld.actions import DONE, parse_computer_use


def tool_call_text(arguments: dict[str, Any]) -> str:
    """One tool call as Qwen3-VL writes it."""
    return "<tool_call>\n" + json.dumps({"name": "computer_use", "arguments": arguments}) + "\n</tool_call>"


@dataclasses.dataclass
class EpisodeRecord:
    task_id: str
    steps: int = 0
    score: float = 0.0
    won: bool = False
    evaluation: str = ""
    screenshots: list[np.ndarray] = dataclasses.field(default_factory=list)
    actions: list[str] = dataclasses.field(default_factory=list)     # the code each step ran
    statuses: list[str] = dataclasses.field(default_factory=list)    # the parser's status of each call


def play_tool_calls(env: Env, task: Task, calls: Sequence[dict[str, Any]],
                    on_step: Callable[[int, StepResult], None] | None = None) -> EpisodeRecord:
    """Resets `env` to `task` and steps each call; ends with DONE when the calls run out first."""
    record = EpisodeRecord(task.task_id)
    record.screenshots.extend(env.reset(task).images)
    result = None
    for arguments in [*calls, None]:
        if arguments is None:
            action, status = DONE, "appended"
        else:
            parsed = parse_computer_use(tool_call_text(arguments) if isinstance(arguments, dict) else arguments)
            action, status = parsed.text, parsed.status
        record.actions.append(action)
        record.statuses.append(status)
        result = env.step(action)
        record.steps += 1
        record.screenshots.extend(result.observation.images)
        if on_step is not None:
            on_step(record.steps, result)
        if result.done:
            break
    record.won = result.won
    record.score = float(result.info.get("score", 0.0))
    record.evaluation = str(result.info.get("evaluation", ""))
    return record
