"""The walk scenario's environment: positions 0..distance, the goal at the end."""

from __future__ import annotations

from rlanything_jax.agents.envs.base import Observation, StepResult, Task, register_env

KIND = "walk"
ACTIONS = ("left", "right", "stay")


def walk_task(distance: int, task_id: str) -> Task:
    return Task(task_id=task_id, kind=KIND, goal=f"walk to {distance}", payload={"distance": distance, "seed": 0})


class WalkEnv:
    def __init__(self):
        self.position, self.distance = 0, 0

    def _observe(self) -> Observation:
        return Observation(f"at {self.position} of {self.distance}", admissible_actions=ACTIONS)

    def reset(self, task: Task) -> Observation:
        self.position, self.distance = 0, int(task.payload["distance"])
        return self._observe()

    def step(self, action: str) -> StepResult:
        self.position = max(0, self.position + {"left": -1, "right": 1}.get(action, 0))
        won = self.position >= self.distance
        return StepResult(self._observe(), done=won, won=won)

    def close(self) -> None:
        pass


register_env(KIND, WalkEnv)
