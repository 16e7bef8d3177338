"""Latency of the untrusted-code sandbox and of the env runner's timeouts (the figures the tests
used to assert; timing belongs here, not in tests that run on loaded machines).

    .venv/bin/python bench/sandbox_latency.py [--runs 20]

Prints one JSON line:
  trivial_run_s         median and p90 wall time of `print(input())`, per working isolation mode
  timeout_overshoot_s   wall time past a 1 s timeout for `while True: pass` (bwrap or best mode)
  execute_many_s        6 runs of a 0.4 s sleep on 3 workers (sequential: >= 2.4 s)
  runner_hang_s         EnvRunner step with one Python hang at step_timeout_s=0.5 (SIGALRM path)
  runner_kill_s         the same with a hang that blocks SIGALRM (the parent kills the worker)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the tests' toy envs (workers inherit it)

from rlanything_jax.agents.envs import sandbox  # noqa: E402
from rlanything_jax.agents.envs.runner import EnvRunner  # noqa: E402
from tests.envs.toy_envs import toy_task  # noqa: E402


def trivial_run_seconds(mode: str, runs: int) -> dict[str, float]:
    sandbox.execute("print(1)", isolation=mode)   # the first call probes the modes
    times = sorted(sandbox.execute("print(input())", "x\n", isolation=mode).wall_s for _ in range(runs))
    return {"median": statistics.median(times), "p90": times[int(0.9 * (len(times) - 1))]}


def runner_step_seconds(bad_action: str) -> float:
    with EnvRunner(num_workers=1, step_timeout_s=0.5, reset_timeout_s=10.0, kill_grace_s=0.5,
                   env_modules=("tests.envs.toy_envs",)) as runner:
        runner.reset({e: toy_task(e) for e in range(4)})
        started = time.monotonic()
        runner.step({0: "add 1", 1: bad_action, 2: "add 2", 3: "add 5"})
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    modes = sandbox.available_isolations()
    report = {"isolation": sandbox.isolation(), "available": modes, "cpus": sandbox.usable_cpus()}
    report["trivial_run_s"] = {mode: trivial_run_seconds(mode, args.runs) for mode in modes}
    report["timeout_overshoot_s"] = sandbox.execute("while True: pass", timeout_s=1.0).wall_s - 1.0
    started = time.monotonic()
    sandbox.execute_many([("import time; time.sleep(0.4); print(input())", f"{i}\n") for i in range(6)],
                         max_workers=3)
    report["execute_many_s"] = time.monotonic() - started
    report["runner_hang_s"] = runner_step_seconds("hang")
    report["runner_kill_s"] = runner_step_seconds("hang_hard")
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
