"""Run outputs: one metrics.jsonl line per step, TensorBoard scalars, a PNG of the curves, summary.json.

`MetricsWriter.resume(step)` drops lines written after the restored checkpoint, so a
run killed between a metrics write and the next checkpoint never shows a step twice.
"""

from __future__ import annotations

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
    def __init__(self, workdir: str | Path, tensorboard: bool = True):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path = self.workdir / METRICS_FILE
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter  # deferred: optional at import time

            self._tb = SummaryWriter(str(self.workdir / "tensorboard"))

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
        if self._tb is not None:
            for key, value in line.items():
                if key != "step" and isinstance(value, float):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    lines = []
    for raw in Path(path).read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:  # a line cut by a kill: ignore it
            continue
    return lines


def plot_curves(lines: Sequence[Mapping[str, Any]], keys: Sequence[str], out_path: str | Path,
                title: str = "") -> Path:
    """One panel per key over steps (keys missing from every line are skipped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in keys if any(_scalar(line.get(k)) is not None for line in lines)]
    fig, axes = plt.subplots(1, max(len(keys), 1), figsize=(4 * max(len(keys), 1), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        points = [(line["step"], _scalar(line.get(key))) for line in lines if _scalar(line.get(key)) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
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

    return (f"{progress_bar(step, total)} step {step}/{total}  success {get('rollout/success_rate', '.2f')}  "
            f"rm step acc {get('reward_model/step_accuracy', '.2f')} (probe {get('reward_model/probe_step_accuracy', '.2f')})  "
            f"accepted {get('curriculum/accepted_total', '.0f')}  "
            f"held-out {get('eval/success_rate', '.2f')}  {get('time/step_s', '.1f')} s/step")
