"""Accelerator check: the policy train step and the sampler of a Qwen2.5-shaped model on one GPU or TPU chip.

    bash bench/device_check.sh [--shape=0.5b|1.5b] [--smoke] [--peak_tflops=T] [--hbm_gbps=B]
                               [--remat=auto|none|dots|full] [--attention=auto|xla|chunked|cudnn|splash]
                               [--kernels=all|none|xla,chunked,...]

On the first local device it builds a `models.Decoder` with random weights in bfloat16, shaped like
Qwen2.5-0.5B-Instruct (`--shape=0.5b`, the default) or Qwen2.5-1.5B (`--shape=1.5b`): qkv biases, tied
embeddings, rope theta 1e6. It then times:
1. The policy train step (`core/rl/train_step.jit_train_step`: PPO-clip + k3 KL against given reference
   log-probabilities, AdamW after global-norm clipping, one update, no micro-batching) on a batch of
   8 x 1024 tokens whose last 512 positions are the loss window: the median of 5 steps after 2 warm-up
   steps. It prints the model FLOPs, the achieved FLOP/s, the MFU against the chip's dense bf16 peak
   (`TPU_CHIPS`, `GPU_CHIPS`) and the compiled step's `memory_analysis()`. `--remat=auto` takes the first
   of none, dots, full whose compiled step fits the device's memory.
   Model FLOPs count what the step needs, not what XLA runs. The weights cost 6 x (matmul parameters) per
   token (2 forward, 4 backward): the decoder layers over all 1024 positions, except that the last layer's
   queries, output projection and MLP and the output layer (the tied embedding) run over the 512-position
   window only, as `token_logprobs` does. The attention score and value matmuls add 3 x 4 x head_dim per
   head and causally attended (query, key) pair. Norms, rotary, softmax, the loss, the optimizer and
   remat's recomputation are left out. The plain 6 x parameters x tokens and XLA's own count are printed
   next to it.
2. Greedy decode with the `Sampler` at batch 1 and batch 32 (prompt 128, 256 new tokens, no stop token):
   prefill and decode timed apart, the median of 3 after a compiling call; tokens/s counts the decode. The
   HBM-bandwidth roofline: a decode step reads every parameter and each row's live KV cache once, so
   tokens/s <= batch x bandwidth / (parameter bytes + KV bytes), with the mean live length over the decode
   (the prompt plus half the new tokens). Our decode reads power-of-two windows of the cache, up to 2x the
   live columns; the printout shows how many. (Decode runs before the train step, which donates the
   parameters the model holds.)
3. Where `models.attention_kernels` is there: a prefill of the train batch (8 x 1024 tokens) and the train
   step once per attention implementation this platform runs (`xla`, `chunked`, `cudnn`, `splash`), the
   others skipped with the reason; calls that an implementation hands to `chunked` are listed.
It ends with one JSON line: {"bench": "device_check", "device_kind": ..., "train_step_s": ..., "mfu": ...}.

It is meant to finish in under 5 minutes on one chip, compilation included: part 3 starts no further
implementation once `--budget_s` (default 180) seconds have passed, and `--kernels=none` leaves it out.
On a CPU it runs tiny shapes (`--smoke`: 2 layers of hidden 64, vocab 1024, a train batch of 2 x 64
tokens, 16 new tokens; well under a minute), with or without the flag: the full shapes would take an hour
there. There parameters and compute are float32: XLA's CPU runtime has no bfloat16 matmul with a float32
result, which the output layer's backward uses. A CPU is not in the tables: its MFU and roofline fractions
are null unless `--peak_tflops` and `--hbm_gbps` are given, as for any chip the tables do not list.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from rlanything_jax.core import sharding  # noqa: E402
from rlanything_jax.core.models import Decoder, DecoderConfig, RopeConfig  # noqa: E402
from rlanything_jax.core.rl.train_state import init_train_state, make_optimizer, train_state_shardings  # noqa: E402
from rlanything_jax.core.rl.train_step import TrainSpec, batch_shardings  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # bench/, also when loaded by file path
from device_attention import FallbackLog, attention_kernels, attention_part  # noqa: E402
from device_measure import (  # noqa: E402
    Context,
    TrainResult,
    compile_step,
    device_memory_limit,
    median,
    memory_of,
    random_batch,
    run_steps,
    si,
    time_decode,
    xla_flops,
)
from device_specs import chip_for, roofline, train_step_flops  # noqa: E402

# Qwen2.5 shapes (their config.json); all tie the embeddings, have q/k/v biases and rope theta 1e6.
SHAPES = {
    "0.5b": dict(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, head_dim=64, intermediate_size=4864,
                 vocab_size=151936),
    "1.5b": dict(hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2, head_dim=128,
                 intermediate_size=8960, vocab_size=151936),
}
SMOKE_SHAPE = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128,
                   vocab_size=1024)
# Workload defaults of a real run and of --smoke; each has its flag.
WORKLOAD = dict(batch=8, length=1024, window=512, prompt=128, new=256, decode_batch=32, repeats=5)
SMOKE_WORKLOAD = dict(batch=2, length=64, window=32, prompt=16, new=16, decode_batch=4, repeats=2)
WARMUP_STEPS = 2       # the first compiles nothing (the step is compiled ahead) but allocates and autotunes
DECODE_REPEATS = 3
ADAMW = dict(learning_rate=1e-6, adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8, weight_decay=0.01, max_grad_norm=1.0)
CLIP_EPS, KL_BETA = 0.2, 0.04


def decoder_config(shape: dict[str, int]) -> DecoderConfig:
    return DecoderConfig(model_type="qwen2", rope=RopeConfig(theta=1e6), tie_word_embeddings=True, qkv_bias=True,
                         rms_norm_eps=1e-6, max_position_embeddings=32768, **shape)


# ---------------------------------------------------------------- the parts


def decode_part(ctx: Context, model: Decoder, param_bytes: int) -> dict[str, dict[str, Any]]:
    """Part 2: batch-1 and batched greedy decode against the HBM roofline."""
    prompt, new = ctx.work["prompt"], ctx.work["new"]
    print(f"\ndecode: greedy, prompt {prompt} + {new} new tokens, no stop token; median of {DECODE_REPEATS} "
          "after a compiling call")
    decodes = {}
    for label, rows in (("b1", 1), ("batched", ctx.work["decode_batch"])):
        result = time_decode(model, ctx.mesh, rows, prompt, new, DECODE_REPEATS)
        # The sampler's cache is in the compute dtype.
        bound = roofline(param_bytes, ctx.cfg, ctx.compute_dtype.itemsize, rows, prompt, new, ctx.hbm_gbps)
        result["roofline"] = bound
        result["roofline_fraction"] = result["tokens_per_s"] / bound["tokens_per_s"] if bound["tokens_per_s"] else None
        decodes[label] = result
        step_s = result["decode_s"] / new
        line = (f"  batch {rows:>3}: {result['tokens_per_s']:10.1f} tokens/s ({step_s * 1e3:.2f} ms a step; prefill "
                f"{result['prefill_s'] * 1e3:.1f} ms); a step must read {si(bound['bytes_per_step'], 'B')} "
                f"(parameters + {si(bound['kv_bytes_per_step'], 'B')} live KV): "
                f"{si(bound['bytes_per_step'] / step_s, 'B/s')}")
        if bound["tokens_per_s"]:
            line += (f"\n             roofline {bound['tokens_per_s']:.1f} tokens/s at {ctx.hbm_gbps:g} GB/s: "
                     f"{result['roofline_fraction']:.1%} of it")
        line += (f"\n             (our decode reads cache windows of {result['mean_window_columns']:.0f} columns on "
                 f"average against {prompt + (new + 1) / 2:.0f} live; cache {result['cache_length']})")
        print(line)
    return decodes


def train_part(ctx: Context, graphdef: nnx.GraphDef, params: nnx.State, remat_choice: str) -> TrainResult:
    """Part 1: the policy train step, its model FLOPs, MFU and compiled memory."""
    rows, length, window, repeats = (ctx.work[key] for key in ("batch", "length", "window", "repeats"))
    rules = sharding.DEFAULT_LOGICAL_AXIS_RULES
    tx = make_optimizer(ADAMW)
    state = init_train_state(params, tx)
    state = jax.device_put(state, train_state_shardings(state, tx, ctx.mesh, rules))
    host_batch = random_batch(ctx.cfg, rows, length, window)
    batch = jax.device_put(host_batch, batch_shardings(host_batch, ctx.mesh, rules))
    print(f"\ntrain step: batch {rows} x {length} tokens, loss window {window}, PPO-clip {CLIP_EPS} + k3 KL "
          f"{KL_BETA}, AdamW + clip 1.0, one update; median of {repeats} after {WARMUP_STEPS} warm-up steps")
    candidates = ["none", "dots", "full"] if remat_choice == "auto" else [remat_choice]
    for remat in candidates:
        spec = TrainSpec(graphdef, tx, clip_eps=CLIP_EPS, kl_beta=KL_BETA, aggregation="sequence_mean",
                         num_micro_batches=1, remat=remat)
        last = remat == candidates[-1]
        try:
            compiled, compile_s = compile_step(spec, state, batch, ctx.mesh)
        except Exception as error:   # a TPU refuses at compile time a program that does not fit
            if last:
                raise
            print(f"  remat {remat}: does not compile ({str(error).splitlines()[0][:200]}); trying the next policy")
            continue
        memory = memory_of(compiled)
        if last or ctx.fits(memory):
            break
        print(f"  remat {remat}: needs ~{si(memory['peak_estimate'], 'B')} of {si(ctx.memory_limit, 'B')}; "
              "trying the next policy")
    state, metrics, times = run_steps(compiled, state, batch, WARMUP_STEPS, repeats)
    step_s = median(times)
    flops = train_step_flops(ctx.cfg, rows, length, window)
    achieved = flops["model"] / step_s
    mfu = achieved / (ctx.peak_tflops * 1e12) if ctx.peak_tflops else None
    hardware = xla_flops(compiled)
    loss = float(metrics["loss"])
    print(f"  remat {remat}, compiled in {compile_s:.1f} s; step {step_s * 1e3:.1f} ms "
          f"[{min(times) * 1e3:.1f}-{max(times) * 1e3:.1f}], loss {loss:.4f}")
    print(f"  model FLOPs {si(flops['model'], 'FLOP')} (weights {si(flops['weights'], 'FLOP')} + attention "
          f"{si(flops['attention'], 'FLOP')}; plain 6 x params x tokens: {si(flops['six_n_d'], 'FLOP')})"
          + (f"; XLA counts {si(hardware, 'FLOP')} (elementwise work in, a loop body once)" if hardware else ""))
    utilization = (f"{mfu:.1%} of {ctx.peak_tflops:g} TFLOP/s" if mfu is not None
                   else "n/a (peak unknown: pass --peak_tflops)")
    print(f"  achieved {si(achieved, 'FLOP/s')}: MFU {utilization}")
    if memory:
        print("  memory_analysis: " + ", ".join(f"{name} {si(value, 'B')}" for name, value in memory.items())
              + (f" (device limit {si(ctx.memory_limit, 'B')})" if ctx.memory_limit else ""))
    return TrainResult(state=state, spec=spec, batch=batch, host_batch=host_batch, remat=remat, compile_s=compile_s,
                       step_s=step_s, loss=loss, flops=flops, xla_flops=hardware, memory=memory, mfu=mfu)


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (2 layers, vocab 1024): a CPU test")
    parser.add_argument("--peak_tflops", type=float, help="the chip's dense bf16 peak, for a chip not in the table")
    parser.add_argument("--hbm_gbps", type=float, help="the chip's HBM bandwidth (GB/s), overriding the table")
    parser.add_argument("--param_dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="parameters (and AdamW moments); compute is bfloat16 (on a CPU both are float32)")
    parser.add_argument("--remat", choices=("auto", "none", "dots", "full"), default="auto",
                        help="auto: the first of none, dots, full whose compiled step fits the device's memory")
    parser.add_argument("--batch", type=int, help=f"train rows (default {WORKLOAD['batch']})")
    parser.add_argument("--length", type=int, help=f"train tokens per row (default {WORKLOAD['length']})")
    parser.add_argument("--window", type=int, help=f"loss window: the last positions (default {WORKLOAD['window']})")
    parser.add_argument("--prompt", type=int, help=f"decode prompt tokens (default {WORKLOAD['prompt']})")
    parser.add_argument("--new", type=int, help=f"decode new tokens (default {WORKLOAD['new']})")
    parser.add_argument("--decode_batch", type=int,
                        help=f"the batched decode's rows (default {WORKLOAD['decode_batch']})")
    parser.add_argument("--repeats", type=int, help=f"timed train steps (default {WORKLOAD['repeats']})")
    parser.add_argument("--attention", default="auto",
                        help="the attention implementation of parts 1 and 2 (auto: the platform's default)")
    parser.add_argument("--kernels", default="all",
                        help="attention implementations to compare: all, none, or a comma list (xla,chunked,...)")
    parser.add_argument("--budget_s", type=float, default=180.0,
                        help="no further attention implementation starts after this many seconds")
    args = parser.parse_args()
    started = time.perf_counter()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    fallbacks = FallbackLog()
    logging.getLogger("rlanything_jax.core.models.attention_kernels").addHandler(fallbacks)

    device = jax.local_devices()[0]
    kind, platform = device.device_kind, device.platform
    smoke = args.smoke
    if platform == "cpu" and not smoke:
        print("device_check is meant for a GPU or TPU; on this CPU it runs the --smoke shapes instead")
        smoke = True
    defaults = SMOKE_WORKLOAD if smoke else WORKLOAD
    work = {key: getattr(args, key) if getattr(args, key) is not None else value for key, value in defaults.items()}
    if not 0 < work["window"] < work["length"]:
        parser.error(f"--window must be in [1, length - 1], got {work['window']} of {work['length']}")
    cfg = decoder_config(SMOKE_SHAPE if smoke else SHAPES[args.shape])
    shape_name = f"{args.shape}-smoke" if smoke else args.shape

    chip = chip_for(kind)
    compute_dtype, param_dtype = jnp.dtype(jnp.bfloat16), jnp.dtype(args.param_dtype)
    if platform == "cpu":   # XLA's CPU runtime has no bf16 x bf16 -> f32 matmul (the output layer's backward)
        compute_dtype = param_dtype = jnp.dtype(jnp.float32)
        print("on a CPU, parameters and compute are float32")
    ctx = Context(cfg=cfg, mesh=sharding.build_mesh({}, devices=[device]), compute_dtype=compute_dtype,
                  param_dtype=param_dtype, peak_tflops=args.peak_tflops or (chip.peak_tflops if chip else None),
                  hbm_gbps=args.hbm_gbps or (chip.hbm_gbps if chip else None),
                  memory_limit=device_memory_limit(device), work=work, started=started)
    print(f"device: {kind} ({platform}; table: {chip.name if chip else 'not listed'}), jax {jax.__version__}; "
          f"peak {f'{ctx.peak_tflops:g} TFLOP/s bf16' if ctx.peak_tflops else 'unknown (pass --peak_tflops)'}, "
          f"HBM {f'{ctx.hbm_gbps:g} GB/s' if ctx.hbm_gbps else 'unknown (pass --hbm_gbps)'}"
          + (f", {si(ctx.memory_limit, 'B')} usable" if ctx.memory_limit else ""))

    chosen = {}
    if args.attention != "auto":   # e.g. chunked, should the platform's default kernel fail here
        if attention_kernels is None:
            parser.error("--attention needs models.attention_kernels, which this checkout lacks")
        try:
            chosen["attention"] = attention_kernels.resolve_attention(args.attention, key="--attention")
        except ValueError as error:   # ConfigError: an unknown name, or a kernel this platform lacks
            parser.error(str(error))
    with jax.default_device(device):
        model = Decoder(cfg, dtype=compute_dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0), **chosen)
    graphdef, params = nnx.split(model)
    n_params = sum(x.size for x in jax.tree.leaves(params))
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    default_kernel = getattr(model, "attention_kernel", None)   # absent before the attention switch
    attention_name = default_kernel.name if default_kernel else None
    print(f"model: Qwen2.5-{shape_name} shape, {cfg.num_layers} layers, hidden {cfg.hidden_size}, heads "
          f"{cfg.num_heads}/{cfg.num_kv_heads} x {cfg.head_dim}, MLP {cfg.intermediate_size}, vocab "
          f"{cfg.vocab_size}; {si(n_params, '')} parameters ({si(param_bytes, 'B')} in {param_dtype.name}), "
          f"compute {compute_dtype.name}, random weights; attention {attention_name}")

    # Decode first: the train step donates the parameters that the model (and so its samplers) hold.
    decodes = decode_part(ctx, model, param_bytes)
    train = train_part(ctx, graphdef, params, args.remat)
    if args.kernels == "none":
        kernels = {}
        print("\nattention implementations: not compared (--kernels=none)")
    elif attention_kernels is None:
        kernels = {}
        print("\nattention implementations: skipped (no models.attention_kernels in this checkout)")
    else:
        wanted = None if args.kernels == "all" else set(args.kernels.split(","))
        kernels = attention_part(ctx, train, default_kernel, wanted, args.budget_s, fallbacks)

    total_s = time.perf_counter() - started
    print(f"\ntotal {total_s:.0f} s")
    b1, batched = decodes["b1"], decodes["batched"]
    print(json.dumps({
        "bench": "device_check", "device_kind": kind, "platform": platform, "chip": chip.name if chip else None,
        "shape": shape_name, "smoke": smoke, "params": int(n_params), "param_dtype": param_dtype.name,
        "compute_dtype": compute_dtype.name, "peak_tflops": ctx.peak_tflops, "hbm_gbps": ctx.hbm_gbps,
        "attention": attention_name,
        "train_batch": [work["batch"], work["length"]], "train_window": work["window"], "remat": train.remat,
        "train_compile_s": train.compile_s, "train_step_s": train.step_s, "train_loss": train.loss,
        "model_flops": train.flops["model"], "flops_6nd": train.flops["six_n_d"], "xla_flops": train.xla_flops,
        "achieved_tflops": train.flops["model"] / train.step_s / 1e12, "mfu": train.mfu,
        "train_memory_bytes": train.memory,
        "decode_prompt": work["prompt"], "decode_new": work["new"],
        "decode_b1_tokens_per_s": b1["tokens_per_s"], "decode_b1_step_ms": b1["decode_s"] / work["new"] * 1e3,
        "prefill_b1_s": b1["prefill_s"], "b1_roofline_tokens_per_s": b1["roofline"]["tokens_per_s"],
        "b1_roofline_fraction": b1["roofline_fraction"],
        "decode_batched_rows": work["decode_batch"], "decode_batched_tokens_per_s": batched["tokens_per_s"],
        "batched_roofline_fraction": batched["roofline_fraction"],
        "attention_kernels": kernels, "total_s": total_s,
    }))


if __name__ == "__main__":
    main()
