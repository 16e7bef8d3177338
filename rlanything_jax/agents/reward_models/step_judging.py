"""The reward model judges every policy step m times (ALGORITHM.md 3.2-3.3): the role of the text games
and the desktops.

Its judgments enter the policy's integrated step reward (`agents.examples.policy_examples`); its
examples are the consistency rewards of its judgments on the tasks in the band
(`agents.examples.reward_model_examples`); its warm start is the expert's labelled steps with the
judgment of their label; its held-out measure is the fixed probe of expert-labelled steps
(`agents/reward_models/probe.py`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlanything_jax.agents import sft
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.examples import SignalConfig, reward_model_examples
from rlanything_jax.agents.judging import JudgeConfig, judge_episodes
from rlanything_jax.agents.prompt_tokens import text_only
from rlanything_jax.agents.reward_models import probe as probes
from rlanything_jax.agents.reward_models import register_role
from rlanything_jax.agents.reward_models.role import Judgments, RenderChat
from rlanything_jax.agents.scenario import StepJudgePrompts
from rlanything_jax.agents.trajectory import Episode, ExpertStep, JudgedEpisode
from rlanything_jax.core.counts import Counts
from rlanything_jax.core.rl.data import Example

JUDGE_STEPS = "judge_steps"


@dataclasses.dataclass(frozen=True)
class StepJudging:
    """The reward model judging steps, over the scenario's judge prompts."""

    prompts: StepJudgePrompts
    name: str = JUDGE_STEPS
    phase: str = "judge"
    held_out_judgments: int = 0   # held out, it is measured by its probe instead

    def judge(self, reward_model: Any, episodes: Sequence[Episode],
              config: JudgeConfig, seed: int) -> tuple[Judgments, Counts]:
        steps, counts = judge_episodes(reward_model, self.prompts, episodes, config, seed)
        return Judgments(steps=tuple(steps),
                         summary=f"{sum(len(e.steps) for e in episodes)} steps x {config.num_judgments}"), counts

    def policy_bonus(self, judgments: Judgments, signal: SignalConfig) -> Mapping[str, np.ndarray] | None:
        return None   # its judgments are in the integrated step reward itself

    def training_examples(self, judgments: Judgments, groups: Mapping[str, Sequence[JudgedEpisode]],
                          signal: SignalConfig) -> tuple[list[Example], Counts]:
        return reward_model_examples(groups, signal)

    def warm_start_examples(self, tokenizer: Any, task: Task, steps: Sequence[ExpertStep], expert: Any, env: Env,
                            rng: np.random.Generator, negatives_per_step: int,
                            image_inputs: Any = None) -> list[Example]:
        labelled = expert.labelled_steps(task, steps, env, rng, negatives_per_step)
        return sft.reward_sft_examples(tokenizer, self.prompts, task, labelled, image_inputs)

    def corpus_texts(self, render: RenderChat, task: Task, episode: Episode) -> list[str]:
        messages = text_only(self.prompts.judge_messages(task, episode, len(episode.steps) - 1))
        return [render(messages, True) + self.prompts.judgment_text(1) + self.prompts.judgment_text(-1)]

    def metrics(self, judgments: Judgments) -> dict[str, float]:
        return {}   # its per-step judgments are scored by `loop.episode_metrics`

    def probe(self, reward_model: Any, tasks: Sequence[Task], scenario: Any, env: Env, config: JudgeConfig,
              seed: int, negatives_per_step: int) -> Callable[[], dict[str, float]] | None:
        if scenario.expert is None:
            return None
        probe = probes.build_judge_probe(tasks, scenario, reward_model.tokenizer, env, seed, negatives_per_step,
                                         getattr(reward_model, "image_inputs", None))
        return functools.partial(probes.probe_accuracy, reward_model, self.prompts, probe, config, seed)


def _step_judging(prompts: StepJudgePrompts, cfg: Any = None) -> StepJudging:
    return StepJudging(prompts)


register_role(JUDGE_STEPS, _step_judging, StepJudgePrompts)
