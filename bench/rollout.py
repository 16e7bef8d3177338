"""Rollout throughput: many ALFWorld episodes stepped concurrently, and where the time goes.

    .venv/bin/python bench/rollout.py [--episodes 64] [--workers 2] [--turns 10]

Plays `--episodes` generated ALFWorld games (16 tasks of the six types x G) to
`--turns` policy turns with a tiny random policy over the real Qwen2.5 vocabulary
(its random text falls back to the first admissible command), through the
vectorised `EnvRunner` and, for comparison, through one in-process environment per
episode stepped serially. Prints environment steps/s and the share of rollout time
spent in the environments, in the policy sampler and elsewhere. The first pass
compiles the sampler's programs and is not timed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rlanything_jax.agents.rollout import RolloutConfig, play_episodes  # noqa: E402
from rlanything_jax.envs.base import InProcessRunner  # noqa: E402
from rlanything_jax.envs.runner import EnvRunner  # noqa: E402
from rlanything_jax.models import Decoder, DecoderConfig  # noqa: E402
from rlanything_jax.models.qwen_tokenizer_io import convert_qwen_tokenizer  # noqa: E402
from rlanything_jax.models.tokenizer import Tokenizer  # noqa: E402
from rlanything_jax.sampling.sampler import Sampler, SamplerConfig  # noqa: E402
from rlanything_jax.scenarios.alfworld import env as alfworld  # noqa: E402
from rlanything_jax.scenarios.alfworld.gen import TASK_TYPES  # noqa: E402
from rlanything_jax.scenarios.alfworld.knobs import GameKnobs  # noqa: E402
from rlanything_jax.scenarios.text_games.reference import ReferencePrompts  # noqa: E402


def _sampler(workdir: str) -> Sampler:
    tokenizer = Tokenizer.from_dir(convert_qwen_tokenizer(os.path.join(workdir, "tokenizer"), "qwen2.5"))
    cfg = DecoderConfig(model_type="qwen2", vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128,
                        num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, tie_word_embeddings=True,
                        qkv_bias=True)
    from flax import nnx

    return Sampler(Decoder(cfg, rngs=nnx.Rngs(0)), tokenizer, config=SamplerConfig(max_cache_length=16384))


def _play(sampler, runner, tasks, group_size: int, turns: int, seed: int) -> tuple[Counter, float]:
    config = RolloutConfig(group_size=group_size, max_turns=turns, max_new_tokens=8, max_context_tokens=16384,
                           temperature=1.0, top_p=1.0, seed=seed)
    metrics: Counter = Counter()
    start = time.perf_counter()
    play_episodes(sampler, runner, ReferencePrompts(), tasks, config, metrics=metrics)
    return metrics, time.perf_counter() - start


def _report(label: str, metrics: Counter, wall: float) -> None:
    env, policy = metrics["time/rollout_env_s"], metrics["time/rollout_sampling_s"]
    other = max(wall - env - policy, 0.0)
    print(f"{label:>12}: {metrics['env_steps']:5d} env steps in {wall:6.1f} s wall | "
          f"env {metrics['env_steps'] / max(env, 1e-9):7.1f} steps/s of env time | "
          f"share: env {env / wall:5.1%}, sampler {policy / wall:5.1%}, other {other / wall:5.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench_rollout_")
    num_tasks = 16
    group_size = max(1, args.episodes // num_tasks)
    knobs = GameKnobs(num_receptacles=10, num_distractors=4)
    tasks = [alfworld.make_task(seed, TASK_TYPES[seed % len(TASK_TYPES)], knobs, os.path.join(workdir, "games"))
             for seed in range(num_tasks)]
    sampler = _sampler(workdir)
    print(f"{num_tasks} ALFWorld tasks x G={group_size} = {num_tasks * group_size} concurrent episodes, "
          f"{args.turns} turns, {os.cpu_count()} CPU cores")
    with EnvRunner(num_workers=args.workers, env_modules=(alfworld.__name__,)) as runner:
        _play(sampler, runner, tasks, group_size, args.turns, seed=0)      # compiles the sampler
        metrics, wall = _play(sampler, runner, tasks, group_size, args.turns, seed=1)
        _report(f"{args.workers} workers", metrics, wall)
        runner_metrics = runner.metrics
    print(f"{'':>12}  runner: {runner_metrics}")
    serial = InProcessRunner()
    metrics, wall = _play(sampler, serial, tasks, group_size, args.turns, seed=1)
    serial.close()
    _report("in-process", metrics, wall)


if __name__ == "__main__":
    main()
