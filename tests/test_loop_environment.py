"""The loop stops with the environment's reason when no episode of a step could be played."""

import pytest

from rlanything_jax.agents.envs.base import Task
from rlanything_jax.agents.envs.runner import EnvRunner
from rlanything_jax.agents.trajectory import Episode
from rlanything_jax.system import loop


def test_a_step_with_every_episode_failed_in_the_environment_stops_with_the_reason(tmp_path):
    """A game file that is gone: the real runner reports every reset as an error, and the loop stops
    with that reason instead of training on nothing for the rest of the run."""
    task = Task("gone", "alfworld", "put a pillow on the bed", {"game_file": str(tmp_path / "gone.tw-pddl")})
    runner = EnvRunner(num_workers=1, env_modules=("rlanything_jax.scenarios.alfworld.env",))
    try:
        results = runner.reset({0: task, 1: task})
    finally:
        runner.close()
    episodes = [Episode(task=task, group_index=g, env_error=str(getattr(results[g], "reason", results[g])))
                for g in range(2)]
    assert all("gone.tw-pddl" in e.env_error for e in episodes)
    with pytest.raises(loop.EnvironmentFailure, match="step 3: all 2 episodes failed.*gone.tw-pddl"):
        loop.check_environment(episodes, "step 3")
    loop.check_environment([episodes[0], Episode(task=task, group_index=2)], "step 3")  # one played: go on
