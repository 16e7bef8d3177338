"""Reward-model judging: rows refilled as judgments end (continuous batching) against fixed chunks.

    .venv/bin/python bench/judging.py [--prompts 64] [--judgments 3] [--rows 24] [--max-new 256]

A tiny random Qwen2-shaped reward model (vocabulary 1,024) judges `--prompts` step prompts of 128-512 tokens,
m = `--judgments` times each, at most `--rows` generations at once (`JudgeConfig.batch_size`). Sampled at
temperature 1 with 24 of the 1,024 ids as stop tokens, a judgment ends after a geometric number of tokens
(mean about 40, capped at `--max-new`), as real judgments vary from a sentence to a long analysis. Fixed
chunks decode until their longest judgment ends; refilled rows take the next prompts every 16 steps. Each
mode runs twice and the second run is timed (programs compiled, as in a long run).

Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.agents.judging import JudgeConfig, sample_each  # noqa: E402
from rlanything_jax.core.models import Decoder, DecoderConfig  # noqa: E402
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig  # noqa: E402
from rlanything_jax.core.sampling.slots import occupancy  # noqa: E402

STOP_IDS = tuple(range(1000, 1024))


class _Ids:
    """Token ids as text: the bench needs stop ids, not words."""

    stop_token_ids = STOP_IDS

    def decode(self, ids):
        return " ".join(map(str, ids))


def _run(sampler, prompts, config) -> tuple[float, Counter, list]:
    sample_each(sampler, prompts, config, 0, "judge")   # compile
    started = time.perf_counter()
    out, metrics = sample_each(sampler, prompts, config, 0, "judge")
    return time.perf_counter() - started, Counter(metrics), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--judgments", type=int, default=3)
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--max-new", type=int, default=256)
    args = parser.parse_args()
    cfg = DecoderConfig(model_type="qwen2", vocab_size=1024, hidden_size=64, intermediate_size=128, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=16, tie_word_embeddings=True, qkv_bias=True)
    sampler = Sampler(Decoder(cfg, rngs=nnx.Rngs(0)), _Ids(), config=SamplerConfig(max_cache_length=2048))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 1000, size=int(n)).tolist() for n in rng.integers(128, 513, size=args.prompts)]
    print(f"{jax.devices()[0].device_kind}, {os.cpu_count()} cores; {args.prompts} prompts x {args.judgments} "
          f"judgments through {args.rows} rows, up to {args.max_new} new tokens")
    figures = {}
    for label, continuous in (("continuous", True), ("chunks", False)):
        config = JudgeConfig(num_judgments=args.judgments, max_new_tokens=args.max_new, temperature=1.0, top_p=1.0,
                             batch_size=args.rows, continuous_batching=continuous)
        seconds, metrics, out = _run(sampler, prompts, config)
        tokens = sum(len(c.token_ids) for completions in out for c in completions)
        line = f"{label:>10}: {seconds:6.2f} s, {tokens} tokens, {tokens / seconds:7.0f} tokens/s"
        if continuous:
            figures["occupancy"] = round(occupancy(metrics, "judge"), 3)
            line += (f", occupancy {figures['occupancy']:.2f}, {metrics['judge/joined_rows']} rows joined, "
                     f"{metrics['judge/repacks']} repacks")
        print(line)
        figures[f"{label}_s"] = round(seconds, 2)
    figures["speedup"] = round(figures["chunks_s"] / figures["continuous_s"], 2)
    print(f"continuous batching: {figures['speedup']:.2f}x the chunks' speed")
    print(json.dumps({"bench": "judging", **figures}))


if __name__ == "__main__":
    main()
