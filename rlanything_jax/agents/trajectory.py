"""What a rollout records (steps, episodes, parsed answers, expert steps), and its conversion to the
arrays the reward and advantage functions take."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rlanything_jax.agents.envs.base import Observation, Task


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


@dataclasses.dataclass(frozen=True)
class StepRecord:
    observation: Observation     # what the agent saw before acting
    prompt_tokens: tuple[int, ...]     # the whole conversation the policy conditioned on (its cache)
    response_tokens: tuple[int, ...]   # sampled tokens, stop token included when one ended the turn
    logprobs: tuple[float, ...]        # sampler log-probabilities of response_tokens (temperature 1)
    response_text: str
    finish_reason: str           # the sampler's: "stop", "stop_string", "length", ...
    action: str                  # what was sent to the environment
    parse_status: str            # the action parser's status ("ok" or a fallback)
    next_observation: Observation | None = None
    won_after: bool = False
    # The images of prompt_tokens, in order (a vision-language policy; `agents.prompt_tokens`).
    prompt_images: tuple = ()

    def __post_init__(self):
        for name in ("prompt_tokens", "response_tokens", "logprobs", "prompt_images"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclasses.dataclass(frozen=True)
class Episode:
    """One played rollout of a task: what the rollout stage hands on (never changed afterwards)."""

    task: Task
    group_index: int             # which of the task's G rollouts this is
    steps: tuple[StepRecord, ...] = ()
    won: bool = False
    end_reason: str = "running"  # "won", "done", "max_steps", "context_full", "env_error"
    env_error: str | None = None  # the runner's reason; such episodes are never trained on
    graded_outcome: float | None = None   # the environment's graded outcome (`StepResult.graded_outcome`)

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def outcome(self) -> float:
        """O: +1 won / -1 lost (ALGORITHM.md 2.1; OSWorld: won = evaluator score > 0), or the graded outcome
        of a task that grades it (coding: the fraction of ground-truth tests passed, 5.3)."""
        if self.graded_outcome is not None:
            return float(self.graded_outcome)
        return 1.0 if self.won else -1.0

    @property
    def trainable(self) -> bool:
        return self.env_error is None and bool(self.steps)


Sample = tuple[tuple[int, ...], tuple[float, ...]]   # a generation's tokens and sampler log-probabilities


@dataclasses.dataclass(frozen=True)
class StepJudgments:
    """The reward model's m judgments of every step of one episode: what the judging stage hands on."""

    scores: np.ndarray                          # int8 [num_steps, m]: -1, 0 or +1
    valid: np.ndarray                           # bool [num_steps, m]: the judgment parsed
    texts: tuple[tuple[str, ...], ...]          # [step][j]
    prompts: tuple[tuple[int, ...], ...]        # [step]: the reward model's prompt tokens
    samples: tuple[tuple[Sample, ...], ...]     # [step][j]: tokens and log-probabilities, for its training
    prompt_images: tuple[tuple, ...] = ()       # [step]: the images of the judge prompt (none: text only)


@dataclasses.dataclass(frozen=True)
class JudgedEpisode:
    """An episode with its step judgments (None when it was not judged)."""

    episode: Episode
    judgments: StepJudgments | None = None


@dataclasses.dataclass(frozen=True)
class GroupArrays:
    """One task's G rollouts as padded arrays [G, T(, m)], ready for rewards and advantages."""

    outcome: np.ndarray        # float32 [G]
    judgments: np.ndarray      # float32 [G, T, m]
    valid: np.ndarray          # bool [G, T, m]
    step_mask: np.ndarray      # bool [G, T]: the rollout reached step t
    fallback: np.ndarray       # bool [G, T]: step t's action was not read as written (parse status not "ok")


def group_arrays(judged: Sequence[JudgedEpisode], num_judgments: int) -> GroupArrays:
    """Pads a task's trainable rollouts to the longest one. Unjudged steps count as invalid."""
    judged = [j for j in judged if j.episode.trainable]
    steps = max((len(j.episode.steps) for j in judged), default=0)
    shape = (len(judged), steps)
    judgments = np.zeros(shape + (num_judgments,), np.float32)
    valid = np.zeros(shape + (num_judgments,), bool)
    mask = np.zeros(shape, bool)
    fallback = np.zeros(shape, bool)
    for g, item in enumerate(judged):
        n = len(item.episode.steps)
        mask[g, :n] = True
        fallback[g, :n] = [step.parse_status != "ok" for step in item.episode.steps]
        if item.judgments is not None:
            judgments[g, :n] = item.judgments.scores
            valid[g, :n] = item.judgments.valid
    outcome = np.asarray([j.episode.outcome for j in judged], np.float32)
    return GroupArrays(outcome=outcome, judgments=judgments, valid=valid, step_mask=mask, fallback=fallback)


def group_by_task(judged: Sequence[JudgedEpisode]) -> dict[str, list[JudgedEpisode]]:
    groups: dict[str, list[JudgedEpisode]] = {}
    for item in judged:
        groups.setdefault(item.episode.task.task_id, []).append(item)
    return groups


def task_accuracy(episodes: Sequence[Episode | JudgedEpisode]) -> float | None:
    """Fraction of a task's trainable rollouts that won (None when none is trainable): an episode that
    never took a step (its first prompt did not fit) is not a played loss."""
    played = [e for e in (getattr(x, "episode", x) for x in episodes) if e.trainable]
    return sum(e.won for e in played) / len(played) if played else None
