"""Entry point: `python -m rlanything_jax.main [--config=configs/<file>.py[:variant]] [--config.KEY=VALUE ...]`.

Loads and validates the config, then runs (or resumes) the RL run it describes: warm
start, RLAnything steps, held-out evaluation, checkpoints and outputs under
`--config.workdir`. `--dry_run` prints the resolved config as JSON and stops. Every bad
input (an unknown key, a bad value, a missing file or model, an unwritable workdir)
ends with one line that names it, and exit status 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rlanything_jax.core import distributed
from rlanything_jax.core.validation import ConfigError
from rlanything_jax.system.config import DEFAULT_CONFIG, RunConfig, load_config

USAGE = """usage: python -m rlanything_jax.main [--config=FILE.py[:VARIANT]] [--config.KEY=VALUE ...] [--dry_run]

  --config=FILE[:VARIANT]  a config file under configs/ (default: configs/default.py, the embedded CPU run)
  --config.KEY=VALUE       override any key, e.g. --config.rollout.group_size=4 --config.workdir=runs/x
  --dry_run                print the resolved config as JSON and stop
"""


def _log(message: str) -> None:
    tag = distributed.current().tag   # which process, when there are several
    print(f"[rlanything_jax {time.strftime('%H:%M:%S')}{' ' + tag if tag else ''}] {message}", file=sys.stderr,
          flush=True)


def _error(error: BaseException) -> None:
    tag = distributed.current().tag
    print(f"error{' (' + tag + ')' if tag else ''}: {error}", file=sys.stderr, flush=True)


class _StickyInterrupt:
    """Ctrl-C raises KeyboardInterrupt as usual, and is remembered: Python swallows an exception raised while
    the main thread runs a finalizer or a weakref callback (JAX frees buffers that way), and a busy run then went
    on to its end. The run's log calls, which come at every epoch and phase, raise it again."""

    def __init__(self):
        self.pending = False

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._on_signal)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)

    def _on_signal(self, signum, frame):
        self.pending = True
        raise KeyboardInterrupt

    def log(self, message: str) -> None:
        if self.pending:
            raise KeyboardInterrupt
        _log(message)


def parse_args(argv: Sequence[str]) -> tuple[str, list[str], bool]:
    """(config spec, overrides, dry run) from the command line; raises ValueError on anything else."""
    spec, overrides, dry_run = DEFAULT_CONFIG, [], False
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help", "--helpfull"):
            raise SystemExit(print(USAGE) or 0)
        if arg == "--dry_run":
            dry_run = True
        elif arg.startswith("--config="):
            spec = arg[len("--config="):]
        elif arg == "--config" and args:
            spec = args.pop(0)
        elif arg.startswith("--config."):
            overrides.append(arg[len("--config."):])
        else:
            raise ValueError(f"unknown argument {arg!r}\n{USAGE}")
    return spec, overrides, dry_run


def describe(cfg: RunConfig) -> str:
    """A few lines a person reads before a long run (the full config goes to <workdir>/config.json)."""
    models = ", ".join(f"{role} {getattr(cfg.model, role).path}" for role in ("policy", "reward"))
    return (f"config {cfg.config_file}: scenario {cfg.scenario}, ablation {cfg.ablation}, seed {cfg.seed}\n"
            f"  {cfg.loop.total_steps} RL steps of {cfg.rollout.tasks_per_step} tasks x G={cfg.rollout.group_size}, "
            f"m={cfg.reward.num_judgments}; warm start {'on' if cfg.warm_start.enabled else 'off'}; {models}\n"
            f"  outputs: {os.path.abspath(cfg.workdir)}")


def _quiet_libraries() -> None:
    # JAX's backend probing and absl's pre-init warnings would otherwise open every run.
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: Sequence[str]) -> int:
    try:
        spec, overrides, dry_run = parse_args(argv)
        cfg = load_config(spec, overrides)
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if dry_run:
        print(json.dumps(dataclasses.asdict(cfg), indent=2, default=str))
        return 0
    _quiet_libraries()
    try:
        distributed.initialize(cfg.distributed, log=_log)
    except ConfigError as error:
        _error(error)
        return 2
    _log(describe(cfg))
    from rlanything_jax.system.loop import EnvironmentFailure
    from rlanything_jax.system.run import RunError, finished_step, run_rl

    try:
        with _StickyInterrupt() as interrupt:
            summary = run_rl(cfg, log=interrupt.log)
    except (ConfigError, RunError, FileNotFoundError, ValueError, EnvironmentFailure) as error:
        _error(error)
        return 2 if isinstance(error, (ConfigError, RunError, FileNotFoundError)) else 1
    except KeyboardInterrupt:
        step = finished_step(Path(cfg.workdir).resolve()) if os.path.isdir(cfg.workdir) else None
        if step is None:
            _log("interrupted before the first checkpoint (it is written after the warm start and the step-0 "
                 "evaluation): nothing was saved, so re-running starts over")
        else:
            _log(f"interrupted: re-run the same command to resume from step {step}")
        return 130
    print(json.dumps(summary, indent=2))
    _log(f"done. Outputs in {os.path.abspath(cfg.workdir)}: summary.json, metrics.jsonl, curves.png, "
         f"tensorboard/, checkpoints/")
    return 0


def run() -> None:
    code = main(sys.argv[1:])
    if code:
        distributed.exit_now(code)   # one of several processes: do not wait in JAX's shutdown barrier
    sys.exit(code)


if __name__ == "__main__":
    run()
