"""Compile time and compiled memory of unrolled against scanned decoder layers (`model.<role>.scan_layers`).

    .venv/bin/python bench/scan_layers.py [--model qwen2.5-7b-instruct] [--layers 0] [--rows 2] [--length 256]

The model's real layer shapes (a known architecture of the planner, no weights: abstract parameters) in
float32 on one CPU device. Two programs, each compiled unrolled and scanned: the train step's loss and
gradients (`rl.train_step`, remat full, `--rows` x `--length` tokens) and the sampler's decode loop (one
window, `--rows` rows). `--layers 0` keeps the model's own depth (28 for Qwen2.5-7B); a compile's time
grows with the unrolled layers and stays flat when they are scanned. Compile times are wall-clock seconds
of `lower(...).compile()` on this machine; the temporaries are XLA:CPU's `memory_analysis()`.

Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
from flax import nnx

from rlanything_jax.core.models import Decoder
from rlanything_jax.core.models.scratch import ScratchArchitecture
from rlanything_jax.core.rl.train_state import make_optimizer
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, _micro_objective
from rlanything_jax.core.sampling import decode as decode_lib
from rlanything_jax.core.sampling.strategies import Greedy
from rlanything_jax.system.planning.architectures import role_architecture


def _compile(fn, *args) -> tuple[float, float]:
    started = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - started, compiled.memory_analysis().temp_size_in_bytes / 2 ** 30


def programs(text_config, rows: int, length: int) -> dict[str, tuple[float, float]]:
    graphdef, params = nnx.split(nnx.eval_shape(lambda: Decoder(text_config, rngs=nnx.Rngs(0))))
    sds = jax.ShapeDtypeStruct
    window = length // 2
    batch = TrainBatch(input_ids=sds((rows, length), jnp.int32), attention_mask=sds((rows, length), jnp.int32),
                       targets=sds((rows, window), jnp.int32), loss_mask=sds((rows, window), jnp.float32),
                       old_logp=sds((rows, window), jnp.float32), advantages=sds((rows,), jnp.float32))
    spec = TrainSpec(graphdef, make_optimizer({}), remat="full")
    train = _compile(jax.value_and_grad(lambda p, b: _micro_objective(p, b, spec)[0]), params, batch)
    state = jax.eval_shape(lambda: decode_lib.init_decode_state(text_config, rows, 2 * length, 64))
    decode_spec = decode_lib.DecodeSpec(graphdef=graphdef, strategy=Greedy(), stop_token_ids=(0,),
                                        window_buckets=(2 * length,))
    budget = sds((), jnp.int32)
    decode = _compile(lambda p, s, n: decode_lib.decode(p, s, n, n, spec=decode_spec), params, state, budget)
    return {"train_step": train, "decode": decode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-7b-instruct")
    parser.add_argument("--layers", type=int, default=0, help="decoder layers (0: the model's own)")
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--length", type=int, default=256)
    args = parser.parse_args()
    arch = role_architecture(f"checkpoints/{args.model}", ScratchArchitecture())
    if args.layers:
        arch = arch.with_layers(args.layers)
    depth = arch.text.num_layers
    figures: dict = {"bench": "scan_layers", "model": args.model, "layers": depth}
    for scan in (False, True):
        name = "scanned" if scan else "unrolled"
        for program, (seconds, temp_gib) in programs(arch.with_scan(scan).text, args.rows, args.length).items():
            print(f"{args.model} ({depth} layers) {program:10s} {name:8s}: compiled in {seconds:6.1f} s, "
                  f"temporaries {temp_gib:.2f} GiB", flush=True)
            figures[f"{program}_{name}_compile_s"] = round(seconds, 1)
            figures[f"{program}_{name}_temp_gib"] = round(temp_gib, 3)
    for program in ("train_step", "decode"):
        figures[f"{program}_compile_speedup"] = round(figures[f"{program}_unrolled_compile_s"]
                                                      / figures[f"{program}_scanned_compile_s"], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
