"""Coding problems from the reference's stdio files: a training file and a separate evaluation file,
through the configs' own loading; HumanEval (the offline choice) keeps training when only the evaluation
file is given."""

import json
from pathlib import Path

import pytest

from rlanything_jax.core.validation import ConfigError
from rlanything_jax.scenarios.coding import env as coding
from rlanything_jax.system import assemble
from rlanything_jax.system.config import load_config

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A CodeContests-style JSON list for training and a LiveBench-style JSONL for evaluation, in the
    reference's stdio format, from the bundled problems (their ids stripped: the file names them)."""
    root = tmp_path_factory.mktemp("coding_files")
    records = [{k: v for k, v in coding.stdio_record(t).items()} for t in coding.builtin_stdio_tasks()]
    train, held_out = root / "code_contests_train.json", root / "livebench_eval.jsonl"
    train.write_text(json.dumps(records[:3]))
    held_out.write_text("".join(json.dumps(r) + "\n" for r in records[3:]))
    return train, held_out, records


def _tasks(spec, *overrides, tmp_path):
    cfg = load_config(str(ROOT / spec), overrides)
    return assemble.build_tasks(cfg, assemble.build_scenario(cfg), tmp_path)


def test_smoke_trains_on_the_training_file_and_evaluates_on_the_evaluation_file(files, tmp_path):
    train, held_out, records = files
    sets = _tasks("configs/coding.py:smoke", f"tasks.train_file={train}",
                  f"tasks.eval_file={held_out}", "env.num_train_tasks=3",
                  "env.num_eval_tasks=5", tmp_path=tmp_path)
    assert [t.task_id for t in sets.train] == [f"code_contests_train/{i}" for i in range(3)]
    assert [t.task_id for t in sets.eval] == [f"livebench_eval/{i}" for i in range(len(records) - 3)]
    assert [t.goal for t in sets.train + sets.eval] == [r["question"] for r in records]
    assert all(t.payload["format"] == "stdio" for t in sets.train + sets.eval)


def test_paper_keeps_humaneval_for_training_without_a_training_file(files, tmp_path):
    _, held_out, records = files
    sets = _tasks("configs/coding.py:paper", f"tasks.eval_file={held_out}", tmp_path=tmp_path)
    assert sets.train[0].task_id == "HumanEval/0" and len(sets.train) == 128
    assert [t.task_id for t in sets.eval] == [f"livebench_eval/{i}" for i in range(len(records) - 3)]
    offline = _tasks("configs/coding.py:paper", tmp_path=tmp_path)   # no files: HumanEval cut in two
    assert [t.task_id for t in offline.eval] == [f"HumanEval/{i}" for i in range(128, 164)]


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="eval_file"):
        load_config(str(ROOT / "configs/coding.py:smoke"), [f"tasks.eval_file={tmp_path}/none.json"])
