"""The text-game expert: walkthrough or searching demonstrations, and the labels it gives a step.

Two experts judge a step (`warm_start`'s `step_labels` option, ALGORITHM.md 3.1's rubric
made concrete):
- "walkthrough" (`progress_label`): knows where everything is; only the walkthrough's next
  step not yet done is good, so every search step is wrong;
- "search" (`search_label`): knows only what the agent has seen; until the object is found,
  going to a receptacle not visited yet and opening the one it stands at are good, then the
  walkthrough's next step (or going back to where it happens) is.
Demonstrations (`demonstrations` option) are the walkthrough, or a searching expert's play:
it visits a random number of other receptacles before the walkthrough.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rlanything_jax.agents import demonstrations
from rlanything_jax.agents.envs.base import Env, Task
from rlanything_jax.agents.trajectory import Episode, ExpertStep, LabelledStep

WALKTHROUGH, SEARCH = "walkthrough", "search"
EXPERT_KINDS = (WALKTHROUGH, SEARCH)
_GO = "go to "


def play_searching_expert(task: Task, plan: Sequence[str], rng: np.random.Generator, env: Env) -> list[ExpertStep]:
    """An expert that does not know where the object is: it visits other receptacles in a random order
    (opening the closed ones to look inside) and, once the plan's first receptacle comes up, plays the
    plan. The number of wrong visits is uniform over 0..all, as in a blind search, so the demonstrations
    show what to do when a guess was wrong (the walkthrough alone goes straight to the object)."""
    if not plan or not plan[0].startswith(_GO):
        return demonstrations.play_expert(task, plan, env)
    wrong = [a for a in env.reset(task).admissible_actions if a.startswith(_GO) and a != plan[0]]
    wrong = [wrong[i] for i in rng.permutation(len(wrong))][:int(rng.integers(0, len(wrong) + 1))]
    opens = ["open " + go[len(_GO):] for go in wrong]   # looking inside the closed ones
    detour = [action for pair in zip(wrong, opens) for action in pair]
    return demonstrations.play_expert(task, detour + list(plan), env, optional=set(opens))


def progress_label(plan: Sequence[str], earlier_actions: Sequence[str], action: str) -> int:
    """The expert's judgment of a step: +1 when the action is the next walkthrough step not yet done
    (the earlier actions are matched against the walkthrough in order), -1 otherwise. Going to the
    goal receptacle before holding the object is then a wrong visit, and going there later is progress."""
    done = _walkthrough_done(plan, earlier_actions)
    return 1 if done < len(plan) and action == plan[done] else -1


def _walkthrough_done(plan: Sequence[str], earlier_actions: Sequence[str]) -> int:
    """How many walkthrough steps the earlier actions have done, matched in order. A walkthrough step that
    opens a receptacle the agent has already opened (and not closed) is done already: a searching agent
    that looked inside it earlier need not, and cannot, open it again."""
    done, opened = 0, set()

    def skip_opened(done: int) -> int:
        while done < len(plan) and plan[done].startswith("open ") and plan[done][len("open "):] in opened:
            done += 1
        return done

    for earlier in earlier_actions:
        done = skip_opened(done)
        if done < len(plan) and earlier == plan[done]:
            done += 1
        if earlier.startswith("open "):
            opened.add(earlier[len("open "):])
        elif earlier.startswith("close "):
            opened.discard(earlier[len("close "):])
    return skip_opened(done)


_PLACE = (_GO, "open ", "close ")


def _place_of(action: str) -> str | None:
    """Where an action happens: the receptacle it goes to, opens, takes from, puts in/on or uses."""
    for prefix in _PLACE:
        if action.startswith(prefix):
            return action[len(prefix):]
    for word in (" from ", " to ", " in ", " on ", " with "):
        if word in action:
            return action.rsplit(word, 1)[1]
    return None


def search_label(plan: Sequence[str], earlier_actions: Sequence[str], action: str,
                 admissible: Sequence[str] = ()) -> int:
    """The judgment of an expert who knows only what the agent has seen (`progress_label`'s expert also
    knows where the object is hidden, so it calls every search step wrong).

    Until the agent has reached the receptacle of the walkthrough's first step (and opened it, where the
    walkthrough does), it is searching: going to a receptacle not visited yet is +1, and so is opening
    the one it stands at; while that one is closed and unopened (`admissible` lists "open" for it),
    opening it is the only good step. Once the object is found, the walkthrough's next step is +1, as
    is going back to where that step happens; the rest is -1."""
    if not plan or not plan[0].startswith(_GO):
        return progress_label(plan, earlier_actions, action)
    goes = [a[len(_GO):] for a in earlier_actions if a.startswith(_GO)]
    at = goes[-1] if goes else None
    reach = 2 if len(plan) > 1 and plan[1] == "open " + plan[0][len(_GO):] else 1
    done = _walkthrough_done(plan, earlier_actions)
    if done < reach:
        look_inside = f"open {at}"
        if at is not None and look_inside in admissible and look_inside not in earlier_actions:
            return 1 if action == look_inside else -1
        if action.startswith(_GO):
            return 1 if action[len(_GO):] not in goes else -1
        return 1 if action == look_inside and action not in earlier_actions else -1
    if done >= len(plan):
        return -1
    if action == plan[done]:
        return 1
    place = _place_of(plan[done])
    returns = not plan[done].startswith(_GO) and place is not None and place != at
    return 1 if returns and action == f"{_GO}{place}" else -1


def step_label(kind: str, plan: Sequence[str], earlier_actions: Sequence[str], action: str,
               admissible: Sequence[str] = ()) -> int:
    """The expert's label of a step: "walkthrough" (`progress_label`) or "search" (`search_label`)."""
    if kind == SEARCH:
        return search_label(plan, earlier_actions, action, admissible)
    return progress_label(plan, earlier_actions, action)


class TextGameExpert:
    """The scenario's `Expert`: walkthroughs from `walkthrough(task)` (cached per task id)."""

    def __init__(self, walkthrough: Callable[[Task], list[str]], demonstrations: str = WALKTHROUGH,
                 step_labels: str = WALKTHROUGH):
        self._walkthrough = walkthrough
        self.demonstrations = demonstrations
        self.step_labels = step_labels
        self._plans: dict[str, tuple[str, ...]] = {}

    def plan(self, task: Task) -> list[str]:
        if task.task_id not in self._plans:
            self._plans[task.task_id] = tuple(self._walkthrough(task))
        return list(self._plans[task.task_id])

    def demonstration(self, task: Task, env: Env, rng: np.random.Generator) -> list[ExpertStep]:
        if self.demonstrations == SEARCH:
            return play_searching_expert(task, self.plan(task), rng, env)
        return demonstrations.play_expert(task, self.plan(task), env)

    def labelled_steps(self, task: Task, steps: Sequence[ExpertStep], env: Env, rng: np.random.Generator,
                       negatives_per_step: int) -> list[LabelledStep]:
        plan = self.plan(task)

        def label(earlier: Sequence[str], action: str, admissible: Sequence[str]) -> int:
            return step_label(self.step_labels, plan, earlier, action, admissible)

        return demonstrations.labelled_steps(task, steps, rng, negatives_per_step, env, label)

    def step_label(self, episode: Episode, step_index: int) -> int | None:
        step = episode.steps[step_index]
        return step_label(self.step_labels, self.plan(episode.task), [s.action for s in episode.steps[:step_index]],
                          step.action, step.observation.admissible_actions)
