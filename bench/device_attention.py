"""Part 3 of bench/device_check.py: a prefill of the train batch and the train step under each attention
implementation this platform runs (`models.attention_kernels`), the others skipped with the reason."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from typing import Any, Callable

import jax
import numpy as np
from device_measure import Context, TrainResult, compile_step, median, memory_of, ready, run_steps, si
from flax import nnx

from rlanything_jax.core.models import Decoder
from rlanything_jax.core.sampling.sampler import Sampler, SamplerConfig

try:  # the attention switch (core/models/attention_kernels.py); part 3 is skipped without it
    from rlanything_jax.core.models import attention_kernels
except ImportError:
    attention_kernels = None


class FallbackLog(logging.Handler):
    """Collects `attention_kernels.log_fallback`'s messages (a kernel running `chunked` for some call)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def available_kernels() -> tuple[list[Any], dict[str, str]] | None:
    """The attention implementations this platform runs, and why the others are skipped; None without the switch."""
    names = getattr(attention_kernels, "IMPLEMENTATIONS", None)
    resolve = getattr(attention_kernels, "resolve_attention", None)
    if names is None or resolve is None or "attention" not in inspect.signature(Decoder.__init__).parameters:
        return None
    kernels, skipped = [], {}
    for name in names:
        if name == "auto":
            continue
        try:
            kernels.append(resolve(name))
        except Exception as error:   # ConfigError: cudnn or splash on a platform that has neither
            skipped[name] = str(error)
    return kernels, skipped


def run_optional(label: str, fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """fn() or, when it raises, None and the reason (a kernel that does not compile or run here is skipped)."""
    try:
        return fn(), None
    except Exception as error:
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
        print(f"    {label}: skipped ({reason})")
        return None, reason


def attention_part(ctx: Context, train: TrainResult, default_kernel: Any, wanted: set[str] | None,
                   budget_s: float, fallbacks: FallbackLog) -> dict[str, dict[str, Any]]:
    """Part 3: a prefill of the train batch and the train step under each attention implementation this
    platform runs. The train state goes on from part 1's (donated step after step)."""
    found = available_kernels()
    if found is None:
        print("\nattention implementations: skipped (no models.attention_kernels switch in this checkout)")
        return {}
    kernels, skipped = found
    rows, length = ctx.work["batch"], ctx.work["length"]
    repeats = min(3, ctx.work["repeats"])
    print(f"\nattention implementations: train step as above ({repeats} timed steps after one), "
          f"prefill of {rows} x {length} tokens (median of 3 after one)")
    out: dict[str, dict[str, Any]] = {}
    for name, reason in skipped.items():
        if wanted is None or name in wanted:
            out[name] = {"skipped": reason}
            print(f"  {name:>8}: skipped ({reason})")
    prompts = np.asarray(train.host_batch.input_ids).tolist()
    for kernel in kernels:
        if wanted is not None and kernel.name not in wanted:
            continue
        if time.perf_counter() - ctx.started > budget_s:
            out[kernel.name] = {"skipped": f"past --budget_s {budget_s:g}"}
            print(f"  {kernel.name:>8}: skipped (past --budget_s {budget_s:g} s)")
            continue
        seen = len(fallbacks.messages)
        # The kernel is a static attribute of the model: only the graphdef changes, the parameters stay.
        abstract = nnx.eval_shape(lambda kernel=kernel: Decoder(ctx.cfg, dtype=ctx.compute_dtype,
                                                                param_dtype=ctx.param_dtype, attention=kernel))
        graphdef = nnx.split(abstract)[0]
        entry: dict[str, Any] = {}

        def prefill(graphdef=graphdef):   # before the train steps below donate train.state.params
            sampler = Sampler(nnx.merge(graphdef, train.state.params), mesh=ctx.mesh,
                              config=SamplerConfig(max_cache_length=max(4096, 2 * length)))
            times = []
            for i in range(4):
                start = time.perf_counter()
                ready(sampler.start(prompts, 1).state)
                if i:
                    times.append(time.perf_counter() - start)
            return median(times)

        def train_steps(graphdef=graphdef):
            compiled, _ = compile_step(dataclasses.replace(train.spec, graphdef=graphdef), train.state, train.batch,
                                       ctx.mesh)
            memory = memory_of(compiled)
            if not ctx.fits(memory):
                raise MemoryError(f"needs ~{si(memory['peak_estimate'], 'B')} of {si(ctx.memory_limit, 'B')}")
            train.state, _, times = run_steps(compiled, train.state, train.batch, 1, repeats)
            return median(times)

        entry["prefill_s"], error = run_optional(f"{kernel.name} prefill", prefill)
        if error:
            entry["prefill_error"] = error
        if kernel == default_kernel:   # the program part 1 timed
            entry["train_step_s"] = train.step_s
        else:
            entry["train_step_s"], error = run_optional(f"{kernel.name} train step", train_steps)
            if error:
                entry["train_error"] = error
                if any(leaf.is_deleted() for leaf in jax.tree.leaves(train.state)):
                    out[kernel.name] = entry
                    print("  the failed step had taken the donated train state: no further implementation runs")
                    break
        notes = sorted(set(fallbacks.messages[seen:]))
        if notes:
            entry["fallbacks"] = notes
        out[kernel.name] = entry
        shown = {key: f"{entry[key] * 1e3:.1f} ms" if entry.get(key) is not None else "-"
                 for key in ("train_step_s", "prefill_s")}
        print(f"  {kernel.name:>8}: train step {shown['train_step_s']}, prefill {shown['prefill_s']}"
              + ("  (the default, timed above)" if kernel == default_kernel else "")
              + "".join(f"\n            note: {note}" for note in notes))
    return out
