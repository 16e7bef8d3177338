"""Harder and easier desktop tasks (ALGORITHM.md 4.3 "OSWorld").

- `KnobGenerator` (no model): the bundled tasks' difficulty knob `n` one notch up or down from the
  slot's active task (`task_families.rewrite`), so accepted rewrites keep moving.
- `EvaluatorRewriteGenerator`: the frozen environment model sees the task's `current_task` and
  `task_template` and the goal, and answers one `{"evaluatorK": "instruction"}`: another evaluator
  key of the template, or the same key with hints added or removed. The first of `num_samples`
  answers that parses to exactly one key of the template wins; otherwise no candidate (the slot keeps
  its task, as the reference falls back to the old one). A task without variants (the bundled ones)
  offers its own instruction as the template's only key, so the model can still rewrite hints.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rlanything_jax.agents.curriculum.generators import (
    Ask,
    EnvironmentModel,
    Proposal,
    Proposes,
    annotate,
    check_direction,
    finished,
)
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.trajectory import JudgedEpisode
from rlanything_jax.core.counts import Counts
from rlanything_jax.scenarios.osworld.task_families import rewrite

MAX_INSTRUCTION_CHARS = 1000   # "The instruction can NOT be too long"
DEFAULT_KEY = "evaluator1"

_PROMPT = """You will help me adjust the difficulty of an OSWorld/desktop task.

You are given:
(1) current_task (JSON)
(2) task_template: a JSON object mapping evaluator_name -> a canonical instruction for that evaluator.
(3) previous_rollout_trajectory_summaries: OPTIONAL historical error analyses from earlier rollouts.
    - A task may have multiple trajectories (runs).
    - Each trajectory_summary is already deduplicated across steps (no repeated same error across steps).

Goal: make the task {goal}.

Rules:
- You MAY switch to a different evaluator from task_template (by changing the key), OR keep the same evaluator.
- You MAY rewrite the instruction to increase/decrease hint strength (add hints to make easier, remove hints to \
make harder).
- The instruction can NOT be too long.
- You MUST NOT change the essential task meaning compared to the chosen evaluator's template. Do NOT invent a new task.
- Do NOT invent new evaluator names. The output key must be one of the keys in task_template.
- You SHOULD use previous_rollout_trajectory_summaries to guide how you adjust difficulty:
  - If goal is EASIER: add minimal, targeted clarifying hints addressing recurring failure modes.
  - If goal is HARDER: remove such hints, but still keep the same essential task and stay within the chosen \
evaluator template.
- Output MUST be valid JSON ONLY (no markdown, no extra text).
- Output format MUST be the new current_task JSON object with EXACTLY ONE key:
  {{"evaluatorX": "your rewritten instruction"}}
- If you accidentally output other text, ensure the FINAL output segment is the JSON object.

current_task:
{current_task}

task_template:
{task_template}

previous_rollout_trajectory_summaries:
{summaries}
"""


def with_variants(data: dict[str, Any]) -> dict[str, Any]:
    """The task JSON with RLAnything's variant fields (a plain task gets its instruction as the only key)."""
    if isinstance(data.get("evaluator_list"), dict) and data["evaluator_list"]:
        out = copy.deepcopy(data)
        out.setdefault("task_template", {k: data.get("instruction", "") for k in data["evaluator_list"]})
        out.setdefault("current_task", {next(iter(data["evaluator_list"])): data.get("instruction", "")})
        return out
    out = copy.deepcopy(data)
    out.update(task_template={DEFAULT_KEY: data["instruction"]}, evaluator_list={DEFAULT_KEY: data["evaluator"]},
               current_task={DEFAULT_KEY: data["instruction"]})
    return out


def rewrite_prompt(data: dict[str, Any], direction: str) -> list[dict[str, str]]:
    data = with_variants(data)
    body = _PROMPT.format(goal=direction.upper(),
                          current_task=json.dumps(data["current_task"], ensure_ascii=False, indent=2),
                          task_template=json.dumps(data["task_template"], ensure_ascii=False, indent=2),
                          summaries=json.dumps([], indent=2))   # the reference never fills them (ALGORITHM.md 4.1)
    return [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": body}]


def last_json_object(text: str) -> dict | None:
    """The last `{...}` of `text` that parses (JSON or a Python literal), scanning balanced braces from the end."""
    end = text.rfind("}")
    while end >= 0:
        depth = 0
        for start in range(end, -1, -1):
            depth += {"}": 1, "{": -1}.get(text[start], 0)
            if depth == 0:
                candidate = text[start:end + 1]
                for load in (json.loads, ast.literal_eval):
                    try:
                        value = load(candidate)
                    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
                        continue
                    if isinstance(value, dict):
                        return value
                break
        end = text.rfind("}", 0, end)
    return None


def parse_rewrite(text: str | None, template: dict[str, str]) -> tuple[tuple[str, str] | None, str]:
    """(key, instruction) from the model's answer, or (None, why)."""
    if not text:
        return None, "empty"
    value = last_json_object(text[-20000:])   # the answer ends the output; a bounded scan
    if value is None:
        return None, "no_json"
    if isinstance(value.get("current_task"), dict):
        value = value["current_task"]
    if len(value) != 1:
        return None, "not_one_key"
    key, instruction = next(iter(value.items()))
    if not isinstance(key, str) or key not in template:
        return None, "unknown_key"
    if not isinstance(instruction, str) or not instruction.strip():
        return None, "empty_instruction"
    if len(instruction) > MAX_INSTRUCTION_CHARS:
        return None, "too_long"
    return (key, instruction.strip()), "ok"


def rewritten_task(data: dict[str, Any], key: str, instruction: str) -> dict[str, Any]:
    out = with_variants(data)
    out["current_task"] = {key: instruction}
    return out


def candidate_id(data: dict[str, Any], key: str, instruction: str) -> str:
    digest = hashlib.sha1(f"{key}\n{instruction}".encode()).hexdigest()[:10]
    return f"{data['id']}~{key}~{digest}"


class KnobGenerator:
    def __init__(self, make_task):
        self.make_task = make_task   # (task JSON, pool id or None) -> Task

    def proposal(self, raw: Task, active: Task, direction: str, accuracy: float,
                 episodes: Sequence[JudgedEpisode], step: int) -> Proposal:
        return finished(*self.propose(raw, active, direction, accuracy, episodes, step))

    def propose(self, raw: Task, active: Task, direction: str, accuracy: float,
                episodes: Sequence[JudgedEpisode], step: int) -> tuple[Task | None, Counts]:
        del accuracy, episodes
        check_direction(direction)
        moved = rewrite(active.payload["source"], 1 if direction == "harder" else -1)
        if moved is None:
            return None, {"osworld/knobs/at_limit": 1}
        task = self.make_task(moved, None)
        if task.task_id in (raw.task_id, active.task_id):
            return None, {"osworld/knobs/unchanged": 1}
        return annotate(task, raw, "procedural", direction, step), {"osworld/knobs/proposed": 1}


class EvaluatorRewriteGenerator(Proposes):
    def __init__(self, model: EnvironmentModel, make_task, num_samples: int = 3, max_new_tokens: int = 8096):
        self.model = model
        self.make_task = make_task
        self.num_samples = num_samples
        self.max_new_tokens = max_new_tokens

    def proposal(self, raw: Task, active: Task, direction: str, accuracy: float,
                 episodes: Sequence[JudgedEpisode], step: int) -> Proposal:
        del accuracy, episodes
        check_direction(direction)
        data = with_variants(active.payload["source"])
        texts = yield Ask(self.model, (rewrite_prompt(data, direction),) * self.num_samples, self.max_new_tokens,
                          self.model.sampling_seed(raw, step, "osworld"), "osworld/rewrite")
        metrics: Counter = Counter()
        for text in texts:
            parsed, status = parse_rewrite(text, data["task_template"])
            metrics[f"osworld/rewrite/{status}"] += 1
            if parsed is None:
                continue
            key, instruction = parsed
            if data["current_task"].get(key) == instruction:
                metrics["osworld/rewrite/unchanged"] += 1
                continue
            task = self.make_task(rewritten_task(data, key, instruction), candidate_id(data, key, instruction))
            return annotate(task, raw, "env_model", direction, step), metrics
        metrics["osworld/rewrite/fallback_old_task"] += 1
        return None, metrics
