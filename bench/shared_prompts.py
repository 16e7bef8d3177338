"""`train.<role>.share_prompts` on the reward model's data of configs/learn.py: one update, plain against shared.

    .venv/bin/python bench/shared_prompts.py [--groups 4] [--judgments 3] [--prompt 300] [--response 10]
                                             [--repeats 3]

SmolLM2-135M-Instruct (package:smollm2-135m-instruct, float32) with learn.py's reward-model training: LoRA
rank 16 (alpha 32) on every attention and MLP projection, remat "full", token-mean aggregation, micro-batches
of 2. The update's examples are what judging a step m times gives: `groups` prompts of `prompt` tokens, each
with `judgments` responses of `response` tokens (the last an EOS). Both layouts come from the phase's own code
(`core/rl/data.prepare_examples`, then `collate` with `phase.update_plan`'s micro-batches, or
`core/rl/shared_prompts.collate_update`) and run through `Learner`'s compiled step from the same fresh state; each is
timed over `repeats` updates after a compiling one, the two alternating. The first update's losses are printed
side by side (they agree to float32 rounding). Prints the ratio and ends with one JSON line. On a loaded
machine the seconds are noisy: compare the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.core import sharding  # noqa: E402
from rlanything_jax.core.models import load_pretrained  # noqa: E402
from rlanything_jax.core.models.registry import resolve_model_dir  # noqa: E402
from rlanything_jax.core.rl.data import DataConfig, Example, collate, prepare_examples  # noqa: E402
from rlanything_jax.core.rl.phase import Learner, update_plan  # noqa: E402
from rlanything_jax.core.rl.shared_prompts import collate_update, sharing_counts  # noqa: E402

LORA = {"rank": 16, "alpha": 32.0, "dropout": 0.0,
        "targets": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
TRAIN = dict(learning_rate=1e-4, micro_batch_size=2, max_prompt_tokens=1024, max_response_tokens=128,
             aggregation="token_mean", remat="full", updates_per_step=1, lora=LORA)
EOS = 2


def judgments(groups: int, m: int, prompt: int, response: int, vocab: int) -> list[Example]:
    rng = np.random.RandomState(0)
    out = []
    for _ in range(groups):
        ids = list(rng.randint(3, vocab, size=prompt))
        for _ in range(m):
            answer = list(rng.randint(3, vocab, size=response - 1)) + [EOS]
            out.append(Example(ids, answer, float(rng.randn()), list(-2.0 + 0.1 * rng.randn(response))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--judgments", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--response", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {jax.devices()[0].platform}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"{time.strftime('%Y-%m-%d')}; load average {os.getloadavg()[0]:.1f}", flush=True)
    model = load_pretrained(resolve_model_dir("package:smollm2-135m-instruct"), dtype="float32")
    graphdef, params = nnx.split(model)
    mesh = sharding.build_mesh({}, devices=jax.devices()[:1])
    micro_batch_size = TRAIN["micro_batch_size"]
    learner = Learner(graphdef=graphdef, train_config=TRAIN, mesh=mesh, eos_id=EOS, pad_id=0)
    examples = judgments(args.groups, args.judgments, args.prompt, args.response, model.config.vocab_size)
    _, num_micro = update_plan(len(examples), 1, micro_batch_size)
    cfg = DataConfig(batch_size=num_micro * micro_batch_size, max_prompt_tokens=TRAIN["max_prompt_tokens"],
                     max_response_tokens=TRAIN["max_response_tokens"], eos_id=EOS, aggregation="token_mean")
    kept, _ = prepare_examples(examples, cfg)
    plain = collate(kept, cfg)
    shared = collate_update(kept, cfg, micro_batch_size)
    assert shared.prefix_ids is not None and shared.prefix_index is not None
    shared_micro = shared.prefix_ids.shape[0] // micro_batch_size
    layouts = {"plain": (plain, num_micro), "shared": (shared, shared_micro)}
    shapes = {"plain": f"{num_micro} micro-batches x {micro_batch_size} rows of {plain.input_ids.shape[1]} tokens",
              "shared": (f"{shared_micro} micro-batches x ({micro_batch_size} prefixes of {shared.prefix_ids.shape[1]}"
                         f" tokens + {shared.input_ids.shape[0] // shared_micro} rows of {shared.input_ids.shape[1]})")}
    print(f"update: {args.groups} prompts x {args.judgments} judgments, prompt {args.prompt} + response "
          f"{args.response} tokens; SmolLM2-135M-Instruct float32, LoRA rank 16, remat full, micro-batch 2")
    for name in layouts:
        print(f"  {name}: {shapes[name]}")
    states, steps, batches, losses = {}, {}, {}, {}
    for name, (batch, micro) in layouts.items():
        states[name] = learner.fresh_state(params)
        batches[name] = learner.place(batch)
        steps[name] = learner._step_fn(states[name], batches[name], micro)
        start = time.perf_counter()
        states[name], metrics = steps[name](states[name], batches[name])   # compiles
        losses[name] = float(jax.device_get(metrics["loss"]))
        print(f"  {name}: first update (with compilation) {time.perf_counter() - start:.1f} s, loss "
              f"{losses[name]:.6f}", flush=True)
    times: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(args.repeats):
        for name in layouts:
            start = time.perf_counter()
            states[name], metrics = steps[name](states[name], batches[name])
            jax.block_until_ready(metrics["loss"])
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    for name in layouts:
        print(f"  {name}: {median[name]:.2f} s/update (median of {args.repeats}; "
              f"{min(times[name]):.2f}-{max(times[name]):.2f})")
    ratio = median["plain"] / median["shared"]
    print(f"plain / shared: {ratio:.2f}x (of minima {min(times['plain']) / min(times['shared']):.2f}x)")
    print(json.dumps({"bench": "shared_prompts", "cpu_cores": os.cpu_count(), "groups": args.groups,
                      "judgments": args.judgments, "prompt": args.prompt, "response": args.response,
                      "repeats": args.repeats, "layouts": shapes, "first_loss": losses, "times_s": times,
                      "median_s": median, "ratio": ratio, **sharing_counts(shared)}))


if __name__ == "__main__":
    main()
