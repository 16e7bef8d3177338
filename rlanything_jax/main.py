"""Entry point: `python -m rlanything_jax.main --config=configs/<scenario>.py[:variant]`.

Parses, validates and prints the resolved config, then runs (or resumes) the RL run
it describes: warm start, RLAnything steps, held-out evaluation, checkpoints and
outputs under `--config.workdir`. A config with `demo.prompt` set instead shows the
policy model answering that prompt (the embedded default does, until its RL run is
tuned to finish in about ten minutes on a 2-core CPU).
"""

from __future__ import annotations

import json
import sys
import time

from absl import app, flags, logging
from ml_collections import config_flags

from rlanything_jax.config import DEFAULT_CONFIG, ConfigError, validate

_CONFIG = config_flags.DEFINE_config_file(
    "config", default=DEFAULT_CONFIG,
    help_string="configs/<scenario>.py[:variant]; override any key with --config.a.b=value")
_DRY_RUN = flags.DEFINE_boolean("dry_run", False, "validate and print the resolved config, then stop")


def _log(message: str) -> None:
    print(f"[rlanything_jax] {message}", file=sys.stderr, flush=True)


def run_demo(cfg) -> str:
    """Loads the policy model on the configured mesh and answers `cfg.demo.prompt` greedily."""
    import jax

    from rlanything_jax import sharding
    from rlanything_jax.models import load_pretrained
    from rlanything_jax.models.registry import resolve_model_dir
    from rlanything_jax.models.tokenizer import Tokenizer
    from rlanything_jax.sampling.sampler import Sampler

    model_dir = resolve_model_dir(cfg.model.policy.path)
    mesh = sharding.build_mesh(dict(cfg.mesh.shape))
    _log(f"loading {model_dir} on mesh {dict(mesh.shape)} ({jax.devices()[0].platform})")
    start = time.perf_counter()
    model = load_pretrained(model_dir, dtype=cfg.model.policy.dtype, mesh=mesh,
                            rules=cfg.sharding.logical_axis_rules, compute_dtype=cfg.model.policy.compute_dtype)
    tokenizer = Tokenizer.from_dir(model_dir)
    _log(f"loaded in {time.perf_counter() - start:.1f}s; generating {cfg.demo.max_new_tokens} tokens")
    sampler = Sampler(model, tokenizer, mesh=mesh, rules=cfg.sharding.logical_axis_rules)
    start = time.perf_counter()
    [completion] = sampler.generate([cfg.demo.prompt], cfg.demo.max_new_tokens, chat=True)
    _log(f"generated {len(completion.token_ids)} tokens in {time.perf_counter() - start:.1f}s "
         f"(including compilation)")
    return completion.text


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # keeps JAX's backend probing out of the output
    cfg = _CONFIG.value
    try:
        validate(cfg)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("# resolved config")
    print(cfg)
    if _DRY_RUN.value:
        return 0
    if cfg.demo.prompt:
        try:
            answer = run_demo(cfg)
        except (FileNotFoundError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print(f"# demo\nuser: {cfg.demo.prompt}\nassistant: {answer}")
        return 0
    from rlanything_jax.loop import EnvironmentFailure
    from rlanything_jax.run import run_rl

    try:
        summary = run_rl(cfg, log=_log)
    except (FileNotFoundError, ValueError, EnvironmentFailure) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _log("interrupted: re-run the same command to resume from the last checkpoint")
        return 130
    print("# summary")
    print(json.dumps(summary, indent=2))
    return 0


def run() -> None:
    app.run(lambda argv: sys.exit(main(argv)))


if __name__ == "__main__":
    run()
