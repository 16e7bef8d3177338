"""The reward model's role: how a run uses its reward model, declared once and plugged in by name.

A role judges a step's episodes (`judge` -> `Judgments`), may add a per-rollout bonus to the
policy's reward, turns its judgments into the reward model's training examples, gives the
warm start its examples and a scratch tokenizer its text, and reports its figures. The loop,
the run, the warm start and the assembly reach a role only through this protocol; the
built-in roles (judging every step, writing unit tests) and any other register themselves in
`rlanything_jax.agents.reward_models` under the name a scenario declares (`Scenario.reward_model_role`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rlanything_jax.agents.chat_tokens import Message
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.examples import SignalConfig
from rlanything_jax.agents.judging import JudgeConfig
from rlanything_jax.agents.trajectory import Episode, ExpertStep, JudgedEpisode, StepJudgments
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.rl.data import Example

# A chat rendered as the scratch tokenizer's text: (messages, add_generation_prompt) -> text.
RenderChat = Callable[[Sequence[Message], bool], str]


@dataclasses.dataclass(frozen=True, eq=False)   # eq=False: the records hold arrays
class Judgments:
    """A role's judging of one step's episodes: what it hands the rest of the step."""

    steps: tuple[StepJudgments | None, ...]   # per episode, in order: its steps' judgments (None: not per step)
    tasks: Mapping[str, Any] = dataclasses.field(default_factory=dict)   # task id -> the role's own record
    summary: str = ""                          # the step's log line for this phase

    @classmethod
    def none(cls, num_episodes: int) -> Judgments:
        """No judgment at all (the reward model is not used)."""
        return cls(steps=(None,) * num_episodes)

    def without(self, task_ids: Iterable[str]) -> Judgments:
        """These judgments less the per-task records of `task_ids` (rejected candidates are not trained on)."""
        dropped = set(task_ids)
        return dataclasses.replace(self, tasks={k: v for k, v in self.tasks.items() if k not in dropped})


class RewardModelRole(Protocol):
    """How the reward model takes part in a run (ALGORITHM.md 3.2-3.4)."""

    name: str                  # its registry name
    phase: str                 # the step's phase that runs it: in the log and in `time/<phase>_s`
    held_out_judgments: int    # judgments per held-out task at each evaluation (0: not judged there)

    def judge(self, reward_model: Any, episodes: Sequence[Episode],
              config: JudgeConfig, seed: int) -> tuple[Judgments, Counts]:
        """The reward model's (the sampler `reward_model`'s) judgments of a step's episodes, and the
        judging's counts (tokens, parse statuses, slots, `time/<phase>_*` seconds)."""

    def policy_bonus(self, judgments: Judgments, signal: SignalConfig) -> Mapping[str, np.ndarray] | None:
        """task id -> [G] added to each of the task's trainable rollouts' step rewards (None: no bonus)."""

    def training_examples(self, judgments: Judgments, groups: Mapping[str, Sequence[JudgedEpisode]],
                          signal: SignalConfig) -> tuple[list[Example], Counts]:
        """The reward model's RL examples from this step's judgments of the tasks in `groups`, and their
        counts (`reward_model_data/...`)."""

    def warm_start_examples(self, tokenizer: Any, task: Task, steps: Sequence[ExpertStep], expert: Any, env: Env,
                            rng: np.random.Generator, negatives_per_step: int,
                            image_inputs: Any = None) -> list[Example]:
        """The reward model's SFT examples from the expert's play `steps` of `task` (images encoded by
        `image_inputs`, the reward model's, where its prompts have images)."""

    def corpus_texts(self, render: RenderChat, task: Task, episode: Episode) -> list[str]:
        """What the reward model reads and writes about an expert episode (a scratch tokenizer's text)."""

    def metrics(self, judgments: Judgments) -> dict[str, float]:
        """The role's own figures of its judgments (`reward_model/...`; per-step judgments are scored by
        `loop.episode_metrics` whatever the role)."""

    def probe(self, reward_model: Any, tasks: Sequence[Task], scenario: Any, env: Env, config: JudgeConfig,
              seed: int, negatives_per_step: int) -> Callable[[], dict[str, float]] | None:
        """A fixed measure of the reward model on held-out `tasks`, taken after every step (None: none)."""


@dataclasses.dataclass(frozen=True)
class RewardModel:
    """The reward model as a step uses it: how (its role) and with what (its sampler)."""

    role: RewardModelRole
    sampler: Any = None   # sampling.Sampler, given the new weights after each step; None: a role without a model
