"""What bench/device_check.py's parts share: the context they run in (device, shapes, workload), part 1's result
that part 3 carries on, XLA's figures of a compiled program (memory, FLOPs), and timing of train steps and of
greedy decode."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any

import jax
import numpy as np

from rlanything_jax.core.models import Decoder, DecoderConfig
from rlanything_jax.core.rl.train_step import TrainBatch, TrainSpec, jit_train_step
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig, window_buckets
from rlanything_jax.core.sampling.strategies import Greedy

# ---------------------------------------------------------------- what the parts share


@dataclasses.dataclass
class Context:
    """What every part uses: the model's shape and dtypes, the device and its figures, the workload."""

    cfg: DecoderConfig
    mesh: Any
    compute_dtype: Any
    param_dtype: Any
    peak_tflops: float | None
    hbm_gbps: float | None
    memory_limit: int | None
    work: dict[str, int]
    started: float

    def fits(self, memory: dict[str, int] | None) -> bool:
        """Whether a compiled program's estimated peak fits the device (unknown sizes or limit: assumed so)."""
        return memory is None or self.memory_limit is None or memory["peak_estimate"] <= 0.95 * self.memory_limit


@dataclasses.dataclass
class TrainResult:
    state: Any            # the train state after the timed steps (part 3 carries it on)
    spec: TrainSpec
    batch: TrainBatch     # on the device
    host_batch: TrainBatch
    remat: str
    compile_s: float
    step_s: float
    loss: float
    flops: dict[str, float]
    xla_flops: float | None
    memory: dict[str, int] | None
    mfu: float | None


# ---------------------------------------------------------------- compiled programs


def memory_of(compiled: Any) -> dict[str, int] | None:
    """XLA's buffer sizes for a compiled program; `peak_estimate` = arguments + outputs - aliased + temporaries."""
    try:
        stats = compiled.memory_analysis()
    except Exception:   # some backends do not implement it
        return None
    if stats is None:
        return None
    names = ("argument", "output", "alias", "temp", "generated_code")
    out = {name: int(getattr(stats, f"{name}_size_in_bytes", 0) or 0) for name in names}
    out["peak_estimate"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
    return out


def xla_flops(compiled: Any) -> float | None:
    """XLA's own FLOP count of a compiled program (a while loop's body counted once), when the backend gives it."""
    try:
        cost = compiled.cost_analysis()
    except Exception:
        return None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    flops = (cost or {}).get("flops")
    return float(flops) if flops and flops > 0 else None


def device_memory_limit(device: jax.Device) -> int | None:
    try:
        stats = device.memory_stats()
    except Exception:
        return None
    return int(stats["bytes_limit"]) if stats and stats.get("bytes_limit") else None


# ---------------------------------------------------------------- timing


def ready(tree) -> None:
    jax.block_until_ready(jax.tree.leaves(tree))


def median(times: list[float]) -> float:
    return statistics.median(times)


def si(value: float, unit: str) -> str:
    """1.23e12 -> '1.23 T<unit>' (the prefix that suits: smoke shapes are a million times smaller)."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def random_batch(cfg: DecoderConfig, rows: int, length: int, window: int, seed: int = 0) -> TrainBatch:
    """A host batch of random tokens, its loss window the last `window` positions (the response), all of whose
    targets but the last count; old and reference log-probabilities near a random model's -log(vocab)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, cfg.vocab_size, (rows, length), dtype=np.int32)
    targets = np.roll(ids, -1, axis=1)[:, -window:]
    loss_mask = np.ones((rows, window), np.float32)
    loss_mask[:, -1] = 0   # the last position's target is past the row
    old_logp = (-math.log(cfg.vocab_size) + 0.1 * rng.standard_normal((rows, window))).astype(np.float32)
    return TrainBatch(input_ids=ids, attention_mask=np.ones_like(ids), targets=targets, loss_mask=loss_mask,
                      old_logp=old_logp, advantages=rng.standard_normal(rows).astype(np.float32),
                      ref_logp=old_logp.copy())


def compile_step(spec: TrainSpec, state, batch, mesh) -> tuple[Any, float]:
    start = time.perf_counter()
    compiled = jit_train_step(spec, state, batch, mesh).lower(state, batch).compile()
    return compiled, time.perf_counter() - start


def run_steps(compiled, state, batch, warmup: int, repeats: int) -> tuple[Any, dict, list[float]]:
    """`repeats` timed steps after `warmup` untimed ones; the state is donated and carried on."""
    times, metrics = [], None
    for i in range(warmup + repeats):
        start = time.perf_counter()
        state, metrics = compiled(state, batch)
        ready((state, metrics))
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return state, metrics, times


def time_decode(model: Decoder, mesh, rows: int, prompt: int, new: int, repeats: int) -> dict[str, Any]:
    """Greedy prefill + decode of `rows` random prompts, `new` tokens each (no stop token), timed apart."""
    sampler = Sampler(model, mesh=mesh, config=SamplerConfig(max_cache_length=max(4096, 2 * (prompt + new))))
    rng = np.random.default_rng(1)
    prompts = rng.integers(3, model.config.vocab_size, (rows, prompt)).tolist()
    prefill, decode = [], []
    for i in range(1 + repeats):   # the first call compiles
        start = time.perf_counter()
        conversation = sampler.start(prompts, new)
        ready(conversation.state)
        middle = time.perf_counter()
        completions = sampler.decode(conversation, new, Greedy(), stop_token_ids=[])
        end = time.perf_counter()
        if any(len(c.token_ids) != new for c in completions):
            raise RuntimeError(f"decode gave {[len(c.token_ids) for c in completions]} tokens, not {new} each")
        if i:
            prefill.append(middle - start)
            decode.append(end - middle)
    cache = conversation.cache_length
    # The decode step for column c attends over the smallest window bucket holding c + 1 columns.
    windows = window_buckets(cache, sampler.config.min_window)
    read_columns = statistics.mean(next(w for w in windows if w >= c + 1) for c in range(prompt, prompt + new))
    return {"prefill_s": median(prefill), "decode_s": median(decode), "tokens_per_s": rows * new / median(decode),
            "cache_length": cache, "mean_window_columns": read_columns, "compilations": dict(sampler.compilations)}
