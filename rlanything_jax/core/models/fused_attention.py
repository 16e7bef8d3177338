"""Accelerator attention kernels from JAX: cuDNN's fused attention (GPU) and the Pallas flash kernels
(splash on TPU, the Triton flash kernel on GPU).

Each has a `*_unsupported(...)` check returning why it cannot take a call (None when it can), so that
`attention_kernels` falls back to the chunked formulation with that reason logged instead of failing
inside a kernel. None of them runs on a CPU except the Pallas ones in interpret mode (tests).

Masks: cuDNN takes our boolean mask (as a [B, 1, T, S] bias: per batch, not per head, and no float32
scores); splash takes a static causal mask with segment ids (valid tokens 1, padding 0, so a padding
query attends padding keys at or before it and never has an empty row); the Triton kernel takes
segment ids shared by queries and keys, hence query and key positions must coincide.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
_SPLASH_BLOCKS = (512, 256, 128)   # splash tiles must divide the lengths; the largest that does
_TRITON_BLOCK = 128


# ---------------------------------------------------------------- cuDNN

def cudnn_unsupported(q: jax.Array, k: jax.Array) -> str | None:
    """Why cuDNN's flash attention cannot take q [B, T, H, D], k [B, S, KV, D] (its documented limits)."""
    if q.dtype not in _CUDNN_DTYPES or k.dtype != q.dtype:
        return f"cuDNN attention needs bfloat16 or float16 queries and keys, got {q.dtype} and {k.dtype}"
    if q.shape[-1] % 8 or q.shape[-1] > 128:
        return f"cuDNN attention needs a head dim that is a multiple of 8 and at most 128, got {q.shape[-1]}"
    return None


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """q [B, T, H, D], k, v [B, S, KV, D] (grouped heads as `jax.nn.dot_product_attention` takes them),
    mask [B, T, S] bool -> [B, T, H, D]."""
    return jax.nn.dot_product_attention(q, k, v.astype(q.dtype), mask=mask[:, None], implementation="cudnn")


# ---------------------------------------------------------------- splash (TPU)

def _splash_block(length: int) -> int | None:
    return next((block for block in _SPLASH_BLOCKS if length % block == 0), None)


def splash_unsupported(q_len: int, kv_len: int) -> str | None:
    """Why splash cannot take these lengths: its tiles (multiples of 128) must divide both. (Its mask is built
    on the host, so a causal offset must also be static: `attention_kernels` checks that.)"""
    if _splash_block(q_len) is None or _splash_block(kv_len) is None:
        return f"splash needs lengths that are multiples of 128, got {q_len} queries and {kv_len} keys"
    return None


@functools.lru_cache(maxsize=64)
def _splash_kernel(heads: int, q_len: int, kv_len: int, causal_offset: int | None, interpret: bool):
    # The mask's block structure is computed on the host, once per shape: cached.
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    shape = (q_len, kv_len)
    one_head = splash.FullMask(shape) if causal_offset is None else splash.CausalMask(shape, offset=causal_offset)
    bq, bkv = _splash_block(q_len), _splash_block(kv_len)
    assert bq is not None and bkv is not None   # splash_unsupported checked the lengths
    blocks = splash.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv, block_q_dkv=bq, block_kv_dkv=bkv,
                               block_kv_dkv_compute=bkv, block_q_dq=bq, block_kv_dq=bkv)
    return splash.make_splash_mha(splash.MultiHeadMask([one_head] * heads), head_shards=1, q_seq_shards=1,
                                  block_sizes=blocks, interpret=interpret)


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, query_segments: jax.Array, key_segments: jax.Array,
                     causal_offset: int | None, interpret: bool = False) -> jax.Array:
    """q [B, T, H, D], k, v [B, S, KV, D] (grouped heads: splash's own), segments [B, T] and [B, S] int32 (a query
    sees the keys of its segment), causal with query t at key column causal_offset + t, or bidirectional
    (None) -> [B, T, H, D]."""
    from jax.experimental.pallas.ops.tpu.splash_attention import SegmentIds

    kernel = _splash_kernel(q.shape[2], q.shape[1], k.shape[1], causal_offset, interpret)
    scaled = (q.astype(jnp.float32) * (q.shape[-1] ** -0.5)).astype(q.dtype)   # splash does not scale

    def one_row(q, k, v, q_segments, k_segments):   # heads-major [heads, length, D], as splash takes them
        return kernel(q, k, v, segment_ids=SegmentIds(q=q_segments, kv=k_segments))

    heads_major = functools.partial(jnp.swapaxes, axis1=1, axis2=2)
    out = jax.vmap(one_row)(heads_major(scaled), heads_major(k.astype(q.dtype)), heads_major(v.astype(q.dtype)),
                            query_segments.astype(jnp.int32), key_segments.astype(jnp.int32))
    return heads_major(out)


# ---------------------------------------------------------------- Triton flash (GPU Pallas)

def triton_unsupported(q_len: int, kv_len: int, causal_offset: int | None) -> str | None:
    """Why the GPU Pallas flash kernel cannot take these lengths: its causal mask is top-left aligned and its
    segment ids are shared by queries and keys, so queries must be the keys' own positions."""
    if causal_offset not in (0, None) or q_len != kv_len:
        return (f"the Pallas GPU flash kernel needs queries at the keys' own positions, got {q_len} queries "
                f"over {kv_len} keys from column {causal_offset}")
    if q_len % _TRITON_BLOCK:   # its tiles (Triton blocks: powers of two) must divide the length
        return f"the Pallas GPU flash kernel needs a length that is a multiple of {_TRITON_BLOCK}, got {q_len}"
    return None


def triton_attention(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array, causal: bool,
                     interpret: bool = False) -> jax.Array:
    """q [B, T, H, D], k, v [B, T, KV, D], segments [B, T] int32 (queries and keys alike) -> [B, T, H, D]."""
    from jax.experimental.pallas.ops.gpu import attention as pallas_gpu

    groups = q.shape[2] // k.shape[2]   # the kernel has no grouped heads: each kv head repeated for its group
    k, v = (jnp.repeat(x.astype(q.dtype), groups, axis=2) for x in (k, v))
    return pallas_gpu.mha(q, k, v, segments.astype(jnp.int32), sm_scale=q.shape[-1] ** -0.5, causal=causal,
                          interpret=interpret)
