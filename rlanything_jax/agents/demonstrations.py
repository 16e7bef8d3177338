"""Expert demonstrations as records: an expert's play of a task, and labelled steps for the reward model.

Scenario-free: the actions come from a scenario's `Expert`, the labels from its labeller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.trajectory import ExpertStep, LabelledStep


def play_expert(task: Task, actions: Sequence[str], env: Env, optional: Collection[str] = ()) -> list[ExpertStep]:
    """Plays `actions` in `env` from a reset; stops at the end of the game or of the plan. An action in
    `optional` is played only where the game lists it."""
    observation = env.reset(task)
    steps = []
    for action in actions:
        if action in optional and action not in observation.admissible_actions:
            continue
        result = env.step(action)
        steps.append(ExpertStep(observation, action, result.observation))
        observation = result.observation
        if result.done:
            break
    return steps


# label(earlier actions, action, admissible actions) -> +1 / -1: an expert's judgment of a step.
StepLabelFn = Callable[[Sequence[str], str, Sequence[str]], int]


def labelled_steps(task: Task, expert_steps: Sequence[ExpertStep], rng: np.random.Generator,
                   negatives_per_step: int, env: Env, label: StepLabelFn) -> list[LabelledStep]:
    """Each expert step and `negatives_per_step` other admissible actions from its state (played in the real
    engine after replaying the expert's prefix), each with the expert's `label`."""
    out = []
    for t, step in enumerate(expert_steps):
        earlier = [s.action for s in expert_steps[:t]]
        others = [a for a in step.observation.admissible_actions if a != step.action]
        chosen = list(rng.choice(others, size=min(negatives_per_step, len(others)), replace=False)) if others else []
        for action in [step.action] + [str(a) for a in chosen]:
            if action == step.action:
                next_observation = step.next_observation
            else:
                env.reset(task)
                for prior in expert_steps[:t]:
                    env.step(prior.action)
                next_observation = env.step(action).observation
            judged = ExpertStep(step.observation, action, next_observation)
            out.append(LabelledStep(tuple(expert_steps[:t]) + (judged,),
                                    label(earlier, action, step.observation.admissible_actions)))
    return out
