"""The environment protocol every task family implements, and the task record they share.

A `Task` is plain, picklable data (so worker processes can rebuild an environment
from it); an `Env` plays one multi-turn episode of one task at a time. Environments
are registered by `Task.kind` (a scenario's env module calls `register_env` when
imported) so that the vectorised runner (`agents/envs/runner.py`) and the rollout engine
never import a family directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Protocol


@dataclasses.dataclass(frozen=True)
class Task:
    task_id: str                  # unique and stable: the task pool and metrics key on it
    kind: str                     # the env registry key (`register_env`)
    goal: str                     # the instruction as the agent reads it
    payload: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False, compare=False)
    # family-specific, JSON-serialisable data: a game file path, problem and tests, knobs, ...
    # payload[TASK_GROUP], when present, names the benchmark's subset the task belongs to (a domain):
    # evaluation reports success per group.


TASK_GROUP = "group"


@dataclasses.dataclass(frozen=True)
class Observation:
    text: str
    admissible_actions: tuple[str, ...] = ()   # empty when the game has no fixed action list
    images: tuple[Any, ...] = ()               # screenshots for desktop tasks (numpy HWC uint8)


@dataclasses.dataclass(frozen=True)
class StepResult:
    observation: Observation
    done: bool
    won: bool                     # the task's outcome so far (O = +1 if won at the end, else -1)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)   # reported, never a reward
    # The outcome O itself where the task grades it (coding: the fraction of ground-truth tests passed);
    # None: O = +1 won / -1 lost, whatever score `info` reports (OSWorld's 0-1 evaluator score, game points).
    graded_outcome: float | None = None


class Env(Protocol):
    def reset(self, task: Task) -> Observation: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


EnvFactory = Callable[[], Env]
_REGISTRY: dict[str, EnvFactory] = {}


def register_env(kind: str, factory: EnvFactory) -> None:
    _REGISTRY[kind] = factory


def make_env(kind: str) -> Env:
    if kind not in _REGISTRY:
        raise KeyError(f"no environment registered for task kind {kind!r} (registered: {sorted(_REGISTRY)}); "
                       "import the module that registers it (a scenario's `env_module`)")
    return _REGISTRY[kind]()


class Submitted(Protocol):
    """A reset or step handed to a runner: `result()` waits for it and returns id -> result, in order."""

    def result(self) -> dict[int, Any]: ...


class Runner(Protocol):
    """Many episodes by id, as the rollout engine drives them (`envs.runner.EnvRunner` on worker processes,
    `InProcessRunner`, `envs.shared_runner.ProcessShardedRunner`). A result is a `StepResult` /
    `Observation`, or an error record with a `reason` that ends only that episode. `submit_step` returns at
    once where the runner can step while the caller decodes (`submit_reset` likewise); its episodes may
    not be submitted again before its `result()`. Episodes reset with the same `group` are stepped
    together: a runner with workers spreads them."""

    def reset(self, tasks: Mapping[int, Task], group: int = 0) -> dict[int, Any]: ...

    def step(self, actions: Mapping[int, str]) -> dict[int, Any]: ...

    def submit_reset(self, tasks: Mapping[int, Task], group: int = 0) -> Submitted: ...

    def submit_step(self, actions: Mapping[int, str]) -> Submitted: ...

    def close_episode(self, episode_id: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class Completed:
    """A request answered before it was handed back (a runner that steps in the caller's thread)."""

    results: dict[int, Any]

    def result(self) -> dict[int, Any]:
        return self.results


class InProcessRunner:
    """The runner interface (`envs.runner.EnvRunner`) in this process, one env per episode:
    for single episodes, debugging and tests. No timeouts and no crash isolation."""

    def __init__(self) -> None:
        self._envs: dict[int, Env] = {}

    def reset(self, tasks: dict[int, Task], group: int = 0) -> dict[int, Observation]:
        observations = {}
        for episode_id, task in tasks.items():
            self._envs[episode_id] = make_env(task.kind)
            observations[episode_id] = self._envs[episode_id].reset(task)
        return observations

    def step(self, actions: dict[int, str]) -> dict[int, StepResult]:
        return {episode_id: self._envs[episode_id].step(action) for episode_id, action in actions.items()}

    def submit_reset(self, tasks: dict[int, Task], group: int = 0) -> Completed:
        return Completed(self.reset(tasks, group))   # no workers: reset here, before the caller decodes on

    def submit_step(self, actions: dict[int, str]) -> Completed:
        return Completed(self.step(actions))

    def close_episode(self, episode_id: int) -> None:
        env = self._envs.pop(episode_id, None)
        if env is not None:
            env.close()

    def close(self) -> None:
        for episode_id in list(self._envs):
            self.close_episode(episode_id)
