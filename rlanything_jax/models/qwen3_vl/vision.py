"""Qwen3-VL's vision tower in Flax NNX: patches -> image embeddings and DeepStack features.

Patches arrive in merge-block order (`processor.patchify`), so every merge² consecutive rows
form one LLM token. Image grids are static (they fix the shapes); the per-grid tables (the
interpolated position-embedding taps and the 2-D RoPE coordinates) are host constants.
Attention is block-diagonal: each image (frame) attends within itself only, computed image by
image (batched when the images share a size) and, for large images, flash-style in blocks so
that a 1920x1088 screenshot (8160 patches) never holds its full score matrix.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlanything_jax.models import flash
from rlanything_jax.models.decoder import Projection, _init
from rlanything_jax.models.qwen3_vl.config import VisionConfig

Grid = tuple[int, int, int]   # (frames, patch rows, patch cols) of one image
_QUERY_CHUNK, _KEY_CHUNK = 256, 512   # score tiles per head (see image_attention)


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


def _patch_coordinates(grids: Sequence[Grid], merge: int) -> np.ndarray:
    """(row, col) of every patch [N, 2], in merge-block order, frames repeated."""
    out = []
    for t, h, w in grids:
        within = np.arange(h * w)
        in_col, in_row = within % merge, (within // merge) % merge
        block_col = (within // (merge * merge)) % (w // merge)
        block_row = within // (merge * merge * (w // merge))
        coords = np.stack([block_row * merge + in_row, block_col * merge + in_col], axis=-1)
        out.append(np.tile(coords, (t, 1)))
    return np.concatenate(out, axis=0)


def _bilinear_taps(index: np.ndarray, size: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """align_corners=True bilinear taps [n, 2] into a `side`-long axis and their weights, in float32
    as torch computes them (target index i samples source i * (side - 1) / (size - 1))."""
    src = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
    floor = np.floor(src)
    raw = floor[:, None] + np.array([0.0, 1.0], np.float32)
    weights = np.clip(np.float32(1) - np.abs(src[:, None] - raw), 0, None).astype(np.float32)
    return np.clip(raw.astype(np.int64), 0, side - 1), weights


def position_embedding_taps(grids: Sequence[Grid], merge: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices [N, 4] into the flattened side x side learned grid and bilinear weights [N, 4] per patch."""
    indices, weights = [], []
    for grid in grids:
        t, h, w = grid
        rows, cols = _patch_coordinates([grid], merge).T
        row_taps, row_weights = _bilinear_taps(rows, h, side)
        col_taps, col_weights = _bilinear_taps(cols, w, side)
        indices.append((row_taps[:, :, None] * side + col_taps[:, None, :]).reshape(-1, 4))
        weights.append((row_weights[:, :, None] * col_weights[:, None, :]).reshape(-1, 4))
    return np.concatenate(indices).astype(np.int32), np.concatenate(weights)


def vision_rope(grids: Sequence[Grid], merge: int, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """cos, sin [N, head_dim] float32 of the axial 2-D RoPE: a quarter of the dims per axis, [row, col] twice."""
    quarter = head_dim // 4
    inv_freq = 1.0 / (np.float32(theta) ** (np.arange(0, 2 * quarter, 2, dtype=np.float32) / np.float32(2 * quarter)))
    coords = jnp.asarray(_patch_coordinates(grids, merge), jnp.float32)
    angles = (coords[:, :, None] * jnp.asarray(inv_freq.astype(np.float32))).reshape(coords.shape[0], -1)
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def _rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos[:, None, :] + rotated * sin[:, None, :]).astype(x.dtype)


def _dense_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    logits = jnp.einsum("qhd,khd->hqk", q, k, preferred_element_type=jnp.float32) * (q.shape[-1] ** -0.5)
    weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("hqk,khd->qhd", weights, v, preferred_element_type=jnp.float32).astype(v.dtype)


def image_attention(q: jax.Array, k: jax.Array, v: jax.Array, query_chunk: int | None = None,
                    key_chunk: int | None = None) -> jax.Array:
    """Full bidirectional attention within one image, [n, heads, head_dim].

    Beyond `query_chunk` patches it is flash-style (`flash.online_softmax_update`): query chunks in
    sequence, each scanning key chunks, so at most query_chunk x key_chunk scores per head exist at a
    time (on a CPU about twice as fast as full rows of scores for a 8160-patch screenshot; tiles from
    128 x 512 to 1024 x 1024 all ran within 10% of each other there, about 0.7 CPU-s per block on 2
    cores, mostly the exponentials). Each query chunk is rematerialised in the backward."""
    n = q.shape[0]
    query_chunk, key_chunk = query_chunk or _QUERY_CHUNK, key_chunk or _KEY_CHUNK
    if n <= query_chunk:
        return _dense_attention(q, k, v)
    heads, head_dim = q.shape[1:]
    keys, values = flash.chunks(k, 0, key_chunk), flash.chunks(v, 0, key_chunk)
    key_valid = flash.chunks(jnp.ones((n,), jnp.bool_), 0, key_chunk)

    def one_query_chunk(q_chunk):
        def over_keys(carry, block):
            k_block, v_block, valid = block
            logits = jnp.einsum("qhd,khd->hqk", q_chunk, k_block, preferred_element_type=jnp.float32)
            logits = jnp.where(valid, logits, flash.MASKED_LOGIT)
            return flash.online_softmax_update(carry, logits, v_block, "hqk,khd->hqd"), None

        carry, _ = jax.lax.scan(over_keys, flash.online_softmax_start((heads, query_chunk), head_dim),
                                (keys, values, key_valid))
        return jnp.moveaxis(flash.online_softmax_finish(carry), 0, 1).astype(v.dtype)

    # Scaling the queries rather than each block's scores saves a pass over them.
    scaled = (q.astype(jnp.float32) * (head_dim ** -0.5)).astype(q.dtype)
    out = jax.lax.map(jax.checkpoint(one_query_chunk), flash.chunks(scaled, 0, query_chunk))
    return out.reshape(-1, heads, head_dim)[:n]


class VisionAttention(nnx.Module):
    def __init__(self, cfg: VisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=True)
        e, h, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        # One fused projection; its outputs are (q | k | v) x heads x head_dim, as in the checkpoint.
        self.qkv = Projection((e,), (3, h, d), in_axes=("embed",), out_axes=(None, "heads", "head_dim"), **dims)
        self.proj = Projection((h, d), (e,), in_axes=("heads", "head_dim"), out_axes=("embed",), **dims)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, segments: Sequence[int]) -> jax.Array:
        qkv = self.qkv(x)
        q, k, v = _rotate(qkv[:, 0], cos, sin), _rotate(qkv[:, 1], cos, sin), qkv[:, 2]
        if len(set(segments)) == 1 and len(segments) > 1:   # images of one size (screenshots): one batched program
            shape = (len(segments), segments[0]) + q.shape[1:]
            out = jax.vmap(image_attention)(q.reshape(shape), k.reshape(shape), v.reshape(shape))
            return self.proj(out.reshape(q.shape))
        outs, start = [], 0
        for length in segments:
            window = slice(start, start + length)
            outs.append(image_attention(q[window], k[window], v[window]))
            start += length
        return self.proj(jnp.concatenate(outs, axis=0))


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

    def __init__(self, cfg: VisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        norms = dict(dtype=dtype, param_dtype=param_dtype, axis_name="embed")
        self.norm1 = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, **norms)
        self.attn = VisionAttention(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm2 = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, **norms)
        self.mlp = VisionMLP(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x, cos, sin, segments):
        x = x + self.attn(self.norm1(x), cos, sin, segments)
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
    features [levels, N / merge², out]."""

    def __init__(self, cfg: VisionConfig, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs | None = None):
        rngs = rngs if rngs is not None else nnx.Rngs(0)
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = cfg
        self.dtype = dtype
        # The checkpoint's Conv3d has kernel = stride = (time, patch, patch): a linear map of each row.
        self.patch_embed = Projection((cfg.patch_dim,), (cfg.hidden_size,), in_axes=(None,), out_axes=("embed",),
                                      use_bias=True, **dims)
        self.pos_embed = nnx.Param(_init(rngs, (cfg.num_position_embeddings, cfg.hidden_size), param_dtype, 1),
                                   logical_axes=(None, "embed"))
        self.blocks = nnx.List([VisionBlock(cfg, **dims) for _ in range(cfg.depth)])
        self.merger = PatchMerger(cfg, postshuffle=False, **dims)
        self.deepstack_mergers = nnx.List([PatchMerger(cfg, postshuffle=True, **dims)
                                           for _ in cfg.deepstack_visual_indexes])

    def __call__(self, pixel_values: jax.Array, grids: Sequence[Grid]) -> tuple[jax.Array, jax.Array]:
        cfg = self.config
        grids = [tuple(int(v) for v in grid) for grid in grids]
        if pixel_values.shape[0] != sum(t * h * w for t, h, w in grids):
            raise ValueError(f"pixel_values has {pixel_values.shape[0]} rows for grids {grids}")
        merge = cfg.spatial_merge_size
        taps, tap_weights = position_embedding_taps(grids, merge, round(cfg.num_position_embeddings ** 0.5))
        table = self.pos_embed[...].astype(jnp.float32)
        position = jnp.sum(table[jnp.asarray(taps)] * jnp.asarray(tap_weights)[:, :, None], axis=1)
        x = self.patch_embed(pixel_values) + position.astype(self.dtype)
        cos, sin = vision_rope(grids, merge, cfg.head_dim, cfg.rope_theta)
        segments = [h * w for t, h, w in grids for _ in range(t)]
        deepstack = []
        for index, block in enumerate(self.blocks):
            x = block(x, cos, sin, segments)
            if index in cfg.deepstack_visual_indexes:
                deepstack.append(self.deepstack_mergers[cfg.deepstack_visual_indexes.index(index)](x))
        embeddings = self.merger(x)
        stacked = jnp.stack(deepstack) if deepstack else jnp.zeros((0, *embeddings.shape), embeddings.dtype)
        return embeddings, stacked
