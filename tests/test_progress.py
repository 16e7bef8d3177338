"""Progress lines of long phases (rlanything_jax/core/progress.py); tests/agents/test_rollout.py has a rollout's."""

from rlanything_jax.core import progress
from rlanything_jax.core.progress import Progress, progress_line


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_line_at_most_every_interval_with_the_estimated_remaining_time():
    lines, clock = [], Clock()
    progress.set_sink(lines.append)
    try:
        bar = Progress("rollouts", 64, "episodes", every_s=30, clock=clock)
        clock.now += 29
        assert bar.update(10) is None and lines == []          # a phase shorter than 30 s prints nothing
        clock.now += 2
        assert bar.update(16) == "rollouts: 16/64 episodes (25%), 31s elapsed, about 1m33s left"
        clock.now += 20
        assert bar.update(20) is None                           # 20 s after the last line
        clock.now += 150
        assert bar.update(40, fraction=0.5) == "rollouts: 40/64 episodes (50%), 3m21s elapsed, about 3m21s left"
        assert len(lines) == 2
    finally:
        progress.set_sink(print)
    assert progress_line("judge", 0, 8, "prompts", 4000, 0.0) == "judge: 0/8 prompts (0%), 1h06m elapsed"
