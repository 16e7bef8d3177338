"""One orbax checkpoint of the whole system, with asynchronous saves and a safe restore.

A checkpoint holds array pytrees (the policy's and reward model's TrainStates, RNG
keys, ...) and JSON state (the data iterators, the task pool, curriculum statistics
...), saved together under one step. Modules with host-side state register an
object with `state_dict() -> dict` and `load_state_dict(dict)`; their JSON goes into
every save and comes back on restore.

Orbax writes each step to a temporary directory and renames it when complete, so an
interrupted save never appears as a step. A step that is present but unreadable
(truncated or corrupted files) is skipped with a warning, and the previous one is used.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Protocol

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)

ARRAYS = "arrays"
JSON = "json"


class JsonStateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclasses.dataclass
class Restored:
    step: int
    arrays: dict[str, Any]
    json: dict[str, Any]


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs carrying each array's sharding: the restore target for `tree`."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
                        tree)


class SystemCheckpointer:
    """Saves every `save_every` steps into `directory`, keeping the last `max_to_keep`."""

    def __init__(self, directory: str | Path, max_to_keep: int = 3, async_save: bool = True):
        self.directory = Path(directory).resolve()
        self._modules: dict[str, JsonStateful] = {}
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=async_save,
                                               create=True)
        self._manager = ocp.CheckpointManager(self.directory, options=options)
        self.blocking_save_s: list[float] = []

    def register(self, name: str, module: JsonStateful) -> None:
        """Adds a module's JSON state to every save; restore hands it back through load_state_dict."""
        if name in self._modules:
            raise ValueError(f"a module named {name!r} is already registered")
        self._modules[name] = module

    def save(self, step: int, arrays: dict[str, Any], json_state: dict[str, Any] | None = None) -> None:
        """Starts saving (returns before the write ends when async); waits for any earlier save first."""
        started = time.perf_counter()
        json_state = dict(json_state or {})
        for name, module in self._modules.items():
            json_state[name] = module.state_dict()
        self._manager.save(step, args=ocp.args.Composite(**{
            ARRAYS: ocp.args.StandardSave(arrays), JSON: ocp.args.JsonSave(json_state)}), force=True)
        self.blocking_save_s.append(time.perf_counter() - started)   # what the run waited, not the async write

    def wait(self) -> None:
        self._manager.wait_until_finished()

    def steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def restore_latest(self, abstract_arrays: dict[str, Any], step: int | None = None) -> Restored | None:
        """The newest readable checkpoint (None when there is none), or the one of `step`, restored onto the
        shardings in `abstract_arrays` (see `abstract_like`). Registered modules get their JSON back."""
        self.wait()
        steps = self.steps()
        if step is not None and step not in steps:
            raise FileNotFoundError(f"no checkpoint of step {step} in {self.directory}; it has steps {steps}")
        for candidate in reversed(steps) if step is None else [step]:
            try:
                restored = self._manager.restore(candidate, args=ocp.args.Composite(**{
                    ARRAYS: ocp.args.StandardRestore(abstract_arrays), JSON: ocp.args.JsonRestore()}))
            except Exception as error:  # noqa: BLE001 - any unreadable step falls back to an older one
                log.warning("checkpoint step %d in %s is unreadable (%s: %s); trying an older one",
                            candidate, self.directory, type(error).__name__, str(error)[:200])
                continue
            json_state = dict(restored[JSON])
            for name, module in self._modules.items():
                if name in json_state:
                    module.load_state_dict(json_state[name])
            return Restored(step=candidate, arrays=restored[ARRAYS], json=json_state)
        return None

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()
