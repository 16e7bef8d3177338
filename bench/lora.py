"""LoRA against full fine-tuning on SmolLM2-135M-Instruct: seconds and memory per update, in one run.

    .venv/bin/python bench/lora.py [--rows 4] [--length 256] [--window 128] [--repeats 3] [--rank 16]
                                   [--dtype float32] [--decode]

Both learners take the same jitted PPO train step (`core/rl/train_step`, explicit shardings, donated state) on
the same batch (rows x length tokens, the loss over the last `window` positions), each timed over
`repeats` updates after a compiling one. Memory per update: the train state's bytes (LoRA: the frozen base,
the adapters and their AdamW moments; full: the parameters and their moments) and the compiled step's
temporary buffers (XLA's memory analysis). With `--decode`, also the sampler's greedy decode with the
adapters merged into its weights (what a weight swap gives it) against the same decode with the adapters
applied on the fly (the adapted model itself in the sampler). Prints a table and the ratios, and ends with
one JSON line of the figures. On a loaded machine the seconds are noisy: compare the ratio, not the times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.core import sharding  # noqa: E402
from rlanything_jax.core.models import load_pretrained  # noqa: E402
from rlanything_jax.core.models.registry import resolve_model_dir  # noqa: E402
from rlanything_jax.core.rl.phase import Learner  # noqa: E402
from rlanything_jax.core.rl.train_state import sampler_weights  # noqa: E402
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, jit_train_step  # noqa: E402
from rlanything_jax.core.sampling.sampler import Sampler  # noqa: E402
from rlanything_jax.core.sampling.strategies import Greedy  # noqa: E402

MIB = 1 << 20


def _batch(rows: int, length: int, window: int, vocab: int) -> TrainBatch:
    rng = np.random.RandomState(0)
    ids = rng.randint(0, vocab, (rows, length)).astype(np.int32)
    return TrainBatch(input_ids=ids, attention_mask=np.ones((rows, length), np.int32),
                      targets=np.roll(ids, -1, axis=1)[:, -window:], loss_mask=np.ones((rows, window), np.float32),
                      old_logp=np.full((rows, window), np.nan, np.float32),
                      advantages=rng.randn(rows).astype(np.float32))


def _bytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(tree))


def measure(label: str, learner: Learner, params, batch: TrainBatch, repeats: int) -> dict:
    state = learner.fresh_state(params)
    graphdef = learner.graphdef if state.base is None else learner.train_graphdef
    step = jit_train_step(TrainSpec(graphdef, learner.tx, kl_beta=0.0), state, batch, learner.mesh)
    temp = step.lower(state, batch).compile().memory_analysis()
    state_bytes = _bytes(state.params) + _bytes(state.opt_state) + (0 if state.base is None else _bytes(state.base))
    state, _ = step(state, batch)   # compiles
    jax.block_until_ready(state.params)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics["loss"])
        times.append(time.perf_counter() - start)
    result = {"seconds_per_update": statistics.median(times), "train_state_mib": state_bytes / MIB,
              "step_temp_mib": (temp.temp_size_in_bytes / MIB) if temp is not None else None,
              "trained_parameters": sum(x.size for x in jax.tree.leaves(state.params))}
    print(f"{label:>5}: {result['seconds_per_update']:.3f} s/update, train state {result['train_state_mib']:.0f} MiB, "
          f"step temporaries {result['step_temp_mib'] or float('nan'):.0f} MiB, "
          f"{result['trained_parameters'] / 1e6:.2f}M trained parameters", flush=True)
    return result | {"state": state}


def decode_seconds(model, prompts, new: int, repeats: int) -> float:
    sampler = Sampler(model)

    def once():
        conversation = sampler.start(prompts, new)
        return sampler.decode(conversation, new, Greedy(), stop_token_ids=[])

    once()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(once())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--decode", action="store_true")
    args = parser.parse_args()
    print(f"machine: {jax.devices()[0].platform}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"{time.strftime('%Y-%m-%d')}; load average {os.getloadavg()[0]:.1f}")
    model = load_pretrained(resolve_model_dir("package:smollm2-135m-instruct"), dtype=args.dtype)
    graphdef, params = nnx.split(model)
    mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    batch = _batch(args.rows, args.length, args.window, model.config.vocab_size)
    print(f"batch: {args.rows} rows x {args.length} tokens, loss over the last {args.window}; {args.dtype}; "
          f"LoRA rank {args.rank} on every attention and MLP projection")
    train = dict(learning_rate=1e-5, kl_beta=0.0, master_copy=False)

    def learner(rank: int) -> Learner:
        return Learner(graphdef=graphdef, train_config=dict(train, lora=dict(rank=rank, alpha=2.0 * max(rank, 1))),
                       mesh=mesh, eos_id=0, pad_id=0)

    lora_learner = learner(args.rank)
    lora = measure("lora", lora_learner, params, batch, args.repeats)   # first: it leaves `params` as they are
    lora_state = lora.pop("state")
    full = measure("full", learner(0), jax.tree.map(jnp.copy, params), batch, args.repeats)
    del full["state"]
    ratios = {"time": lora["seconds_per_update"] / full["seconds_per_update"],
              "train_state_memory": lora["train_state_mib"] / full["train_state_mib"]}
    if lora["step_temp_mib"] and full["step_temp_mib"]:
        ratios["step_temp_memory"] = lora["step_temp_mib"] / full["step_temp_mib"]
    print("LoRA / full: " + ", ".join(f"{name} {value:.2f}x" for name, value in ratios.items()))
    figures = {"bench": "lora", "cpu_cores": os.cpu_count(), "dtype": args.dtype, "rows": args.rows,
               "length": args.length, "window": args.window, "rank": args.rank, "lora": lora, "full": full,
               "ratio": ratios}
    if args.decode:
        prompts = np.random.RandomState(1).randint(0, model.config.vocab_size, (8, 16)).tolist()
        merged = decode_seconds(nnx.merge(graphdef, sampler_weights(lora_state)), prompts, 32, args.repeats)
        on_the_fly = decode_seconds(nnx.merge(lora_learner.train_graphdef, lora_state.base, lora_state.params),
                                    prompts, 32, args.repeats)
        print(f"decode 8 x 32 tokens: merged {merged:.3f} s, on the fly {on_the_fly:.3f} s "
              f"({on_the_fly / merged:.2f}x the merged time)")
        figures["decode"] = {"merged_s": merged, "on_the_fly_s": on_the_fly,
                             "on_the_fly_over_merged": on_the_fly / merged}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
