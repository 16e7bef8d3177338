"""Attention kernels on this machine: `chunked` against `xla` (core/models/attention_kernels.py).

    .venv/bin/python bench/attention.py [--batch 8] [--new 2048] [--cache 8192] [--heads 4] [--kv-heads 2]

Cases, each one layer's attention as the model calls it, in float32:
- extend: `--new` queries written at the end of a `--cache`-column window (the sampler's extend of a long
  turn; the headline);
- prefill: 16 queries over a 128-column window (a short prompt; where tiling could cost most);
- train: forward and backward of a full forward over 1024 tokens (the train step's attention).

Prints seconds (median) and the program's temporary memory (XLA's own count: the scores, for `xla`)
per kernel, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlanything_jax.core.models.attention_kernels import AttentionKernel, causal_attention

KERNELS = ("xla", "chunked")


def _inputs(batch: int, new: int, window: int, heads: int, kv_heads: int, head_dim: int):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((batch, new, heads, head_dim)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((batch, window, kv_heads, head_dim)), jnp.float32) for _ in range(2))
    valid = np.ones((batch, window), bool)
    valid[:, :window // 16] = False   # some left padding of the first turn
    return q, k, v, jnp.asarray(valid)


def _measure(program, args, repeats: int) -> tuple[float, int]:
    compiled = jax.jit(program).lower(*args).compile()
    memory = compiled.memory_analysis()
    temp = int(memory.temp_size_in_bytes) if memory is not None else -1
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times), temp


def _extend(kernel: AttentionKernel):
    def program(q, k, v, valid, write_index):   # the sampler's write column is traced
        return causal_attention(q, k, v, valid, write_index, kernel)
    return program


def _train(kernel: AttentionKernel):
    def program(q, k, v, valid, upstream):
        def loss(q, k, v):
            return jnp.sum(causal_attention(q, k, v, valid, 0, kernel) * upstream)
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    return program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new", type=int, default=2048)
    parser.add_argument("--cache", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--train-length", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    dims = (args.heads, args.kv_heads, args.head_dim)
    print(f"{jax.devices()[0].platform} ({os.cpu_count()} cores), float32, heads {args.heads}, "
          f"kv heads {args.kv_heads}, head dim {args.head_dim}")
    figures = {"bench": "attention", "platform": jax.devices()[0].platform, "cores": os.cpu_count()}
    cases = {
        "extend": (_extend, (*_inputs(args.batch, args.new, args.cache, *dims), jnp.int32(args.cache - args.new)),
                   f"extend: batch {args.batch}, {args.new} new queries over a {args.cache}-column cache"),
        "prefill": (_extend, (*_inputs(args.batch, 16, 128, *dims), jnp.int32(112)),
                    f"prefill: batch {args.batch}, 16 queries over a 128-column window"),
    }
    q, k, v, valid = _inputs(max(args.batch // 2, 1), args.train_length, args.train_length, *dims)
    cases["train"] = (_train, (q, k, v, valid, jnp.ones_like(q)),
                      f"train: batch {q.shape[0]}, forward and backward over {args.train_length} tokens")
    for case, (build, inputs, title) in cases.items():
        print(title)
        seconds = {}
        for name in KERNELS:
            seconds[name], temp = _measure(build(AttentionKernel(name)), inputs, args.repeats)
            print(f"  {name:8s} {seconds[name] * 1e3:10.2f} ms   temporary memory {temp / 2 ** 20:9.1f} MiB")
            figures[f"{case}_{name}_s"] = round(seconds[name], 6)
            figures[f"{case}_{name}_temp_mib"] = round(temp / 2 ** 20, 1)
        figures[f"{case}_speedup"] = round(seconds["xla"] / seconds["chunked"], 2)
        print(f"  chunked is {figures[f'{case}_speedup']:.2f}x xla")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
