"""What a rollout records (steps, episodes, parsed answers, expert steps), and its conversion to the
arrays the reward and advantage functions take."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rlanything_jax.envs.base import Observation, Task


@dataclasses.dataclass(frozen=True)
class ParsedAction:
    action: str
    status: str   # "ok" or the parser's fallback reason (counted in metrics)


@dataclasses.dataclass(frozen=True)
class ParsedJudgment:
    score: int      # -1, 0 or +1
    valid: bool     # False when the output had no usable score (score is then 0)
    status: str


@dataclasses.dataclass(frozen=True)
class ExpertStep:
    """One step of an expert's play: what it saw, did and saw next."""
    observation: Observation
    action: str
    next_observation: Observation


@dataclasses.dataclass(frozen=True)
class LabelledStep:
    """A step for the reward model to judge: the expert's steps so far, then the judged one, and its label."""
    steps: tuple[ExpertStep, ...]
    label: int


@dataclasses.dataclass
class StepRecord:
    observation: Observation     # what the agent saw before acting
    prompt_tokens: list[int]     # the whole conversation the policy conditioned on (its cache)
    response_tokens: list[int]   # sampled tokens, stop token included when one ended the turn
    logprobs: list[float]        # sampler log-probabilities of response_tokens (temperature 1)
    response_text: str
    finish_reason: str           # the sampler's: "stop", "stop_string", "length", ...
    action: str                  # what was sent to the environment
    parse_status: str            # the action parser's status ("ok" or a fallback)
    next_observation: Observation | None = None
    won_after: bool = False


@dataclasses.dataclass
class Episode:
    task: Task
    group_index: int             # which of the task's G rollouts this is
    steps: list[StepRecord] = dataclasses.field(default_factory=list)
    won: bool = False
    end_reason: str = "running"  # "won", "done", "max_steps", "context_full", "env_error"
    env_error: str | None = None  # the runner's reason; such episodes are never trained on
    judgments: np.ndarray | None = None  # int8 [num_steps, m]: the reward model's scores in {-1, 0, 1}
    judgment_valid: np.ndarray | None = None  # bool [num_steps, m]
    judge_texts: list[list[str]] | None = None
    judge_prompts: list[list[int]] | None = None      # per step: the reward model's prompt tokens
    judge_samples: list[list[tuple[list[int], list[float]]]] | None = None  # [step][j]: tokens, logprobs

    @property
    def outcome(self) -> float:
        """O in {+1, -1}."""
        return 1.0 if self.won else -1.0

    @property
    def trainable(self) -> bool:
        return self.env_error is None and bool(self.steps)


@dataclasses.dataclass(frozen=True)
class GroupArrays:
    """One task's G rollouts as padded arrays [G, T(, m)], ready for rewards and advantages."""

    outcome: np.ndarray        # float32 [G]
    judgments: np.ndarray      # float32 [G, T, m]
    valid: np.ndarray          # bool [G, T, m]
    step_mask: np.ndarray      # bool [G, T]: the rollout reached step t
    fallback: np.ndarray       # bool [G, T]: step t's action was not read as written (parse status not "ok")


def group_arrays(episodes: Sequence[Episode], num_judgments: int) -> GroupArrays:
    """Pads a task's trainable rollouts to the longest one. Unjudged steps count as invalid."""
    episodes = [e for e in episodes if e.trainable]
    steps = max((len(e.steps) for e in episodes), default=0)
    shape = (len(episodes), steps)
    judgments = np.zeros(shape + (num_judgments,), np.float32)
    valid = np.zeros(shape + (num_judgments,), bool)
    mask = np.zeros(shape, bool)
    fallback = np.zeros(shape, bool)
    for g, episode in enumerate(episodes):
        n = len(episode.steps)
        mask[g, :n] = True
        fallback[g, :n] = [step.parse_status != "ok" for step in episode.steps]
        if episode.judgments is not None:
            judgments[g, :n] = episode.judgments
            valid[g, :n] = episode.judgment_valid
    outcome = np.asarray([e.outcome for e in episodes], np.float32)
    return GroupArrays(outcome=outcome, judgments=judgments, valid=valid, step_mask=mask, fallback=fallback)


def group_by_task(episodes: Sequence[Episode]) -> dict[str, list[Episode]]:
    groups: dict[str, list[Episode]] = {}
    for episode in episodes:
        groups.setdefault(episode.task.task_id, []).append(episode)
    return groups


def task_accuracy(episodes: Sequence[Episode]) -> float | None:
    """Fraction of a task's trainable rollouts that won (None when none is trainable)."""
    played = [e for e in episodes if e.env_error is None]
    return sum(e.won for e in played) / len(played) if played else None
