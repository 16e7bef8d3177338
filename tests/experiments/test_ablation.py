"""The ablation table: mean and spread per row from run summaries."""

from rlanything_jax.experiments.ablation import ablation_table, plot_ablation


def test_table_and_plot(tmp_path):
    summaries = {
        "outcome_only": [{"held_out_success_start": 0.25, "held_out_success_end": 0.5, "accepted_tasks": 0},
                         {"held_out_success_start": 0.25, "held_out_success_end": 0.3, "accepted_tasks": 0}],
        "rlanything": [{"held_out_success_start": 0.25, "held_out_success_end": 0.75, "accepted_tasks": 4,
                        "reward_model/step_accuracy_last": 0.6, "reward_model/probe_step_accuracy_first": 0.7,
                        "reward_model/probe_step_accuracy_last": 0.8, "judgment_sign_changes_share": 0.25}],
    }
    table = ablation_table(summaries)
    # Two seeds: mean ± population spread (gains +25 and +5 points); one seed: its values alone.
    assert ("| outcome_only | 2 | +15.0 ± 10.0 | 0.250 ± 0.000 | 0.400 ± 0.100 | - | - | - | - "
            "| 0.000 ± 0.000 | - |") in table
    assert "| rlanything | 1 | +50.0 | 0.250 | 0.750 | 0.700 | 0.800 | 0.600 | - | 4.000 | 0.250 |" in table
    named = ablation_table({"rlanything": [{"seed": 10086, "held_out_success_start": 0.25},
                                           {"seed": 10087, "held_out_success_start": 0.5}]})
    assert "| rlanything | 10086, 10087 | - | 0.375 ± 0.125 | - |" in named
    plot_ablation(summaries, tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


def test_rows_start_from_a_copy_of_their_seeds_warm_start(tmp_path):
    from rlanything_jax.experiments.ablation import start_from_warm_start

    warm = tmp_path / "warm_start" / "seed0"
    (warm / "checkpoints" / "0").mkdir(parents=True)
    (warm / "checkpoints" / "0" / "state").write_text("step 0")
    (warm / "games").mkdir()
    (warm / "metrics.jsonl").write_text('{"step": 0, "eval/success_rate": 0.5}\n')
    (warm / "summary.json").write_text("{}")  # the warm start's own summary stays behind
    row = tmp_path / "rlanything" / "seed0"
    start_from_warm_start(warm, row)
    assert (row / "checkpoints" / "0" / "state").read_text() == "step 0"
    assert (row / "metrics.jsonl").read_text() == (warm / "metrics.jsonl").read_text()
    assert (row / "games").is_dir() and not (row / "summary.json").exists()
    # A row that has started (here: gone on to step 3) is never overwritten by the warm start.
    (row / "metrics.jsonl").write_text("step 3\n")
    start_from_warm_start(warm, row)
    assert (row / "metrics.jsonl").read_text() == "step 3\n"


def test_report_reads_only_finished_runs(tmp_path):
    import json

    from rlanything_jax.experiments.ablation import _finished_summary

    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text(json.dumps({"steps": 10, "held_out_success_end": 0.5}))
    (tmp_path / "shorter").mkdir()   # finished an earlier, shorter run: not this ablation's
    (tmp_path / "shorter" / "summary.json").write_text(json.dumps({"steps": 4}))
    (tmp_path / "running").mkdir()   # no summary yet
    assert _finished_summary(tmp_path / "done", 10) == {"steps": 10, "held_out_success_end": 0.5}
    assert _finished_summary(tmp_path / "shorter", 10) is None
    assert _finished_summary(tmp_path / "running", 10) is None


def test_a_runs_summary_holds_the_share_of_policy_steps_its_judgments_signed(tmp_path):
    import json

    from rlanything_jax.system.config import load_config
    from rlanything_jax.system.summary import finish

    lines = [{"step": 0, "eval/success_rate": 0.25},
             {"step": 1, "policy_data/steps": 30, "policy_data/judgment_sign_changes": 3},
             {"step": 2},   # no task in the band: no policy data
             {"step": 3, "policy_data/steps": 10, "policy_data/judgment_sign_changes": 7, "eval/success_rate": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = finish(load_config("configs/default.py:smoke"), tmp_path, 1.0)
    assert summary["judgment_sign_changes_share"] == (3 + 7) / (30 + 10)
    assert (summary["held_out_success_start"], summary["held_out_success_end"]) == (0.25, 0.5)
