"""The environments of a multi-process run: each process drives its share of the episodes, every process
sees every result.

`ProcessShardedRunner` has `EnvRunner`'s interface (reset / step, submitted or not / close_episode). The episodes of a
`reset` call are dealt round-robin over the processes; each process resets and steps only its own on its
local `EnvRunner`, and the results are gathered (`multihost.allgather_objects`) so that every process
returns all of them. The rollout engine above it then runs the same turn logic on every process and
makes the same sampler calls with the same shapes, as SPMD programs over a mesh of every process's
devices require. Every process must call reset and step with the same arguments, in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rlanything_jax.agents.envs.base import Task
from rlanything_jax.core import multihost


class _Gathered:
    def __init__(self, runner: ProcessShardedRunner, local: Any, order: tuple[int, ...]):
        self._runner, self._local, self._order = runner, local, order

    def result(self) -> dict[int, Any]:
        return self._runner._gather(self._local.result() if self._local is not None else {}, self._order)


class ProcessShardedRunner:
    def __init__(self, local: Any, process_index: int, process_count: int):
        self.local = local
        self.process_index, self.process_count = process_index, process_count
        self._owner: dict[int, int] = {}
        self._dealt = 0   # episodes dealt so far: the next one goes to process `_dealt % process_count`

    def _mine(self, episode_id: int) -> bool:
        return self._owner[episode_id] == self.process_index

    def _gather(self, results: dict[int, Any], order: Iterable[int]) -> dict[int, Any]:
        merged: dict[int, Any] = {}
        for part in multihost.allgather_objects(results):
            merged.update(part)
        return {episode_id: merged[episode_id] for episode_id in order}

    def reset(self, tasks: Mapping[int, Task], group: int = 0) -> dict[int, Any]:
        return self.submit_reset(tasks, group).result()

    def submit_reset(self, tasks: Mapping[int, Task], group: int = 0) -> _Gathered:
        for episode_id in tasks:
            self._owner[episode_id] = self._dealt % self.process_count
            self._dealt += 1
        mine = {episode_id: task for episode_id, task in tasks.items() if self._mine(episode_id)}
        return _Gathered(self, self.local.submit_reset(mine, group) if mine else None, tuple(tasks))

    def step(self, actions: Mapping[int, str]) -> dict[int, Any]:
        return self.submit_step(actions).result()

    def submit_step(self, actions: Mapping[int, str]) -> _Gathered:
        """Submits this process's share; `result()` waits for it and gathers every process's (a collective:
        every process collects its submissions in the same order)."""
        for episode_id in actions:
            if episode_id not in self._owner:
                raise KeyError(f"episode {episode_id} is not live (never reset or closed)")
        mine = {episode_id: action for episode_id, action in actions.items() if self._mine(episode_id)}
        return _Gathered(self, self.local.submit_step(mine) if mine else None, tuple(actions))

    def close_episode(self, episode_id: int) -> None:
        if self._owner.pop(episode_id, None) == self.process_index:
            self.local.close_episode(episode_id)

    @property
    def metrics(self) -> dict[str, float]:
        return self.local.metrics

    def close(self) -> None:
        self.local.close()
