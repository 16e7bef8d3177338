"""Run outputs: metrics lines survive a resume without duplicates; curves plot; TensorBoard files appear."""

import json

from rlanything_jax.metrics import MetricsWriter, format_step_line, plot_curves, read_metrics


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    writer = MetricsWriter(tmp_path)
    for step in range(1, 6):
        writer.write(step, {"rollout/success_rate": step / 10, "note": "x"})
    writer.close()
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 6, "rollout/succ')   # a line cut by kill -9
    writer = MetricsWriter(tmp_path)
    writer.resume(3)
    writer.write(4, {"rollout/success_rate": 0.9})
    lines = read_metrics(tmp_path / "metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    assert lines[-1]["rollout/success_rate"] == 0.9 and lines[0]["note"] == "x"
    assert list((tmp_path / "tensorboard").iterdir())
    writer.resume(None)
    assert read_metrics(tmp_path / "metrics.jsonl") == []


def test_plot_and_step_line(tmp_path):
    lines = [{"step": s, "a": s * 0.1, "b": None} for s in range(5)]
    out = plot_curves(lines, ["a", "b", "missing"], tmp_path / "curves.png", title="t")
    assert out.read_bytes()[:4] == b"\x89PNG"
    text = format_step_line(3, 10, {"rollout/success_rate": 0.5, "time/step_s": 12.34})
    assert "step 3/10" in text and "success 0.50" in text and "12.3 s/step" in text and "rm step acc - (probe -)" in text
    assert text.startswith("[######..............] step 3/10")
    json.dumps(lines)
