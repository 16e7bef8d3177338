"""Latency of the ALFWorld engine: loading a new game, resetting a loaded one, one step (the figures a test
used to assert; timing belongs here, not in tests that run on loaded machines).

    .venv/bin/python bench/alfworld_env_latency.py [--seed 31]

Generates one game of each task type (default knobs) and plays the expert's walkthrough in one
in-process environment. Prints one JSON line of medians in seconds over the games / steps:
  load_and_reset_s   the first reset of a game (reads and compiles its PDDL)
  reset_s            a second reset of the same game
  step_s             one expert command
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from rlanything_jax.scenarios.alfworld import gen
from rlanything_jax.scenarios.alfworld.env import AlfworldEnv, GameKnobs, expert_actions, make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    loads, resets, steps = [], [], []
    env = AlfworldEnv()
    with tempfile.TemporaryDirectory() as games_dir:
        tasks = [make_task(args.seed, task_type, GameKnobs(), games_dir) for task_type in gen.TASK_TYPES]
        for task in tasks:
            started = time.perf_counter()
            env.reset(task)
            loads.append(time.perf_counter() - started)
            started = time.perf_counter()
            env.reset(task)
            resets.append(time.perf_counter() - started)
            for command in expert_actions(task):
                started = time.perf_counter()
                env.step(command)
                steps.append(time.perf_counter() - started)
    env.close()
    print(json.dumps({"games": len(tasks), "steps": len(steps), "load_and_reset_s": statistics.median(loads),
                      "reset_s": statistics.median(resets), "step_s": statistics.median(steps)}, sort_keys=True))


if __name__ == "__main__":
    main()
