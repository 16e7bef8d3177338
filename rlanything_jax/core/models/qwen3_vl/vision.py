"""Qwen3-VL's vision tower in Flax NNX: patches -> image embeddings and DeepStack features.

Patches arrive in merge-block order (`processor.patchify`), so every merge² consecutive rows
form one LLM token. What an image's grid decides (the interpolated position-embedding taps, the
2-D RoPE coordinates, which patches attend to each other) comes in as arrays, a
`patches.PatchLayout` built on the host, so that images padded to one patch count share a
compiled program (`patches.bucket_patches`). Attention is block-diagonal: each image (frame)
attends within itself only, through segment ids over the packed patches, and, for large images,
flash-style in blocks so that a 1920x1088 screenshot (8160 patches) never holds its full score
matrix. How it attends is the tower's `AttentionKernel` (`attend_within_segments`): `chunked` is that
blocked path, `xla` the dense scores, `cudnn` and `splash` the accelerators' fused kernels.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlanything_jax.core.models import flash
from rlanything_jax.core.models import fused_attention as fused
from rlanything_jax.core.models.attention_kernels import AttentionKernel, log_fallback, resolve_attention
from rlanything_jax.core.models.decoder import Projection, _init, remat_call
from rlanything_jax.core.models.layer_stack import scan_stacked, stacked_module
from rlanything_jax.core.models.qwen3_vl.config import VisionConfig
from rlanything_jax.core.models.qwen3_vl.patches import Grid, PatchLayout, patch_layout

_QUERY_CHUNK, _KEY_CHUNK = 512, 512   # score tiles per head (see segment_attention)


class LayerNorm(nnx.Module):
    """LayerNorm with scale and bias, computed in float32."""

    def __init__(self, dim: int, eps: float, *, dtype, param_dtype, axis_name: str = "norm"):
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype), logical_axes=(axis_name,))
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype), logical_axes=(axis_name,))
        self.eps = eps
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        variance = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        normed = (x32 - mean) * jax.lax.rsqrt(variance + self.eps)
        return (normed * self.scale[...].astype(jnp.float32) + self.bias[...].astype(jnp.float32)).astype(self.dtype)


def vision_rope(coords: jax.Array | np.ndarray, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """cos, sin [N, head_dim] float32 of the axial 2-D RoPE at patch coordinates [N, 2] (row, col): a quarter
    of the dims per axis, [row, col] twice."""
    quarter = head_dim // 4
    inv_freq = 1.0 / (np.float32(theta) ** (np.arange(0, 2 * quarter, 2, dtype=np.float32) / np.float32(2 * quarter)))
    coords = jnp.asarray(coords).astype(jnp.float32)
    angles = (coords[:, :, None] * jnp.asarray(inv_freq.astype(np.float32))).reshape(coords.shape[0], -1)
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def _bilinear_taps(index: jax.Array, size: jax.Array, side: int) -> tuple[jax.Array, jax.Array]:
    """align_corners=True bilinear taps [..., 2] into a `side`-long axis and their weights, in float32 as torch
    computes them (target index i of `size` samples source i * (side - 1) / (size - 1))."""
    src = index.astype(jnp.float32) * np.float32(side - 1) / jnp.maximum(size - 1, 1).astype(jnp.float32)
    raw = jnp.floor(src)[..., None] + jnp.array([0.0, 1.0], jnp.float32)
    weights = jnp.clip(1.0 - jnp.abs(src[..., None] - raw), 0.0, None)
    return jnp.clip(raw.astype(jnp.int32), 0, side - 1), weights


def interpolated_position_embedding(table: jax.Array, layout: PatchLayout) -> jax.Array:
    """The learned side x side position grid `table` [side², embed], bilinearly resized to each patch's
    image and read at the patch [P, embed] float32 (0 for padding). Computed from the layout's
    arrays rather than host tables, so that it does not fix the image sizes of a program."""
    side = round(table.shape[0] ** 0.5)
    coords, grid_hw = jnp.asarray(layout.coords), jnp.asarray(layout.grid_hw)
    row_taps, row_weights = _bilinear_taps(coords[:, 0], grid_hw[:, 0], side)
    col_taps, col_weights = _bilinear_taps(coords[:, 1], grid_hw[:, 1], side)
    taps = (row_taps[:, :, None] * side + col_taps[:, None, :]).reshape(-1, 4)
    weights = (row_weights[:, :, None] * col_weights[:, None, :]).reshape(-1, 4)
    weights = jnp.where(jnp.asarray(layout.valid)[:, None], weights, 0.0)
    return jnp.sum(table[taps] * weights[:, :, None], axis=1)


def _rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos[:, None, :] + rotated * sin[:, None, :]).astype(x.dtype)


def _dense_attention(q: jax.Array, k: jax.Array, v: jax.Array, visible: jax.Array) -> jax.Array:
    logits = jnp.einsum("qhd,khd->hqk", q, k, preferred_element_type=jnp.float32) * (q.shape[-1] ** -0.5)
    weights = jax.nn.softmax(jnp.where(visible, logits, flash.MASKED_LOGIT), axis=-1).astype(v.dtype)
    return jnp.einsum("hqk,khd->qhd", weights, v, preferred_element_type=jnp.float32).astype(v.dtype)


def _segment_range(segments: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Smallest and largest segment of a chunk, ignoring its chunk padding (-1)."""
    return jnp.min(jnp.where(segments >= 0, segments, jnp.iinfo(jnp.int32).max)), jnp.max(segments)


def segment_attention(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array, valid: jax.Array | None = None,
                      query_chunk: int | None = None, key_chunk: int | None = None) -> jax.Array:
    """Bidirectional attention within segments (one per image frame) of a run of packed patches,
    q, k, v [n, heads, head_dim]; segments [n] int, non-decreasing (the images in order); valid [n] marks
    real patches (a query chunk of padding only is skipped, its outputs 0).

    Beyond `query_chunk` patches it is flash-style (`flash.online_softmax_update`): query chunks in
    sequence, each scanning key chunks, so at most query_chunk x key_chunk scores per head exist at a
    time (2-core CPU, one 8192-patch image, 2 heads of 16: 0.08 s against 0.85 s for dense scores and
    0.11 s for torch's fused CPU attention; 512 x 512 tiles ran within 15% of 256 x 512 to 1024 x 1024,
    and bound the backward's saved scores per query chunk). Since segments do not decrease, a key chunk
    whose segment range misses the query chunk's holds no visible key and is skipped (`lax.switch`, not
    a mask): packed images and bucket padding then cost about what separate, unpadded images do. Each
    query chunk is rematerialised in the backward."""
    n = q.shape[0]
    query_chunk, key_chunk = query_chunk or _QUERY_CHUNK, key_chunk or _KEY_CHUNK
    segments = jnp.asarray(segments, jnp.int32)
    valid = jnp.ones((n,), jnp.bool_) if valid is None else jnp.asarray(valid, jnp.bool_)
    if n <= query_chunk:
        return _dense_attention(q, k, v, segments[:, None] == segments[None, :])
    heads, head_dim = q.shape[1:]
    # Heads-major tiles [heads, chunk, head_dim], transposed once here: with the head axis leading, each
    # tile's two matmuls are plain batched dots; the patch-major layout made XLA transpose inside the loop
    # (about 2x slower on a CPU).
    keys = flash.chunks(jnp.moveaxis(k, 1, 0), 1, key_chunk)
    values = flash.chunks(jnp.moveaxis(v, 1, 0), 1, key_chunk)
    # Chunk padding gets segment -1, which no query has: those keys are never visible.
    key_segments = flash.chunks(segments + 1, 0, key_chunk) - 1
    key_ranges = jax.vmap(_segment_range)(key_segments)
    key_unpadded = jnp.all(key_segments >= 0, axis=1)

    def one_query_chunk(block):
        q_chunk, q_segments, q_valid = block
        # The range of the real queries only: chunks of bucket padding are skipped even next to them
        # (padding queries then see fewer keys; nothing reads their outputs).
        low, high = _segment_range(jnp.where(q_valid, q_segments, -1))

        def fold(carry, key_block, masked: bool):
            k_block, v_block, k_segments = key_block
            logits = jnp.einsum("hqd,hkd->hqk", q_chunk, k_block, preferred_element_type=jnp.float32)
            if masked:
                logits = jnp.where(q_segments[:, None] == k_segments[None, :], logits, flash.MASKED_LOGIT)
            return flash.online_softmax_update(carry, logits, v_block, "hqk,hkd->hqd")

        def over_keys(carry, key_block):
            # Tiles within one image (most of a screenshot's) need no mask: one pass less over the scores.
            *block, (k_low, k_high), unpadded = key_block
            overlaps = (k_low <= high) & (k_high >= low)
            inside = unpadded & (k_low == k_high) & (low == high) & (k_low == low)
            branch = jnp.where(overlaps, jnp.where(inside, 2, 1), 0)
            return jax.lax.switch(branch, (lambda c, _: c, functools.partial(fold, masked=True),
                                           functools.partial(fold, masked=False)), carry, tuple(block)), None

        def attend(_):
            carry, _ = jax.lax.scan(over_keys, flash.online_softmax_start((heads, query_chunk), head_dim),
                                    (keys, values, key_segments, key_ranges, key_unpadded))
            return flash.online_softmax_finish(carry).astype(v.dtype)

        return jax.lax.cond(jnp.any(q_valid), attend, lambda _: jnp.zeros(q_chunk.shape, v.dtype), None)

    # Scaling the queries rather than each block's scores saves a pass over them.
    scaled = (q.astype(jnp.float32) * (head_dim ** -0.5)).astype(q.dtype)
    query_blocks = (flash.chunks(jnp.moveaxis(scaled, 1, 0), 1, query_chunk),
                    flash.chunks(segments + 1, 0, query_chunk) - 1, flash.chunks(valid, 0, query_chunk))
    out = jax.lax.map(jax.checkpoint(one_query_chunk), query_blocks)   # [chunks, heads, chunk, head_dim]
    return jnp.moveaxis(out, 1, 2).reshape(-1, heads, head_dim)[:n]


def image_attention(q: jax.Array, k: jax.Array, v: jax.Array, query_chunk: int | None = None,
                    key_chunk: int | None = None) -> jax.Array:
    """Full bidirectional attention within one image, [n, heads, head_dim] (`segment_attention`, one segment)."""
    return segment_attention(q, k, v, jnp.zeros((q.shape[0],), jnp.int32), None, query_chunk, key_chunk)


def attend_within_segments(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array, valid: jax.Array,
                           kernel: AttentionKernel) -> jax.Array:
    """`segment_attention`'s result (q, k, v [n, heads, head_dim]) by `kernel`: `xla` dense, `chunked` blocked,
    `cudnn` and `splash` fused (bucket padding is a segment of its own for them), falling back to chunked
    with the reason logged where a kernel cannot take the call."""
    segments = jnp.asarray(segments, jnp.int32)
    if kernel.name == "xla":
        return _dense_attention(q, k, v, segments[:, None] == segments[None, :])
    reason = None
    n = q.shape[0]
    if kernel.name == "cudnn":
        reason = fused.cudnn_unsupported(q[None], k[None])
        if reason is None:
            visible = segments[None, :, None] == segments[None, None, :]
            return fused.cudnn_attention(q[None], k[None], v[None], visible)[0]
    elif kernel.name == "splash" and kernel.platform == "gpu":
        reason = fused.triton_unsupported(n, n, None)
        if reason is None:
            return fused.triton_attention(q[None], k[None], v[None], segments[None], causal=False,
                                          interpret=kernel.interpret)[0]
    elif kernel.name == "splash":
        reason = fused.splash_unsupported(n, n)
        if reason is None:
            return fused.splash_attention(q[None], k[None], v[None], segments[None], segments[None], None,
                                          kernel.interpret)[0]
    if reason is not None:
        log_fallback(kernel, reason)
    return segment_attention(q, k, v, segments, valid, kernel.query_chunk, kernel.key_chunk)


class VisionAttention(nnx.Module):
    def __init__(self, cfg: VisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs, attention: AttentionKernel):
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=True)
        e, h, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        self.attention_kernel = attention   # static: part of the graphdef
        # One fused projection; its outputs are (q | k | v) x heads x head_dim, as in the checkpoint.
        self.qkv = Projection((e,), (3, h, d), in_axes=("embed",), out_axes=(None, "heads", "head_dim"), **dims)
        self.proj = Projection((h, d), (e,), in_axes=("heads", "head_dim"), out_axes=("embed",), **dims)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, segments: jax.Array,
                 valid: jax.Array) -> jax.Array:
        qkv = self.qkv(x)
        q, k, v = _rotate(qkv[:, 0], cos, sin), _rotate(qkv[:, 1], cos, sin), qkv[:, 2]
        return self.proj(attend_within_segments(q, k, v, segments, valid, self.attention_kernel))


class VisionMLP(nnx.Module):
    def __init__(self, cfg: VisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=True)
        self.fc1 = Projection((cfg.hidden_size,), (cfg.intermediate_size,), in_axes=("embed",),
                              out_axes=("mlp",), **dims)
        self.fc2 = Projection((cfg.intermediate_size,), (cfg.hidden_size,), in_axes=("mlp",),
                              out_axes=("embed",), **dims)
        self.tanh_gelu = cfg.tanh_gelu

    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = jax.nn.gelu(self.fc1(x, out_dtype=jnp.float32), approximate=self.tanh_gelu)
        return self.fc2(hidden.astype(x.dtype))


class VisionBlock(nnx.Module):
    """Pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, cfg: VisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs, attention: AttentionKernel):
        norms = dict(dtype=dtype, param_dtype=param_dtype, axis_name="embed")
        self.norm1 = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, **norms)
        self.attn = VisionAttention(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs, attention=attention)
        self.norm2 = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, **norms)
        self.mlp = VisionMLP(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x, cos, sin, segments, valid):
        x = x + self.attn(self.norm1(x), cos, sin, segments, valid)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nnx.Module):
    """merge² patches -> one LLM-width token: norm, concatenate, fc1, exact GELU, fc2. The final merger
    normalises each patch before concatenating; the DeepStack mergers (`postshuffle`) after."""

    def __init__(self, cfg: VisionConfig, postshuffle: bool, *, dtype, param_dtype, rngs: nnx.Rngs):
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=True)
        wide = cfg.merged_dim
        self.norm = LayerNorm(wide if postshuffle else cfg.hidden_size, cfg.layer_norm_eps, dtype=dtype,
                              param_dtype=param_dtype, axis_name="mlp" if postshuffle else "embed")
        self.fc1 = Projection((wide,), (wide,), in_axes=("mlp",), out_axes=(None,), **dims)
        self.fc2 = Projection((wide,), (cfg.out_hidden_size,), in_axes=(None,), out_axes=("embed",), **dims)
        self.postshuffle = postshuffle
        self.wide = wide

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.norm(x.reshape(-1, self.wide)) if self.postshuffle else self.norm(x).reshape(-1, self.wide)
        return self.fc2(jax.nn.gelu(self.fc1(x, out_dtype=jnp.float32), approximate=False).astype(x.dtype))


class VisionTower(nnx.Module):
    """`tower(pixel_values [N, patch_dim], grids)` -> image embeddings [N / merge², out] and DeepStack
    features [levels, N / merge², out]. `attention`: how its blocks attend (default: this platform's `auto`)."""

    def __init__(self, cfg: VisionConfig, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs | None = None, attention: AttentionKernel | None = None, scan_blocks: bool = False):
        rngs = rngs if rngs is not None else nnx.Rngs(0)
        attention = attention if attention is not None else resolve_attention()
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = cfg
        self.dtype = dtype
        # The checkpoint's Conv3d has kernel = stride = (time, patch, patch): a linear map of each row.
        self.patch_embed = Projection((cfg.patch_dim,), (cfg.hidden_size,), in_axes=(None,), out_axes=("embed",),
                                      use_bias=True, **dims)
        self.pos_embed = nnx.Param(_init(rngs, (cfg.num_position_embeddings, cfg.hidden_size), param_dtype, 1),
                                   logical_axes=(None, "embed"))
        # `scan_blocks`: the blocks stacked and run as one scan (core/models/layer_stack.py), as the text layers.
        self.scan_blocks = scan_blocks
        self.blocks: Any   # one stacked VisionBlock (scan_blocks) or an nnx.List of them
        if scan_blocks:
            self.blocks = stacked_module(lambda r: VisionBlock(cfg, attention=attention, dtype=dtype,
                                                               param_dtype=param_dtype, rngs=r), cfg.depth, rngs)
        else:
            self.blocks = nnx.List([VisionBlock(cfg, attention=attention, **dims) for _ in range(cfg.depth)])
        self.merger = PatchMerger(cfg, postshuffle=False, **dims)
        self.deepstack_mergers = nnx.List([PatchMerger(cfg, postshuffle=True, **dims)
                                           for _ in cfg.deepstack_visual_indexes])

    def __call__(self, pixel_values: jax.Array, layout: PatchLayout | Sequence[Grid],
                 remat: str = "none") -> tuple[jax.Array, jax.Array]:
        """`layout`: the grids of the images in `pixel_values` (host data, exact shapes) or their `PatchLayout`
        (arrays, possibly traced, padded to pixel_values' rows: the program then depends on the row count
        only). Outputs keep one row per merge² patches, padding included. `remat`: each block's activation
        checkpointing under differentiation (a key of decoder.REMAT_POLICIES)."""
        cfg = self.config
        if not isinstance(layout, PatchLayout):
            layout = self.layout(layout)
        if pixel_values.shape[0] != layout.size:
            raise ValueError(f"pixel_values has {pixel_values.shape[0]} rows for a layout of {layout.size} patches")
        position = interpolated_position_embedding(self.pos_embed[...].astype(jnp.float32), layout)
        x = self.patch_embed(pixel_values) + position.astype(self.dtype)
        cos, sin = vision_rope(layout.coords, cfg.head_dim, cfg.rope_theta)
        def block_call(block, x):
            return remat_call(block, remat, lambda b, *a: b(*a), x, cos, sin, layout.segments, layout.valid)

        taps = cfg.deepstack_visual_indexes
        if self.scan_blocks:   # the tapped blocks' outputs are kept in the carry, merged after the scan
            def step(block, index, carry):
                x, kept = carry
                x = block_call(block, x)
                return x, jnp.where((jnp.asarray(taps, jnp.int32) == index)[:, None, None], x[None], kept)

            x, kept = scan_stacked(self.blocks, step, (x, jnp.zeros((len(taps),) + x.shape, x.dtype)))
            deepstack = [merger(kept[level]) for level, merger in enumerate(self.deepstack_mergers)]
        else:
            deepstack = []
            for index, block in enumerate(self.blocks):
                x = block_call(block, x)
                if index in taps:
                    deepstack.append(self.deepstack_mergers[taps.index(index)](x))
        embeddings = self.merger(x)
        stacked = jnp.stack(deepstack) if deepstack else jnp.zeros((0, *embeddings.shape), embeddings.dtype)
        return embeddings, stacked

    def layout(self, grids: Sequence[Grid], size: int | None = None) -> PatchLayout:
        """The host-side `PatchLayout` of `grids` for this tower, padded to `size` patches (default: exact)."""
        return patch_layout(grids, self.config.spatial_merge_size, size)
