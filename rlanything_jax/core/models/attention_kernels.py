"""Which attention kernel runs, behind one switch per model (`config.model.<role>.attention_impl`).

- `xla`: dense [query, key] scores (`attention.grouped_query_attention`), the reference in tests;
- `chunked`: flash-style online softmax in plain JAX (`flash.causal_window_attention` for the decoder,
  `qwen3_vl.vision.segment_attention` for the vision tower): at most query_chunk x key_chunk scores per
  head at a time, in the training forward and backward, the sampler's prefill and extend, and the tower;
- `cudnn`: `jax.nn.dot_product_attention(implementation="cudnn")`, NVIDIA GPUs;
- `splash`: JAX's Pallas kernels, splash attention on TPUs and the Triton flash kernel on GPUs, for the
  training forward and the vision tower. Where a call does not suit a kernel (the sampler's prefill over
  its cache, whose write column is traced; lengths that are not multiples of 128; float32 for cuDNN) it
  runs `chunked`, and the reason is logged once.

A decode step (one query) is dense under every implementation: its scores are one row per head, O(window)
memory already, and dense ran faster than the chunked loop (2-core CPU, batch 8, 9 heads, window 8192:
72 ms against 134 ms).

`auto` is resolved once, when a model is built (`resolve_attention`), into an `AttentionKernel` that the
model keeps as a static attribute: it is part of the model's graphdef, hence of every jitted program's
statics (the sampler's and the train step's alike).
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp

from rlanything_jax.core import validation
from rlanything_jax.core.models import flash
from rlanything_jax.core.models import fused_attention as fused
from rlanything_jax.core.models.attention import grouped_query_attention

IMPLEMENTATIONS = ("auto", "xla", "chunked", "cudnn", "splash")
# What `auto` picks. CPU, measured by bench/attention.py (2 cores, float32, batch 8, 4 heads of 64): chunked
# ran an extend of 2048 queries over 8192 cache columns in 2.1 s against 36.7 s, with 128 MiB of temporaries
# against 6.2 GiB, a training forward and backward over 1024 tokens 3.2x faster, and a 16-token prefill
# within 0.15 ms. GPU, TPU: the platforms' fused kernels.
PLATFORM_DEFAULTS = {"cpu": "chunked", "gpu": "cudnn", "tpu": "splash"}
_NEEDS = {"cudnn": ("gpu",), "splash": ("gpu", "tpu")}

_log = logging.getLogger(__name__)
_logged: set[tuple[str, str]] = set()


@dataclasses.dataclass(frozen=True)
class AttentionKernel:
    """A resolved implementation (never "auto"). Hashable: a model keeps it as a jit static."""

    name: str = "chunked"
    platform: str = "cpu"              # where it runs: splash means the Triton kernel on "gpu"
    interpret: bool = False            # Pallas kernels in interpret mode (tests on a CPU)
    query_chunk: int | None = None     # chunked tiles; None: each user's default
    key_chunk: int | None = None

    def chunk_sizes(self) -> dict[str, int]:
        return {name: value for name, value in (("query_chunk", self.query_chunk), ("key_chunk", self.key_chunk))
                if value is not None}


def platform_name(backend: str | None = None) -> str:
    """"cpu", "gpu" or "tpu" for a JAX backend name (default: this process's)."""
    backend = backend or jax.default_backend()
    return "gpu" if backend in ("gpu", "cuda", "rocm") else backend


def resolve_attention(impl: str = "auto", platform: str | None = None, *, key: str = "attention_impl",
                      interpret: bool = False, query_chunk: int | None = None,
                      key_chunk: int | None = None) -> AttentionKernel:
    """The kernel `impl` stands for on `platform` (default: this process's). Raises `ConfigError` naming
    `key` for an unknown name, or for a kernel the platform cannot run (cudnn or splash on a CPU, unless
    `interpret`): asked for by name, it is a mistake to report, not to paper over."""
    validation.one_of(key, impl, IMPLEMENTATIONS)
    platform = platform or platform_name()
    name = PLATFORM_DEFAULTS.get(platform, "chunked") if impl == "auto" else impl
    if name in _NEEDS and platform not in _NEEDS[name] and not interpret:
        raise validation.ConfigError(
            key, f"{name} attention runs on {' or '.join(_NEEDS[name])} only, and this process runs on {platform}; "
                 f"use auto, xla or chunked", impl)
    return AttentionKernel(name=name, platform=platform, interpret=interpret, query_chunk=query_chunk,
                           key_chunk=key_chunk)


def log_fallback(kernel: AttentionKernel, reason: str) -> None:
    """Logs, once per reason (at trace time), that `kernel` runs chunked for a call."""
    if (kernel.name, reason) not in _logged:
        _logged.add((kernel.name, reason))
        _log.warning("%s attention runs chunked here: %s", kernel.name, reason)


def causal_window_mask(key_valid: jax.Array, query_columns: jax.Array) -> jax.Array:
    """[B, T, S] bool: query t sees key s when key_valid[b, s] and s <= query_columns[t]."""
    columns = jnp.arange(key_valid.shape[1])
    return key_valid.astype(jnp.bool_)[:, None, :] & (columns[None, None, :] <= query_columns[None, :, None])


def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, key_valid: jax.Array, query_start: int | jax.Array,
                     kernel: AttentionKernel) -> jax.Array:
    """Causal grouped-query attention of q [B, T, H, D] over keys and values [B, S, KV, D], key_valid [B, S]:
    query t sits at key column query_start + t (a Python int in a full forward, the traced write column in
    the sampler) and sees the valid keys at or before it. Returns [B, T, H, D]; queries that see no key
    (left padding) get finite values that nothing should read."""
    length = q.shape[1]
    columns = query_start + jnp.arange(length)
    if kernel.name == "xla" or length == 1:
        return grouped_query_attention(q, k, v, causal_window_mask(key_valid, columns))
    reason = None
    static_start = query_start if isinstance(query_start, int) else None
    if kernel.name == "cudnn":
        reason = fused.cudnn_unsupported(q, k)
        if reason is None:
            return fused.cudnn_attention(q, k, v, causal_window_mask(key_valid, columns))
    elif kernel.name == "splash" and static_start is None:
        reason = "the Pallas kernels need a static first query column (the sampler's write column is traced)"
    elif kernel.name == "splash" and kernel.platform == "gpu":
        reason = fused.triton_unsupported(length, k.shape[1], static_start)
        if reason is None:
            return fused.triton_attention(q, k, v, key_valid, causal=True, interpret=kernel.interpret)
    elif kernel.name == "splash":
        reason = fused.splash_unsupported(length, k.shape[1])
        if reason is None:
            assert static_start is not None   # the branch above took a traced start
            query_valid = jax.lax.slice_in_dim(key_valid, static_start, static_start + length, axis=1)
            return fused.splash_attention(q, k, v, query_valid, key_valid, static_start, kernel.interpret)
    if reason is not None:
        log_fallback(kernel, reason)
    return flash.causal_window_attention(q, k, v, key_valid, columns, **kernel.chunk_sizes())
