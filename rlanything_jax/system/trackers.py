"""Where a run's scalar metrics go besides metrics.jsonl (`loop.trackers`, comma-separated):

- "tensorboard": event files in <workdir>/tensorboard (tensorboardX).
- "wandb": a Weights & Biases run (`pip install rlanything_jax[trackers]`). Its mode, project and entity
  come from W&B's own environment variables (WANDB_MODE=offline writes <workdir>/wandb/offline-run-*
  for a later `wandb sync`); the run's id is kept in <workdir>/wandb_run_id, so a resumed run continues it.
- "mlflow": an MLflow run (`pip install rlanything_jax[trackers]`) at MLFLOW_TRACKING_URI, by default a
  file store in <workdir>/mlruns; its id is kept in <workdir>/mlflow_run_id likewise.

Every tracker gets the same scalars of every step (`Tracker.log`), and the run's config once.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

TRACKERS = ("tensorboard", "wandb", "mlflow")
_EXTRA = "pip install 'rlanything_jax[trackers]'"


class Tracker(Protocol):
    def log(self, step: int, scalars: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def tracker_names(text: str) -> tuple[str, ...]:
    """The names in a `loop.trackers` value ("" or "none": none); raises ValueError on an unknown one."""
    names = tuple(name.strip() for name in str(text).split(",") if name.strip() and name.strip() != "none")
    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        raise ValueError(f"unknown tracker(s) {', '.join(unknown)}; trackers: {', '.join(TRACKERS)}")
    return names


def _run_id(workdir: Path, name: str, new) -> str:
    """The id stored in <workdir>/<name>, or a new one stored there."""
    path = workdir / name
    if path.is_file():
        return path.read_text().strip()
    run_id = new()
    path.write_text(run_id + "\n")
    return run_id


class TensorBoardTracker:
    def __init__(self, workdir: Path):
        from tensorboardX import SummaryWriter  # deferred: optional at import time

        self._writer = SummaryWriter(str(workdir / "tensorboard"))

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for key, value in scalars.items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbTracker:
    def __init__(self, workdir: Path, config: Mapping[str, Any], name: str):
        try:
            import wandb
        except ImportError:
            raise ImportError(f"loop.trackers names wandb, which is not installed: {_EXTRA}") from None
        run_id = _run_id(workdir, "wandb_run_id", lambda: uuid.uuid4().hex[:12])
        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rlanything_jax"), name=name, id=run_id,
                               resume="allow", dir=str(workdir), config=dict(config))

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self._run.log(dict(scalars), step=step)

    def close(self) -> None:
        self._run.finish()


_MLFLOW_KEY = re.compile(r"[^\w\-. /]")


class MlflowTracker:
    def __init__(self, workdir: Path, config: Mapping[str, Any], name: str):
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ImportError(f"loop.trackers names mlflow, which is not installed: {_EXTRA}") from None
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:   # the local file store, which MLflow 3 keeps behind a flag
            uri = (workdir / "mlruns").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = MlflowClient(tracking_uri=uri)

        def new_run() -> str:
            experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "rlanything_jax")
            found = self._client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
            run = self._client.create_run(experiment_id, run_name=name)
            params = [Param(key[:250], str(value)[:6000]) for key, value in _flat(config).items()]
            for start in range(0, len(params), 100):   # MLflow's batch limit for parameters
                self._client.log_batch(run.info.run_id, params=params[start:start + 100])
            return run.info.run_id

        self.run_id = _run_id(workdir, "mlflow_run_id", new_run)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(key), float(value), now, step) for key, value in scalars.items()]
        for start in range(0, len(metrics), 1000):   # MLflow's batch limit
            self._client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def mlflow_key(key: str) -> str:
    """A metric name MLflow accepts (letters, digits, _ - . / and spaces), e.g. "eval/success_rate" as is."""
    return _MLFLOW_KEY.sub("_", key)


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def make_trackers(names: tuple[str, ...], workdir: Path, config: Mapping[str, Any] | None = None,
                  name: str = "") -> list[Tracker]:
    config, name = config or {}, name or workdir.name
    made: list[Tracker] = []
    for tracker in names:
        if tracker == "tensorboard":
            made.append(TensorBoardTracker(workdir))
        elif tracker == "wandb":
            made.append(WandbTracker(workdir, config, name))
        elif tracker == "mlflow":
            made.append(MlflowTracker(workdir, config, name))
    return made
