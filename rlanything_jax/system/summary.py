"""A finished run's summary: held-out success at its start and end, the reward model's accuracies, the time
each part of a step took, and its curves (summary.json, curves.png in the workdir)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rlanything_jax.system.config import RunConfig
from rlanything_jax.system.metrics import plot_curves, read_metrics

CURVES = ("rollout/success_rate", "eval/success_rate", "reward_model/step_accuracy",
          "reward_model/probe_step_accuracy", "reward_model/outcome_accuracy", "reward_model/unit_test_accuracy",
          "curriculum/accepted_total", "time/step_s")


def time_split(lines: list[dict], blocking_save_s: list[float]) -> dict[str, float]:
    """Mean seconds per RL step of each timed part (`time/<part>_s`), and of a checkpoint save's blocking part."""
    steps = [line for line in lines if line.get("step", 0) >= 1]
    keys = sorted({k for line in steps for k in line if k.startswith("time/") and k.endswith("_s")})
    split = {key[len("time/"):-len("_s")]: round(sum(line.get(key, 0.0) for line in steps) / len(steps), 3)
             for key in keys} if steps else {}
    if blocking_save_s:
        split["checkpoint_save"] = round(sum(blocking_save_s) / len(blocking_save_s), 3)
    return split


def finish(cfg: RunConfig, workdir: Path, seconds: float, blocking_save_s: list[float] = ()) -> dict:
    lines = read_metrics(workdir / "metrics.jsonl")
    evals = [(line["step"], line["eval/success_rate"]) for line in lines
             if isinstance(line.get("eval/success_rate"), float) and not math.isnan(line["eval/success_rate"])]
    summary = {"config": cfg.config_file, "scenario": cfg.scenario, "ablation": cfg.ablation, "seed": cfg.seed,
               "steps": cfg.loop.total_steps,
               "held_out_success_start": evals[0][1] if evals else None,
               "held_out_success_end": evals[-1][1] if evals else None,
               "accepted_tasks": int(max((line.get("curriculum/accepted_total", 0) for line in lines), default=0)),
               "seconds_this_session": round(seconds, 1),
               # mean seconds per step (the phases; within them the environment and the samplers)
               "time_split_s": time_split(lines, list(blocking_save_s))}
    for key in ("reward_model/step_accuracy", "reward_model/probe_step_accuracy", "reward_model/outcome_accuracy",
                "reward_model/unit_test_accuracy"):
        values = [line[key] for line in lines if isinstance(line.get(key), float)]
        if values:   # a scenario reports the reward-model accuracies of its kind of reward model
            summary[key + "_first"], summary[key + "_last"] = values[0], values[-1]
    steps = sum(line.get("policy_data/steps", 0) for line in lines)
    if steps:   # how much the judgments decided the policy's signal, over the run's policy steps
        summary["judgment_sign_changes_share"] = sum(line.get("policy_data/judgment_sign_changes", 0)
                                                     for line in lines) / steps
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot_curves(lines, CURVES, workdir / "curves.png", title=f"{cfg.config_file or cfg.scenario} / {cfg.ablation} / "
                                                             f"seed {cfg.seed}")
    return summary
