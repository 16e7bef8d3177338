"""Run outputs: one metrics.jsonl line per step, TensorBoard scalars, a PNG of the curves, summary.json.

`MetricsWriter.resume(step)` drops lines written after the restored checkpoint, so a
run killed between a metrics write and the next checkpoint never shows a step twice.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


def _scalar(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class MetricsWriter:
    """metrics.jsonl, and the same scalars to each of `trackers` (`trackers.TRACKERS`: TensorBoard, W&B,
    MLflow), which get the run's `config` once."""

    def __init__(self, workdir: str | Path, trackers: tuple[str, ...] = ("tensorboard",),
                 config: Mapping[str, Any] | None = None):
        from rlanything_jax.system.trackers import make_trackers

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path = self.workdir / METRICS_FILE
        self._trackers = make_trackers(tuple(trackers), self.workdir, config)

    def resume(self, last_step: int | None) -> None:
        """Keeps only lines of steps <= last_step (everything when None means a fresh run)."""
        if not self.path.exists():
            return
        kept = [line for line in read_metrics(self.path) if last_step is not None and line["step"] <= last_step]
        self.path.write_text("".join(json.dumps(line) + "\n" for line in kept))

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        line = {"step": int(step)}
        for key, value in sorted(metrics.items()):
            number = _scalar(value)
            line[key] = number if number is not None else value
        with self.path.open("a") as f:
            f.write(json.dumps(line, default=str) + "\n")
        scalars = {key: value for key, value in line.items() if key != "step" and isinstance(value, float)}
        for tracker in self._trackers:
            tracker.log(int(step), scalars)

    def close(self) -> None:
        for tracker in self._trackers:
            tracker.close()


class NullMetricsWriter:
    """The writer of every process but process 0 in a multi-process run: each process computes every metric
    (they agree), and only process 0 writes them."""

    def resume(self, last_step: int | None) -> None:
        pass

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def _resident_gib() -> float | None:
    try:
        import resource

        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * resource.getpagesize() / 2**30
    except (OSError, ValueError, IndexError):   # not Linux
        return None


@functools.cache
def _malloc_trim() -> Any:
    """glibc's `malloc_trim`, looked up once (`find_library` runs a subprocess); None without glibc."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):   # no libc found, or not glibc
        return None


def release_host_memory() -> float:
    """Hands the host allocator's free pages back to the system (glibc's `malloc_trim`) and returns the GiB
    released (0 where there is no glibc). Why: XLA frees its buffers of many sizes into glibc's arenas, which
    keep them; a learning run's resident size climbed ~1.5 GB a step with its live arrays level, until the
    kernel killed it (docs/results.md)."""
    trim = _malloc_trim()
    if trim is None:
        return 0.0
    before = _resident_gib()
    trim(0)
    after = _resident_gib()
    return max(0.0, before - after) if before is not None and after is not None else 0.0


def process_memory() -> dict[str, float]:
    """This process's host memory in GiB: resident now and its peak so far (Linux), and the bytes of the JAX
    arrays alive on its devices. A resident size that climbs while the arrays stay level is memory outside
    them (compiled programs, the host allocator), not arrays kept alive."""
    import resource

    import jax

    out = {"memory/live_arrays_gib": sum(a.nbytes for a in jax.live_arrays()) / 2**30,
           # ru_maxrss is in KiB on Linux
           "memory/host_peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    resident = _resident_gib()
    if resident is not None:   # not Linux: the peak only
        out["memory/host_rss_gib"] = resident
    return out


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    lines = []
    for raw in Path(path).read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:  # a line cut by a kill: ignore it
            continue
    return lines


# Readable titles with units for the metrics system/run.py plots; other keys get their name.
_TITLES = {
    "rollout/success_rate": "Training rollouts: success rate",
    "eval/success_rate": "Held-out games: success rate",
    "reward_model/step_accuracy": "Reward model: step accuracy on rollouts",
    "reward_model/probe_step_accuracy": "Reward model: step accuracy on the fixed probe",
    "reward_model/outcome_accuracy": "Reward model: outcome accuracy",
    "reward_model/unit_test_accuracy": "Reward model: unit-test accuracy",
    "curriculum/accepted_total": "Curriculum: rewritten tasks accepted (total, count)",
    "time/step_s": "Time per step (seconds)",
}
# Measured on fixed sets after the warm start (step 0) and later: each panel is read against that start.
_AGAINST_START = ("eval/success_rate", "reward_model/probe_step_accuracy")
_CAPTION = ("Rates and accuracies share a 0-1 axis. Dashed line: the value after the warm start (step 0); "
            "the label gives the change since then in percentage points.")
_MAX_COLUMNS = 3
_SMOOTH_FROM = 8      # series at least this long also get a running mean
_SMOOTH_WINDOW = 5


def _is_fraction(key: str) -> bool:
    name = key.rsplit("/", 1)[-1]
    return name.endswith(("_rate", "accuracy"))


def _title(key: str) -> str:
    title = _TITLES.get(key, key)
    if _is_fraction(key):
        return f"{title} (fraction, 0-1)"
    if key not in _TITLES and key.endswith("_s"):
        return f"{title} (seconds)"
    return title


def _series(lines: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(int(line["step"]), _scalar(line.get(key))) for line in lines if "step" in line]
    points = [(step, value) for step, value in points if value is not None]
    return [step for step, _ in points], [value for _, value in points]


def running_mean(values: Sequence[float], window: int) -> list[float]:
    """Mean of each value and the up to window-1 values before it."""
    means = []
    for index in range(len(values)):
        recent = values[max(0, index - window + 1):index + 1]
        means.append(sum(recent) / len(recent))
    return means


def _draw_panel(ax, key: str, steps: list[int], values: list[float]) -> None:
    from matplotlib.ticker import MaxNLocator

    smooth = len(values) >= _SMOOTH_FROM and not key.endswith("_total")  # a running total needs no mean
    ax.plot(steps, values, marker="o", markersize=3, linewidth=1, alpha=0.45 if smooth else 1.0, color="C0",
            label="per step" if smooth else None)
    if smooth:
        ax.plot(steps, running_mean(values, _SMOOTH_WINDOW), linewidth=2.2, color="C0",
                label=f"mean of last {_SMOOTH_WINDOW}")
    if _is_fraction(key):
        ax.set_ylim(-0.02, 1.02)
    elif min(values) >= 0:
        ax.set_ylim(bottom=0)  # seconds and counts from zero, so that swings look their real size
    if key in _AGAINST_START and steps and steps[0] == 0 and len(values) > 1:
        start, last = values[0], values[-1]
        change = last - start
        ax.axhline(start, linestyle="--", color="0.35", linewidth=1.2, label=f"warm start (step 0): {start:.2f}")
        ax.plot([steps[-1]], [last], marker="o", markersize=7, color="C0")
        # A fixed corner, boxed, so that the change stays readable whatever the curve does.
        ax.text(0.98, 0.04, f"{start:.2f} \u2192 {last:.2f}: {change * 100:+.1f} points since step 0",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=9, fontweight="bold",
                color="C2" if change > 0 else "C3" if change < 0 else "0.3",
                bbox={"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": "0.7", "alpha": 0.9})
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best", framealpha=0.8)
    ax.set_title(_title(key), fontsize=10)
    ax.set_xlabel("RL step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def curve_figure(lines: Sequence[Mapping[str, Any]], keys: Sequence[str], title: str = ""):
    """A matplotlib Figure with one panel per key present in `lines`, in a grid of up to 3 columns.

    Rates and accuracies share a fixed 0..1 axis so that step-to-step noise looks its real
    size; held-out metrics are drawn against their warm-start (step 0) value.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [(key, *_series(lines, key)) for key in keys]
    present = [(key, steps, values) for key, steps, values in present if values]
    columns = min(_MAX_COLUMNS, max(len(present), 1))
    rows = max(1, math.ceil(len(present) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.6 * rows + 0.6), squeeze=False)
    flat = list(axes.flat)
    for ax, (key, steps, values) in zip(flat, present):
        _draw_panel(ax, key, steps, values)
    for ax in flat[len(present):]:
        fig.delaxes(ax)
    if not present:
        fig.text(0.5, 0.5, "no metrics to plot yet", ha="center", va="center")
    fig.suptitle(title or "Training curves", fontsize=12, fontweight="bold")
    fig.text(0.5, 0.01, _CAPTION, ha="center", va="bottom", fontsize=9, color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def plot_curves(lines: Sequence[Mapping[str, Any]], keys: Sequence[str], out_path: str | Path,
                title: str = "") -> Path:
    """Writes `curve_figure` as a PNG; keys missing from every line get no panel."""
    import matplotlib.pyplot as plt

    fig = curve_figure(lines, keys, title)
    out = Path(out_path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def progress_bar(done: int, total: int, width: int = 20) -> str:
    filled = min(width, max(0, round(width * done / max(total, 1))))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def format_step_line(step: int, total: int, metrics: Mapping[str, Any]) -> str:
    """The one-line progress report printed after every step."""
    def get(key: str, fmt: str) -> str:
        value = _scalar(metrics.get(key))
        return format(value, fmt) if value is not None else "-"

    if "reward_model/unit_test_accuracy" in metrics:   # a reward model that writes unit tests
        reward_model = (f"rm test acc {get('reward_model/unit_test_accuracy', '.2f')} "
                        f"(valid {get('reward_model/unit_test_valid', '.2f')})")
    else:
        reward_model = (f"rm step acc {get('reward_model/step_accuracy', '.2f')} "
                        f"(probe {get('reward_model/probe_step_accuracy', '.2f')})")
    return (f"{progress_bar(step, total)} step {step}/{total}  success {get('rollout/success_rate', '.2f')}  "
            f"{reward_model}  accepted {get('curriculum/accepted_total', '.0f')}  "
            f"held-out {get('eval/success_rate', '.2f')}  {get('time/step_s', '.1f')} s/step")
