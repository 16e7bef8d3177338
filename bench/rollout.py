"""Rollout throughput: many ALFWorld episodes stepped concurrently, where the time goes, and continuous batching.

    .venv/bin/python bench/rollout.py [--episodes 64] [--slots 16] [--workers 2] [--turns 24]
                                      [--env_step_s 0.1] [--slow_env_workers 8] [--sections slots,overlap]

Plays `--episodes` generated ALFWorld games (16 tasks of the six types x G) with a
tiny random policy over the real Qwen2.5 vocabulary (its random text falls back to
the first admissible command). Episodes have mixed lengths, as in a group whose task
sits in the useful accuracy band: in each task, all but the last episode take the
expert's actions (the policy's responses are still sampled and recorded) and win in
4-12 steps; the last plays the random policy up to `--turns`.

1. Slots: the episodes go through a budget of `--slots` sampler slots, the situation
   of an accelerator run whose KV-cache memory bounds the batch below the number of
   episodes. Continuous batching (an ended episode's slot refilled at once) against
   waves of whole tasks (each wave runs until its longest episode ends). Every mode is
   played twice with the same seed and the second pass timed, so both are timed with
   their programs compiled, as in a long run.
2. All at once (no slot budget, today's CPU default): one engine path whatever
   `continuous_batching` says, since nothing waits for a slot.
3. The environment side: the vectorised `EnvRunner` against one in-process environment
   per episode stepped serially.
4. A slow environment (`bench/delayed_env.py`: every step also waits `--env_step_s`, as a
   desktop waits for its action, settle time and screenshot): the slots' environments
   stepped in turn with decoding, against two cohorts of slots taking turns so that one's
   environments step while the other decodes (`rollout.overlap_env_steps`).

Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
from delayed_env import delayed  # noqa: E402  (bench/: on the path of this script and of its spawned workers)

from rlanything_jax.agents.envs.base import InProcessRunner  # noqa: E402
from rlanything_jax.agents.envs.runner import EnvRunner  # noqa: E402
from rlanything_jax.agents.rollout import RolloutConfig, RolloutEngine  # noqa: E402
from rlanything_jax.core.models import Decoder, DecoderConfig  # noqa: E402
from rlanything_jax.core.models.qwen_tokenizer_io import convert_qwen_tokenizer  # noqa: E402
from rlanything_jax.core.models.tokenizer import Tokenizer  # noqa: E402
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig  # noqa: E402
from rlanything_jax.core.sampling.strategies import Sampling  # noqa: E402
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


def _play(sampler, runner, tasks, group_size: int, turns: int, seed: int, slots: int = 0,
          continuous: bool = True, overlap: bool = False) -> tuple[Counter, float]:
    config = RolloutConfig(group_size=group_size, max_turns=turns, max_new_tokens=8, max_prompt_tokens=16376,
                           temperature=1.0, top_p=1.0, max_live_episodes=slots,
                           continuous_batching=continuous, overlap_env_steps=overlap)
    plans = {task.task_id: alfworld.expert_actions(task) for task in tasks}

    def expert_unless_last(episode, observation):   # mixed lengths: see the module docstring
        plan = plans[episode.task.task_id]
        return None if episode.group_index == group_size - 1 else plan[min(len(episode.steps), len(plan)) - 1]

    engine = RolloutEngine(sampler, runner, ReferencePrompts(), action_override=expert_unless_last)
    start = time.perf_counter()
    _, counts = engine.play(tasks, config, seed)
    return Counter(counts), time.perf_counter() - start


def _report(label: str, metrics: Counter, wall: float) -> None:
    env, policy = metrics["time/rollout_env_s"], metrics["time/rollout_sampling_s"]
    other = max(wall - env - policy, 0.0)
    print(f"{label:>22}: {metrics['rollout/env_steps']:5d} env steps in {wall:6.1f} s wall | "
          f"env {metrics['rollout/env_steps'] / max(env, 1e-9):7.1f} steps/s of env time | "
          f"share: env {env / wall:5.1%}, sampler {policy / wall:5.1%}, other {other / wall:5.1%} | "
          f"slot occupancy {metrics['rollout/slot_occupancy']:.2f}")


def _turn_seconds(sampler: Sampler, rows: int, history: int = 1536, message: int = 128, new: int = 8) -> float:
    """One policy turn of `rows` rows alone (extend a message, decode `new` tokens) over `history`-token
    caches: what a turn costs on this machine as the batch grows."""
    strategy = Sampling(temperature=1.0)

    def turn(seed: int) -> None:
        conversation = sampler.start([[5 + (seed + r) % 1000] * history for r in range(rows)], new,
                                     cache_length=2 * history + 1024)
        jax.block_until_ready(conversation.state)
        started = time.perf_counter()
        sampler.extend(conversation, [[7] * message] * rows)
        sampler.decode(conversation, new, strategy, seed=seed, stop_token_ids=[])
        return time.perf_counter() - started

    turn(0)
    return statistics.median(turn(seed) for seed in range(1, 4))


def _overlap(sampler: Sampler, tasks, group_size: int, args, figures: dict) -> None:
    """Section 4: a slow environment's steps in turn with decoding, and overlapped with the other cohort's."""
    slow = [delayed(task, args.env_step_s) for task in tasks]
    walls = {}
    with EnvRunner(num_workers=args.slow_env_workers,
                   env_modules=(alfworld.__name__, delayed.__module__)) as runner:
        for label, overlap in (("in turn", False), ("overlapped", True)):
            _play(sampler, runner, slow, group_size, args.turns, seed=1, slots=args.slots, overlap=overlap)
            metrics, walls[label] = _play(sampler, runner, slow, group_size, args.turns, seed=1, slots=args.slots,
                                          overlap=overlap)
            _report(f"slow env, {label}", metrics, walls[label])
            if overlap:
                print(f"{'':>22}  {int(metrics['rollout/overlapped_env_steps'])} of {metrics['rollout/env_steps']} env "
                      f"steps ran while the other cohort decoded")
    figures["slow_env_step_s"], figures["slow_env_workers"] = args.env_step_s, args.slow_env_workers
    figures["slow_env_in_turn_s"] = round(walls["in turn"], 2)
    figures["slow_env_overlapped_s"] = round(walls["overlapped"], 2)
    figures["overlap_speedup"] = round(walls["in turn"] / walls["overlapped"], 2)
    print(f"environment steps overlapped with decoding: {figures['overlap_speedup']:.2f}x fewer seconds "
          f"({args.slots} slots, {args.slow_env_workers} workers, {args.env_step_s * 1e3:.0f} ms per env step)")


def _slots(sampler: Sampler, tasks, group_size: int, args, figures: dict) -> None:
    """Sections 1-3: continuous batching against waves, one turn's cost, all at once on workers and in-process."""
    turns: dict[str, int] = {}
    with EnvRunner(num_workers=args.workers, env_modules=(alfworld.__name__,)) as runner:
        for label, continuous in (("continuous", True), ("waves", False)):
            _play(sampler, runner, tasks, group_size, args.turns, seed=1, slots=args.slots, continuous=continuous)
            metrics, wall = _play(sampler, runner, tasks, group_size, args.turns, seed=1, slots=args.slots,
                                  continuous=continuous)
            _report(f"{args.slots} slots, {label}", metrics, wall)
            turns[label] = int(metrics["rollout/slot_turns"]) // args.slots
            figures[f"{label}_s"] = round(wall, 2)
            figures[f"{label}_occupancy"] = round(metrics["rollout/slot_occupancy"], 3)
        figures["continuous_speedup"] = round(figures["waves_s"] / figures["continuous_s"], 2)
        figures["turns_ratio"] = round(turns["waves"] / turns["continuous"], 2)
        print(f"continuous batching: {figures['continuous_speedup']:.2f}x fewer seconds than waves of "
              f"{args.slots} (target >= 1.5x), {figures['turns_ratio']:.2f}x fewer batched turns "
              f"({turns['continuous']} against {turns['waves']})")
        few, full = _turn_seconds(sampler, max(1, args.slots // 4)), _turn_seconds(sampler, args.slots)
        figures["turn_cost_ratio_full_vs_quarter_batch"] = round(full / few, 2)
        print(f"one turn (extend 128 + decode 8 over 1536-token caches): {args.slots // 4} rows {few * 1e3:.0f} ms, "
              f"{args.slots} rows {full * 1e3:.0f} ms ({full / few:.2f}x): a busier batch saves seconds only "
              f"where a turn's cost grows slower than its rows")
        _play(sampler, runner, tasks, group_size, args.turns, seed=1)
        metrics, wall = _play(sampler, runner, tasks, group_size, args.turns, seed=1)
        _report(f"all at once, {args.workers} workers", metrics, wall)
        figures["all_at_once_s"] = round(wall, 2)
        print(f"{'':>22}  runner: {runner.metrics}")
    serial = InProcessRunner()
    metrics, wall = _play(sampler, serial, tasks, group_size, args.turns, seed=1)
    serial.close()
    _report("all at once, in-process", metrics, wall)
    figures["all_at_once_in_process_s"] = round(wall, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--turns", type=int, default=24)
    parser.add_argument("--env_step_s", type=float, default=0.1,
                        help="section 4: the slow environment's wait per step")
    parser.add_argument("--slow_env_workers", type=int, default=8,
                        help="section 4: worker processes (waiting takes no core: one per desktop or two)")
    parser.add_argument("--sections", default="slots,overlap", help="which to run: slots (1-3), overlap (4)")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench_rollout_")
    num_tasks = 16
    group_size = max(2, args.episodes // num_tasks)
    knobs = GameKnobs(num_receptacles=10, num_distractors=4)
    tasks = [alfworld.make_task(seed, TASK_TYPES[seed % len(TASK_TYPES)], knobs, os.path.join(workdir, "games"))
             for seed in range(num_tasks)]
    sampler = _sampler(workdir)
    episodes = num_tasks * group_size
    print(f"{num_tasks} ALFWorld tasks x G={group_size} = {episodes} episodes, up to {args.turns} turns, "
          f"{os.cpu_count()} CPU cores ({time.strftime('%Y-%m-%d')})")
    figures: dict = {"bench": "rollout", "episodes": episodes, "slots": args.slots, "cpu_cores": os.cpu_count()}
    sections = set(args.sections.split(","))
    if "slots" in sections:
        _slots(sampler, tasks, group_size, args, figures)
    if "overlap" in sections:
        _overlap(sampler, tasks, group_size, args, figures)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
