"""Progress lines for phases that can run long (rollouts and evaluation, judging, unit tests, warm start,
training, environment adaptation): `Progress(label, total, unit)` and `update(done)` as work finishes.

A line is printed when `EVERY_S` seconds (30) have passed since the phase's start or its last line, so a
phase that ends sooner prints nothing, and a long one says how far it is at least that often (as long as it
calls `update` that often: once per turn, decode chunk, prompt chunk or optimizer update):

    rollouts: 12/64 episodes (31%), 1m35s elapsed, about 3m30s left

The remaining time is extrapolated from the fraction done (`fraction`: an estimate finer than done/total,
e.g. counting the turns of unfinished episodes). Lines go to `set_sink`'s function (the run's log; print
by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable

EVERY_S = 30.0
_sink: list[Callable[[str], None]] = [print]


def set_sink(log: Callable[[str], None]) -> None:
    """Where every phase's progress lines go from now on."""
    _sink[0] = log


def duration(seconds: float) -> str:
    """'45s', '3m05s', '1h02m'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(label: str, done: int, total: int, unit: str, elapsed: float, fraction: float) -> str:
    """The line for `done` of `total` after `elapsed` seconds, `fraction` of the work done."""
    line = f"{label}: {done}/{total} {unit} ({100 * fraction:.0f}%), {duration(elapsed)} elapsed"
    if fraction > 0:
        line += f", about {duration(elapsed * (1 - fraction) / fraction)} left"
    return line


class Progress:
    """One phase's progress; `clock` is injectable (tests)."""

    def __init__(self, label: str, total: int, unit: str = "items", every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.unit = label, total, unit
        self.every_s = EVERY_S if every_s is None else every_s
        self.clock = clock
        self.started = self.last = clock()

    def update(self, done: int, fraction: float | None = None) -> str | None:
        """Prints (and returns) a line if `every_s` has passed since the start or the last line."""
        now = self.clock()
        if now - self.last < self.every_s:
            return None
        self.last = now
        if fraction is None:
            fraction = done / self.total if self.total else 1.0
        line = progress_line(self.label, done, self.total, self.unit, now - self.started,
                             min(max(fraction, 0.0), 1.0))
        _sink[0](line)
        return line
