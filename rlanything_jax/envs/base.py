"""The environment protocol every task family implements, and the task record they share.

A `Task` is plain, picklable data (so worker processes can rebuild an environment
from it); an `Env` plays one multi-turn episode of one task at a time. Environments
are registered by `Task.kind` (a scenario's env module calls `register_env` when
imported) so that the vectorised runner (`envs/runner.py`) and the rollout engine
never import a family directly.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol


@dataclasses.dataclass(frozen=True)
class Task:
    task_id: str                  # unique and stable: the task pool and metrics key on it
    kind: str                     # the env registry key (`register_env`)
    goal: str                     # the instruction as the agent reads it
    payload: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False, compare=False)
    # family-specific, JSON-serialisable data: a game file path, problem and tests, knobs, ...


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
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


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


class InProcessRunner:
    """The runner interface (`envs.runner.EnvRunner`) in this process, one env per episode:
    for single episodes, debugging and tests. No timeouts and no crash isolation."""

    def __init__(self) -> None:
        self._envs: dict[int, Env] = {}

    def reset(self, tasks: dict[int, Task]) -> dict[int, Observation]:
        observations = {}
        for episode_id, task in tasks.items():
            self._envs[episode_id] = make_env(task.kind)
            observations[episode_id] = self._envs[episode_id].reset(task)
        return observations

    def step(self, actions: dict[int, str]) -> dict[int, StepResult]:
        return {episode_id: self._envs[episode_id].step(action) for episode_id, action in actions.items()}

    def close_episode(self, episode_id: int) -> None:
        env = self._envs.pop(episode_id, None)
        if env is not None:
            env.close()

    def close(self) -> None:
        for episode_id in list(self._envs):
            self.close_episode(episode_id)
