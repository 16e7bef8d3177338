"""`python -m rlanything_jax.evaluate` and `system/evaluation.py`, the one evaluation behind it and the training loop:
pass@k against hand-computed values, the expert on each text scenario's smoke config (success 1.0), a
packaged model on one task, and a smoke run's workdir giving the success of the run's own last evaluation."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlanything_jax import evaluate as evaluate_cli
from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.system.evaluation import pass_at_k, success_report
from rlanything_jax.system.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)      # 1 - C(2,2)/C(3,2)
    assert pass_at_k(3, 1, 3) == 1.0
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)     # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # 1 - C(7,4)/C(10,4)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def _episodes(task: Task, wins: list[bool], errors: int = 0) -> list[Episode]:
    played = [Episode(task, g, won=won) for g, won in enumerate(wins)]
    return played + [Episode(task, len(wins) + i, env_error="worker died") for i in range(errors)]


def test_success_report_counts_tasks_types_and_leaves_out_environment_failures():
    a = Task("a", "game", "x", {"task_type": "heat"})
    b = Task("b", "game", "x", {"task_type": "heat"})
    c = Task("c", "game", "x", {"task_type": "cool"})
    report = success_report(_episodes(a, [True, False, False]) + _episodes(b, [False, False, False])
                            + _episodes(c, [True, True], errors=1))
    assert report["num_tasks"] == 3 and report["episodes"] == 8 and report["env_failures"] == 1
    assert report["success_rate"] == pytest.approx(3 / 8)                  # of played rollouts
    assert report["pass_at_k"]["1"] == pytest.approx((1 / 3 + 0 + 1) / 3)  # the mean over tasks
    assert set(report["pass_at_k"]) == {"1", "2"}       # up to the fewest rollouts a task has (c: 2)
    assert report["pass_at_k"]["2"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    heat = report["per_type"]["heat"]
    assert heat["num_tasks"] == 2 and heat["episodes"] == 6 and heat["success_rate"] == pytest.approx(1 / 6)
    assert heat["pass_at_k"]["3"] == pytest.approx(0.5)
    assert report["per_type"]["cool"]["success_rate"] == 1.0
    assert math.isnan(success_report(_episodes(a, [], errors=2))["success_rate"])


def _evaluate(capsys, *args) -> tuple[int, dict | None, str]:
    code = evaluate_cli.main(list(args))
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    return code, json.loads(lines[-1]) if code == 0 else None, captured.err


@pytest.mark.parametrize("config", ["configs/alfworld.py:smoke", "configs/textworld.py:smoke",
                                    "configs/coding.py:smoke"])
def test_expert_succeeds_on_every_task_of_each_text_scenario(config, tmp_path, capsys):
    if "textworld" in config:
        pytest.importorskip("textworld")
    code, summary, err = _evaluate(capsys, f"--config={ROOT / config}", "--split=eval", "--policy=expert",
                                   "--rollouts=2", f"--out={tmp_path}")
    assert code == 0, err[-2000:]
    assert summary["split"] == "eval" and summary["num_tasks"] == 2 and summary["episodes"] == 4
    assert summary["success_rate"] == 1.0 and summary["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert sum(t["num_tasks"] for t in summary["per_type"].values()) == 2
    written = json.loads((tmp_path / "eval.json").read_text())
    assert written["success_rate"] == 1.0 and written["rollouts"] == 2
    assert list((tmp_path / "traces").glob("*/trace.html"))
    assert "evaluation: 2/2 tasks" in err


def test_unknown_split_is_a_clear_error(tmp_path, capsys):
    code, _, err = _evaluate(capsys, f"--config={ROOT / 'configs/alfworld.py:smoke'}", "--split=valid_unseen",
                             "--policy=expert", f"--out={tmp_path}")
    assert code == 2 and "no split 'valid_unseen'" in err and "eval" in err


@pytest.mark.slow
@pytest.mark.parametrize("config, task_type, figures", [
    # SmolLM2's tokens of a game's first prompt are over the smoke config's 256
    ("configs/alfworld.py:smoke --config.rollout.max_prompt_tokens=512", "pick_and_place_simple",
     {"reward_model/outcome_accuracy", "reward_model/step_accuracy"}),
    ("configs/coding.py:smoke", "coding", {"reward_model/unit_test_accuracy", "reward_model/unit_test_detect"}),
])
def test_a_packaged_model_plays_and_judges_one_task(config, task_type, figures, tmp_path, capsys):
    model = "package:smollm2-135m-instruct"
    config, *overrides = config.split()
    code, summary, err = _evaluate(capsys, f"--config={ROOT / config}", *overrides, "--config.env.num_eval_tasks=1",
                                   "--config.eval.max_turns=2", "--split=eval", f"--policy={model}",
                                   f"--reward_model={model}", f"--out={tmp_path}")
    assert code == 0, err[-2000:]
    assert summary["num_tasks"] == 1 and summary["episodes"] == 1 and summary["success_rate"] in (0.0, 1.0)
    assert list(summary["per_type"]) == [task_type]
    assert figures <= set(summary["reward_model"]), summary
    assert all(0.0 <= summary["reward_model"][k] <= 1.0 for k in figures)
    assert next((tmp_path / "traces").glob("*/trace.html")).read_text()


@pytest.mark.slow
def test_a_run_workdir_gives_the_success_of_the_runs_own_last_evaluation(tmp_path, capsys):
    workdir = tmp_path / "run"
    run = [f"--config={ROOT / 'configs/default.py'}:smoke", f"--config.workdir={workdir}",
           "--config.loop.total_steps=1", "--config.env.num_eval_tasks=4", "--config.eval.group_size=2"]
    result = subprocess.run([sys.executable, "-m", "rlanything_jax.main", *run], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    last = [line for line in read_metrics(workdir / "metrics.jsonl") if "eval/success_rate" in line][-1]
    assert last["step"] == 1
    code, summary, err = _evaluate(capsys, *run, "--split=eval", f"--policy={workdir}", f"--out={tmp_path / 'eval'}")
    assert code == 0, err[-2000:]
    assert "restored step 1" in err
    assert summary["success_rate"] == last["eval/success_rate"] and summary["episodes"] == last["eval/episodes"] == 8
