"""The bundled tasks' scripted experts as the scenario's `Expert` (warm start, step labels, probe).

A bundled task carries its expert in `rla_expert` (the `computer_use` calls an agent would write);
its plan is those calls as the desktop runs them (`actions.parse_computer_use`). A demonstration
plays the plan on a real desktop and is kept only when it wins (a flaky desktop must not teach a
failure). Labelled steps are each expert step (+1) and perturbed steps from the same state (-1):
a corrupted command, a stray key, giving up or finishing too early; each is played on a desktop
after replaying the expert's earlier steps, so the reward model sees its real next screenshot.
A played step is +1 when it is the plan's next action after the steps matched so far.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import numpy as np

from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.trajectory import Episode, ExpertStep, LabelledStep
from rlanything_jax.scenarios.osworld.actions import DONE, FAIL, WAIT, parse_computer_use
from rlanything_jax.scenarios.osworld.env import DesktopEnvSettings
from rlanything_jax.scenarios.osworld.episodes import tool_call_text


def expert_calls(task: Task) -> list[dict]:
    calls = (task.payload.get("source") or {}).get("rla_expert")
    return list(calls) if isinstance(calls, list) else []


def plan_commands(task: Task) -> list[str]:
    """The expert's calls as the commands the desktop env steps."""
    settings = DesktopEnvSettings.from_payload(task.payload.get("settings"))
    return [parse_computer_use(tool_call_text(call), settings.screen_width, settings.screen_height).text
            for call in expert_calls(task)]


def _typed_text(command: str) -> str | None:
    if not command.startswith("pyautogui.typewrite("):
        return None
    try:
        return str(ast.literal_eval(command[len("pyautogui.typewrite("):-1]))
    except (SyntaxError, ValueError):
        return None


def perturbations(command: str) -> list[str]:
    """Wrong steps from the state where the expert runs `command` (label -1)."""
    typed = _typed_text(command)
    if typed is not None:
        words = typed.rstrip("\n").split(" ")
        corrupted = " ".join(words[:-1]) if len(words) > 1 else "ls"   # the command without its last argument
        return [f"pyautogui.typewrite({corrupted + chr(10)!r})", DONE, "pyautogui.press('escape')"]
    if command == DONE:
        return [FAIL, WAIT]
    if command == FAIL:
        return [DONE, "pyautogui.typewrite('ls\\n')"]
    return [WAIT, FAIL]


def progress_label(plan: Sequence[str], earlier: Sequence[str], action: str) -> int:
    """+1 when `action` is the plan's next step after the earlier actions that matched it in order."""
    done = 0
    for previous in earlier:
        if done < len(plan) and previous == plan[done]:
            done += 1
    return 1 if done < len(plan) and action == plan[done] else -1


class DesktopExpert:
    def plan(self, task: Task) -> list[str]:
        return plan_commands(task)

    def demonstration(self, task: Task, env: Env, rng: np.random.Generator) -> list[ExpertStep]:
        del rng  # the script is fixed
        plan = self.plan(task)
        if not plan:
            return []
        observation = env.reset(task)
        steps, result = [], None
        for command in plan:
            result = env.step(command)
            steps.append(ExpertStep(observation, command, result.observation))
            observation = result.observation
            if result.done:
                break
        return steps if result is not None and result.won else []

    def labelled_steps(self, task: Task, steps: Sequence[ExpertStep], env: Env, rng: np.random.Generator,
                       negatives_per_step: int) -> list[LabelledStep]:
        out = []
        for t, step in enumerate(steps):
            out.append(LabelledStep(tuple(steps[:t + 1]), 1))
            wrong = perturbations(step.action)
            chosen = rng.choice(len(wrong), size=min(negatives_per_step, len(wrong)), replace=False)
            for index in sorted(int(i) for i in chosen):
                env.reset(task)
                for prior in steps[:t]:
                    env.step(prior.action)
                after = env.step(wrong[index]).observation
                out.append(LabelledStep(tuple(steps[:t]) + (ExpertStep(step.observation, wrong[index], after),), -1))
        return out

    def step_label(self, episode: Episode, step_index: int) -> int | None:
        plan = self.plan(episode.task)
        if not plan:
            return None
        return progress_label(plan, [s.action for s in episode.steps[:step_index]],
                              episode.steps[step_index].action)
