"""The ablation table: mean and spread per row from run summaries."""

from rlanything_jax.experiments.ablation import ablation_table, plot_ablation


def test_table_and_plot(tmp_path):
    summaries = {
        "outcome_only": [{"held_out_success_start": 0.25, "held_out_success_end": 0.5, "accepted_tasks": 0},
                         {"held_out_success_start": 0.25, "held_out_success_end": 0.3, "accepted_tasks": 0}],
        "rlanything": [{"held_out_success_start": 0.25, "held_out_success_end": 0.75, "accepted_tasks": 4,
                        "reward_model/step_accuracy_last": 0.6}],
    }
    table = ablation_table(summaries)
    assert "| outcome_only | 0.250 ± 0.000 | 0.400 ± 0.100 | - | - | 0.000 ± 0.000 |" in table
    assert "| rlanything | 0.250 ± 0.000 | 0.750 ± 0.000 | 0.600 ± 0.000 | - | 4.000 ± 0.000 |" in table
    plot_ablation(summaries, tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
