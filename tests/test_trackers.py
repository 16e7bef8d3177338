"""`loop.trackers`: TensorBoard, Weights & Biases (offline files) and MLflow (a local file store) get the
same scalars of every step as metrics.jsonl, read back with each tool's own formats and client."""

import glob
import json
import struct
from pathlib import Path

import pytest

from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import load_config
from rlanything_jax.system.metrics import MetricsWriter, read_metrics
from rlanything_jax.system.trackers import mlflow_key, tracker_names

STEPS = {0: {"eval/success_rate": 0.5, "eval/episodes": 4, "reward_model/probe_step_accuracy": 0.75},
         1: {"rollout/success_rate": 0.25, "time/step_s": 3.5, "curriculum/accepted_total": 1, "note": "text"},
         2: {"rollout/success_rate": 0.375, "eval/success_rate": 0.625, "time/step_s": 2.25}}


def _write(workdir, trackers):
    writer = MetricsWriter(workdir, trackers, config={"loop": {"total_steps": 2}, "seed": 3})
    for step, metrics in STEPS.items():
        writer.write(step, metrics)
    writer.close()
    lines = read_metrics(workdir / "metrics.jsonl")
    return {line["step"]: {k: v for k, v in line.items() if k != "step" and isinstance(v, float)} for line in lines}


def _tfrecords(path):
    data, pos = open(path, "rb").read(), 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        yield data[pos + 12:pos + 12 + length]
        pos += 12 + length + 4


def _tensorboard(workdir):
    from tensorboardX.proto import event_pb2

    out = {}
    for path in glob.glob(str(workdir / "tensorboard" / "events.*")):
        for raw in _tfrecords(path):
            event = event_pb2.Event.FromString(raw)
            for value in event.summary.value:
                out.setdefault(event.step, {})[value.tag] = value.simple_value
    return out


def _wandb_records(path):
    """The records of a .wandb file (a leveldb-style log: 7-byte header, 32 KiB blocks of chunks)."""
    data, pos, block, pending = open(path, "rb").read(), 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield pending


def _wandb(workdir):
    from wandb.proto import wandb_internal_pb2

    out = {}
    [path] = glob.glob(str(workdir / "wandb" / "offline-run-*" / "run-*.wandb"))
    for raw in _wandb_records(path):
        record = wandb_internal_pb2.Record.FromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                     for item in record.history.item}
            out[items["_step"]] = {k: float(v) for k, v in items.items() if not k.startswith("_")}
    return out


def _mlflow(workdir):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(workdir / "mlruns").resolve().as_uri())
    run_id = (workdir / "mlflow_run_id").read_text().strip()
    run = client.get_run(run_id)
    assert run.data.params["loop.total_steps"] == "2" and run.info.status == "FINISHED"
    out = {}
    for key in run.data.metrics:
        for metric in client.get_metric_history(run_id, key):
            out.setdefault(metric.step, {})[key] = metric.value
    return out


def test_tensorboard_gets_the_metrics_lines_scalars(tmp_path):
    expected = _write(tmp_path, ("tensorboard",))
    assert expected[1] == {"rollout/success_rate": 0.25, "time/step_s": 3.5, "curriculum/accepted_total": 1.0}
    assert _tensorboard(tmp_path) == expected


def test_wandb_offline_and_mlflow_file_store_get_the_same_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    expected = _write(tmp_path, tracker_names("tensorboard,wandb,mlflow"))
    assert _tensorboard(tmp_path) == expected
    assert _wandb(tmp_path) == expected
    assert _mlflow(tmp_path) == {step: {mlflow_key(k): v for k, v in m.items()} for step, m in expected.items()}
    assert mlflow_key("eval/success_rate") == "eval/success_rate"


def test_tracker_names_are_checked_by_the_config():
    assert tracker_names("") == () and tracker_names("tensorboard, mlflow") == ("tensorboard", "mlflow")
    with pytest.raises(ConfigError, match="trackers"):
        load_config(str(Path(__file__).resolve().parents[1] / "configs/default.py:smoke"),
                    ["loop.trackers=tensorboard,neptune"])
