"""A fixed probe of the reward model: expert-labelled steps of held-out tasks, judged after each step.

`reward_model/step_accuracy` is measured on each step's own rollouts, so it moves with
the policy (a frozen reward model's accuracy moves too). The probe holds the steps
fixed: the scenario expert's demonstrations of some held-out tasks, plus other actions
from the same states, each labelled by the expert (`Expert.labelled_steps`). Its
accuracy is the share of the m judgments that equal the label (invalid ones count as
wrong), with a fixed sampling seed, so only the reward model changes between
measurements.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from rlanything_jax.agents import sft
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.judging import JudgeConfig, judge_prompts
from rlanything_jax.agents.scenario import Scenario
from rlanything_jax.core.seeds import derive_rng


@dataclasses.dataclass(frozen=True)
class JudgeProbe:
    prompts: tuple[tuple[int, ...], ...]
    labels: tuple[int, ...]
    images: tuple[tuple, ...] = ()   # [prompt]: its images (a vision-language reward model's probe)


def build_judge_probe(tasks: Sequence[Task], scenario: Scenario, tokenizer, env: Env, seed: int,
                      negatives_per_step: int = 1, image_inputs=None) -> JudgeProbe:
    """The probe's prompts and labels for `tasks` (deterministic in `seed`); `env` plays the expert's games."""
    rng = derive_rng(seed, "probe")
    prompts, probe_labels, probe_images = [], [], []
    for task in tasks:
        steps = scenario.expert.demonstration(task, env, rng)
        for labelled in scenario.expert.labelled_steps(task, steps, env, rng, negatives_per_step):
            tokens, images = sft.judge_prompt(tokenizer, scenario.prompts, task, labelled, image_inputs)
            prompts.append(tuple(tokens))   # whole, as the loop's judge prompts (agents.judging)
            probe_labels.append(labelled.label)
            probe_images.append(tuple(images))
    return JudgeProbe(tuple(prompts), tuple(probe_labels), tuple(probe_images) if any(probe_images) else ())


def probe_accuracy(reward_model, prompts, probe: JudgeProbe, config: JudgeConfig, seed: int) -> dict[str, float]:
    """The reward model's agreement with the probe's labels, overall and on the +1 and -1 labels apart."""
    if not probe.prompts:
        return {}
    started = time.perf_counter()
    judged, _ = judge_prompts(reward_model, prompts, probe.prompts, config, seed, probe.images or None)
    hits = np.array([np.mean([j.parsed.valid and j.parsed.score == label for j in judgments])
                     for judgments, label in zip(judged, probe.labels)])
    labels = np.array(probe.labels)
    out = {"reward_model/probe_step_accuracy": float(hits.mean()),
           "reward_model/probe_valid": float(np.mean([j.parsed.valid for js in judged for j in js])),
           "time/judge_probe_s": time.perf_counter() - started}
    for name, value in (("good", 1), ("bad", -1)):
        if (labels == value).any():
            out[f"reward_model/probe_accuracy_{name}"] = float(hits[labels == value].mean())
    return out
