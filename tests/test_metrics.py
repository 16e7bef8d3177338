"""Run outputs: metrics lines survive a resume without duplicates; curves plot; TensorBoard files appear."""

import matplotlib.image
import numpy as np
import pytest

from rlanything_jax.system.metrics import (
    MetricsWriter,
    curve_figure,
    format_step_line,
    plot_curves,
    read_metrics,
    running_mean,
)

# The keys system/run.py plots.
CURVES = ("rollout/success_rate", "eval/success_rate", "reward_model/step_accuracy",
          "reward_model/probe_step_accuracy", "reward_model/outcome_accuracy", "reward_model/unit_test_accuracy",
          "curriculum/accepted_total", "time/step_s")


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


def write_alfworld_like_run(workdir, steps: int = 20, eval_every: int = 5) -> list[dict]:
    """metrics.jsonl shaped like an ALFWorld run's (no unit tests there), with its noise."""
    rng = np.random.default_rng(10086)
    writer = MetricsWriter(workdir, trackers=())
    writer.write(0, {"eval/success_rate": 0.51, "reward_model/probe_step_accuracy": 0.767, "eval/episodes": 96})
    accepted = 0
    for step in range(1, steps + 1):
        accepted += int(rng.integers(0, 3))
        line = {"rollout/success_rate": float(np.clip(0.55 + 0.01 * step + rng.normal(0, 0.08), 0, 1)),
                "reward_model/step_accuracy": float(np.clip(0.66 + 0.005 * step + rng.normal(0, 0.04), 0, 1)),
                "reward_model/probe_step_accuracy": float(0.767 - 0.004 * step + rng.normal(0, 0.02)),
                "reward_model/outcome_accuracy": float(np.clip(0.68 + rng.normal(0, 0.1), 0, 1)),
                "curriculum/accepted_total": accepted, "time/step_s": float(rng.uniform(16, 50)),
                "rollout/mode": "train"}
        if step % eval_every == 0:
            line["eval/success_rate"] = 0.51 + float(rng.normal(0.02, 0.04))
        writer.write(step, line)
    writer.close()
    return read_metrics(workdir / "metrics.jsonl")


def test_curves_are_a_grid_of_present_metrics(tmp_path):
    lines = write_alfworld_like_run(tmp_path)
    out = plot_curves(lines, CURVES, tmp_path / "curves.png", title="alfworld / rlanything / seed 10086")
    assert out.read_bytes()[:4] == b"\x89PNG"
    height, width, _ = matplotlib.image.imread(out).shape
    assert (width, height) == (1560, 1140)  # 3 columns x 3 rows at 100 dpi, not one long row

    fig = curve_figure(lines, CURVES, title="t")
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == 7 and not any("unit-test" in t for t in titles)  # no unit tests in ALFWorld
    assert fig.axes[0].get_subplotspec().get_geometry()[:2] == (3, 3)
    assert fig.get_suptitle() == "t"
    panels = dict(zip([key for key in CURVES if key != "reward_model/unit_test_accuracy"], fig.axes, strict=True))
    assert panels["curriculum/accepted_total"].get_title() == "Curriculum: rewritten tasks accepted (total, count)"
    for key in ("rollout/success_rate", "eval/success_rate", "reward_model/step_accuracy"):
        assert panels[key].get_ylim() == (-0.02, 1.02) and "fraction, 0-1" in panels[key].get_title()
    assert panels["time/step_s"].get_ylim()[0] == 0 and "seconds" in panels["time/step_s"].get_title()

    held_out = panels["eval/success_rate"]
    steps, values = zip(*[(line["step"], line["eval/success_rate"]) for line in lines if "eval/success_rate" in line])
    assert steps == (0, 5, 10, 15, 20)
    dashed = [line for line in held_out.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and set(dashed[0].get_ydata()) == {0.51}
    change = (values[-1] - values[0]) * 100
    label = f"0.51 \u2192 {values[-1]:.2f}: {change:+.1f} points since step 0"
    assert [text.get_text() for text in held_out.texts] == [label]


def test_curves_skip_absent_and_empty_metrics(tmp_path):
    lines = [{"step": s, "a/success_rate": s * 0.1, "b": None, "note": "text"} for s in range(5)]
    fig = curve_figure(lines, ["a/success_rate", "b", "note", "missing"])
    assert len(fig.axes) == 1 and fig.get_suptitle() == "Training curves"
    assert fig.axes[0].get_ylim() == (-0.02, 1.02)
    assert not fig.axes[0].texts  # no step-0 baseline for a metric that is not held out
    out = plot_curves([], ["missing"], tmp_path / "empty.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_running_mean():
    assert running_mean([1.0, 2.0, 3.0, 4.0, 8.0], 3) == [1.0, 1.5, 2.0, 3.0, 5.0]
    assert running_mean([], 5) == []


def test_step_line():
    text = format_step_line(3, 10, {"rollout/success_rate": 0.5, "time/step_s": 12.34})
    assert "step 3/10" in text and "success 0.50" in text and "12.3 s/step" in text
    assert "rm step acc - (probe -)" in text
    assert text.startswith("[######..............] step 3/10")
    # A reward model that writes unit tests reports their accuracy instead.
    text = format_step_line(1, 2, {"reward_model/unit_test_accuracy": 0.25, "reward_model/unit_test_valid": 0.5})
    assert "rm test acc 0.25 (valid 0.50)" in text and "rm step acc" not in text


def test_process_memory_counts_live_arrays_and_resident_memory():
    import jax.numpy as jnp

    from rlanything_jax.system.metrics import process_memory

    before = process_memory()
    held = jnp.ones((64, 1 << 18), jnp.float32)   # 64 MiB on the device (the host, on CPU)
    held.block_until_ready()
    after = process_memory()
    assert after["memory/live_arrays_gib"] - before["memory/live_arrays_gib"] >= 64 / 1024 - 1e-9
    # On CPU the device buffers are host memory: the resident size holds them, the peak is at least it.
    assert after["memory/host_rss_gib"] >= after["memory/live_arrays_gib"]
    assert after["memory/host_peak_rss_gib"] >= after["memory/host_rss_gib"] - 1e-3
    del held
    assert process_memory()["memory/live_arrays_gib"] <= after["memory/live_arrays_gib"] - 64 / 1024 + 1e-9


def test_release_host_memory_hands_freed_heap_back():
    import ctypes
    import ctypes.util
    import sys

    from rlanything_jax.system.metrics import release_host_memory

    if not sys.platform.startswith("linux"):
        pytest.skip("malloc_trim is glibc's")
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    release_host_memory()
    # 2000 blocks of 64 KiB (below glibc's mmap threshold: they come from the heap) touched, then freed; the
    # last one stays, so the heap's top cannot shrink on its own and only a trim returns the pages below it.
    blocks = [libc.malloc(64 << 10) for _ in range(2000)]
    for block in blocks:
        ctypes.memset(block, 1, 64 << 10)
    for block in blocks[:-1]:
        libc.free(block)
    released = release_host_memory()
    libc.free(blocks[-1])
    assert released >= 100 / 1024   # of the ~125 MiB freed, in GiB
