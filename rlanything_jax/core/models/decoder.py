"""Llama / Qwen2 / Qwen3 decoder in Flax NNX.

Every parameter carries `logical_axes` metadata (names such as "embed", "heads",
"mlp"); `rlanything_jax.core.sharding` turns those into mesh shardings through the rules
table in the config, so the model itself never names a mesh axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from rlanything_jax.core.interfaces import AttendFn, ModelInputs, SharedPrefixLM
from rlanything_jax.core.models.attention_kernels import AttentionKernel, causal_attention, resolve_attention
from rlanything_jax.core.models.layer_stack import scan_stacked, stacked_module
from rlanything_jax.core.models.linear import linear
from rlanything_jax.core.models.lm_head import target_logprobs
from rlanything_jax.core.models.model_config import DecoderConfig
from rlanything_jax.core.models.rope import apply_rope, inverse_frequencies, rope_cos_sin

# The full forward's `attend` (interfaces.AttendFn) attends over the new keys only; the sampler's writes
# them to its KV cache (the carry) and attends over the live part of the cache.

# Activation checkpointing of each decoder layer under differentiation (a train config's `remat`): "none"
# keeps every intermediate for the backward pass, "dots" keeps the matmul outputs without batch dimensions
# (the projections) and recomputes the rest (norms, rotary, attention scores, activations), "full" keeps
# only each layer's input and recomputes the whole layer in the backward pass.
REMAT_POLICIES = {"none": None, "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
                  "full": jax.checkpoint_policies.nothing_saveable}


def _init(rngs: nnx.Rngs, shape: Sequence[int], dtype, fan_in: int) -> jax.Array:
    return jax.random.normal(rngs.params(), tuple(shape), dtype) * (fan_in ** -0.5)


class Projection(nnx.Module):
    """A linear map contracting the trailing `len(in_shape)` input dims onto `out_shape`."""

    def __init__(self, in_shape: tuple[int, ...], out_shape: tuple[int, ...], *, in_axes: tuple[str | None, ...],
                 out_axes: tuple[str | None, ...], use_bias: bool, dtype, param_dtype, rngs: nnx.Rngs):
        fan_in = 1
        for size in in_shape:
            fan_in *= size
        self.kernel = nnx.Param(_init(rngs, in_shape + out_shape, param_dtype, fan_in),
                                logical_axes=in_axes + out_axes)
        self.bias = nnx.Param(jnp.zeros(out_shape, param_dtype), logical_axes=out_axes) if use_bias else None
        self.num_in_dims = len(in_shape)
        self.dtype = dtype
        # LoRA adapters (core/models/lora.add_adapters attaches them): y += lora_scale * (x A) B.
        self.lora_a = self.lora_b = None
        self.lora_scale = 0.0

    def __call__(self, x: jax.Array, out_dtype=None) -> jax.Array:
        x = x.astype(self.dtype)
        y = linear(x, self.kernel[...].astype(self.dtype), self.num_in_dims)
        if self.lora_a is not None:   # unmerged: the frozen kernel's product plus the adapters' low-rank one
            h = linear(x, self.lora_a[...].astype(self.dtype), self.num_in_dims).astype(self.dtype)
            y = y + self.lora_scale * linear(h, self.lora_b[...].astype(self.dtype), 1)
        if self.bias is not None:
            y = y + self.bias[...].astype(jnp.float32)
        return y.astype(out_dtype or self.dtype)


class RMSNorm(nnx.Module):
    """Root-mean-square norm, computed in float32 like transformers' LlamaRMSNorm."""

    def __init__(self, dim: int, eps: float, *, dtype, param_dtype, axis_name: str = "norm"):
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype), logical_axes=(axis_name,))
        self.eps = eps
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.scale[...].astype(self.dtype) * normed.astype(self.dtype)


class Attention(nnx.Module):
    def __init__(self, cfg: DecoderConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        e, h, kv, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = Projection((e,), (h, d), in_axes=("embed",), out_axes=("heads", "head_dim"),
                                 use_bias=cfg.qkv_bias, **dims)
        self.k_proj = Projection((e,), (kv, d), in_axes=("embed",), out_axes=("kv_heads", "head_dim"),
                                 use_bias=cfg.qkv_bias, **dims)
        self.v_proj = Projection((e,), (kv, d), in_axes=("embed",), out_axes=("kv_heads", "head_dim"),
                                 use_bias=cfg.qkv_bias, **dims)
        self.o_proj = Projection((h, d), (e,), in_axes=("heads", "head_dim"), out_axes=("embed",),
                                 use_bias=cfg.o_bias, **dims)
        self.q_norm: RMSNorm | None
        self.k_norm: RMSNorm | None
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps, dtype=dtype, param_dtype=param_dtype, axis_name="head_dim")
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps, dtype=dtype, param_dtype=param_dtype, axis_name="head_dim")
        else:
            self.q_norm = self.k_norm = None

    def project_qkv(self, x: jax.Array, cos: jax.Array, sin: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Rotated queries and keys and values for x [batch, time, embed]."""
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.q_norm is not None and self.k_norm is not None:   # both or neither
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, layer_index: int, attend: AttendFn,
                 carry: Any, query_window: int | None = None) -> tuple[jax.Array, Any]:
        q, k, v = self.project_qkv(x, cos, sin)
        if query_window is not None:  # queries for the last positions only; keys and values for all
            q = q[:, q.shape[1] - query_window:]
        out, carry = attend(layer_index, q, k, v, carry)
        return self.o_proj(out), carry


class MLP(nnx.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: DecoderConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        dims = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=cfg.mlp_bias)
        e, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Projection((e,), (f,), in_axes=("embed",), out_axes=("mlp",), **dims)
        self.up_proj = Projection((e,), (f,), in_axes=("embed",), out_axes=("mlp",), **dims)
        self.down_proj = Projection((f,), (e,), in_axes=("mlp",), out_axes=("embed",), **dims)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: DecoderConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        norms = dict(dtype=dtype, param_dtype=param_dtype, axis_name="embed")
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, **norms)
        self.attn = Attention(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.post_attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, **norms)
        self.mlp = MLP(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, layer_index: int, attend: AttendFn,
                 carry: Any, query_window: int | None = None) -> tuple[jax.Array, Any]:
        attn_out, carry = self.attn(self.input_norm(x), cos, sin, layer_index, attend, carry, query_window)
        if query_window is not None:
            x = x[:, x.shape[1] - query_window:]
        x = x + attn_out
        return x + self.mlp(self.post_attention_norm(x)), carry


def call_layer(layer: DecoderLayer, remat: str, x: jax.Array, cos: jax.Array, sin: jax.Array, layer_index: int,
               attend: AttendFn, carry: Any, query_window: int | None = None) -> tuple[jax.Array, Any]:
    """`layer(...)`, under `jax.checkpoint` with the policy `REMAT_POLICIES[remat]` unless remat is "none"
    (the same values: only what the backward pass keeps or recomputes differs)."""
    return remat_call(layer, remat, lambda m, x, cos, sin, carry: m(x, cos, sin, layer_index, attend, carry,
                                                                    query_window), x, cos, sin, carry)


def remat_call(module: nnx.Module, remat: str, call: Callable[..., Any], *arrays: Any) -> Any:
    """`call(module, *arrays)`, under `jax.checkpoint` with `REMAT_POLICIES[remat]` unless remat is "none";
    `arrays` are the traced inputs (pytrees of arrays), anything static is closed over by `call`."""
    if remat == "none":
        return call(module, *arrays)
    graphdef, state = nnx.split(module)

    def forward(state, *arrays):
        return call(nnx.merge(graphdef, state), *arrays)

    return jax.checkpoint(forward, policy=REMAT_POLICIES[remat])(state, *arrays)


class Decoder(nnx.Module):
    """Causal LM: `model(input_ids [B, T] int32) -> logits [B, T, vocab] float32`; implements
    `interfaces.SharedPrefixLM` (text only: `inputs` with embeddings are refused). `attention` is how every
    attention of the model runs (`attention_kernels`; default: this platform's `auto`)."""

    def __init__(self, cfg: DecoderConfig, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs | None = None, attention: AttentionKernel | None = None):
        rngs = rngs if rngs is not None else nnx.Rngs(0)
        self.config = cfg
        self.dtype = dtype
        # A static attribute: part of the graphdef, so the sampler's and the train step's programs see it.
        self.attention_kernel = attention if attention is not None else resolve_attention()
        # Scale 1/sqrt(hidden): a tied output layer then starts with unit-scale logits.
        self.embed = nnx.Param(_init(rngs, (cfg.vocab_size, cfg.hidden_size), param_dtype, cfg.hidden_size),
                               logical_axes=("vocab", "embed"))
        self.layers: Any   # one stacked DecoderLayer (scan_layers) or an nnx.List of them
        if cfg.scan_layers:
            self.layers = stacked_module(lambda r: DecoderLayer(cfg, dtype=dtype, param_dtype=param_dtype, rngs=r),
                                         cfg.num_layers, rngs)
        else:
            self.layers = nnx.List([DecoderLayer(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
                                    for _ in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, param_dtype=param_dtype,
                                  axis_name="embed")
        if cfg.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = Projection((cfg.hidden_size,), (cfg.vocab_size,), in_axes=("embed",),
                                      out_axes=("vocab",), use_bias=False, dtype=dtype, param_dtype=param_dtype,
                                      rngs=rngs)

    def rope(self, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
        # Host-side constants, recomputed per trace, so they never become model state.
        inv_freq, scaling = inverse_frequencies(self.config.rope, self.config.head_dim)
        return rope_cos_sin(positions, inv_freq, scaling)

    def embed_tokens(self, input_ids: jax.Array) -> jax.Array:
        return jnp.take(self.embed[...], input_ids, axis=0).astype(self.dtype)

    def hidden_states(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                      positions: jax.Array | None = None, last: int | None = None,
                      inputs: ModelInputs | None = None, remat: str = "none") -> jax.Array:
        """Final-norm hidden states [B, T, embed] for a (possibly left-padded) batch; with `last`, those of
        the last `last` positions only [B, last, embed], whose final layer then runs on them alone. `remat`:
        each layer's activation checkpointing under differentiation (a key of REMAT_POLICIES)."""
        if attention_mask is None:
            attention_mask = jnp.ones(input_ids.shape, jnp.int32)
        if positions is None:
            positions = positions_from_mask(attention_mask)
        key_valid, kernel = attention_mask.astype(jnp.bool_), self.attention_kernel

        def attend(layer_index, q, k, v, carry):   # the queries are the last q.shape[1] positions
            return causal_attention(q, k, v, key_valid, k.shape[1] - q.shape[1], kernel), carry

        hidden, _ = self.run_layers(input_ids, positions, attend, None, last, inputs, remat)
        return hidden

    def hidden_states_after_prefixes(self, prefix_ids: jax.Array, prefix_mask: jax.Array, prefix_index: jax.Array,
                                     input_ids: jax.Array, attention_mask: jax.Array,
                                     last: int | None = None, remat: str = "none") -> jax.Array:
        """Hidden states of rows that continue shared prefixes: row i is prefix `prefix_index[i]` followed
        by `input_ids[i]`. Each prefix runs once, however many rows continue it (a group of rollouts of
        one prompt), and the rows attend to its keys and values. Prefixes [P, Lp] are left-padded, rows
        [N, T] are padded on either side; returns [N, T or last, embed] as `hidden_states` would for the
        concatenated rows."""
        _check_last(last, input_ids.shape[1])
        prefix_lengths = jnp.sum(prefix_mask.astype(jnp.int32), axis=-1)
        positions = jnp.take(prefix_lengths, prefix_index)[:, None] + positions_from_mask(attention_mask)
        kernel = self.attention_kernel
        # A row's keys are its prefix's then its own: its queries come after every prefix column, so the
        # causal rule over the concatenation lets them see all of the prefix's valid keys.
        row_keys_valid = jnp.concatenate([jnp.take(prefix_mask, prefix_index, axis=0),
                                          attention_mask], axis=-1).astype(jnp.bool_)

        def attend_prefix(layer_index, q, k, v, carry):   # hands its keys and values to the rows
            start = k.shape[1] - q.shape[1]
            return causal_attention(q, k, v, prefix_mask.astype(jnp.bool_), start, kernel), (k, v)

        def attend_rows(layer_index, q, k, v, prefix_kv):
            keys = jnp.concatenate([jnp.take(prefix_kv[0], prefix_index, axis=0), k], axis=1)
            values = jnp.concatenate([jnp.take(prefix_kv[1], prefix_index, axis=0), v], axis=1)
            return causal_attention(q, keys, values, row_keys_valid, keys.shape[1] - q.shape[1], kernel), None

        prefix_cos, prefix_sin = self.rope(positions_from_mask(prefix_mask))
        cos, sin = self.rope(positions)

        def step(layer, index, xs):
            prefix_x, x = xs
            final = self.is_final_layer(index)
            # The final layer needs only the prefixes' keys and values: one query keeps its shapes valid.
            prefix_x, prefix_kv = call_layer(layer, remat, prefix_x, prefix_cos, prefix_sin, index,
                                             attend_prefix, None, 1 if final else None)
            x, _ = call_layer(layer, remat, x, cos, sin, index, attend_rows, prefix_kv, last if final else None)
            return prefix_x, x

        _, x = self.for_each_layer(step, (self.embed_tokens(prefix_ids), self.embed_tokens(input_ids)))
        return self.final_norm(self.keep_last(x, last))

    def run_layers(self, input_ids: jax.Array, positions: jax.Array, attend: AttendFn, carry: Any,
                   last: int | None = None, inputs: ModelInputs | None = None,
                   remat: str = "none") -> tuple[jax.Array, Any]:
        """Embeds, runs every layer with `attend` threading `carry`, and applies the final norm.
        With `last`, the final layer computes (and returns) the last `last` positions only."""
        _check_last(last, input_ids.shape[1])
        if inputs is not None and (inputs.embeddings is not None or inputs.position_ids is not None):
            raise ValueError("Decoder is a text-only model: it takes no image embeddings or multi-axis positions")
        cos, sin = self.rope(positions)
        return self.run_embedded(self.embed_tokens(input_ids), cos, sin, attend, carry, last, remat=remat)

    def run_embedded(self, x: jax.Array, cos: jax.Array, sin: jax.Array, attend: AttendFn, carry: Any,
                     last: int | None = None,
                     after_layer: Callable[[int, jax.Array], jax.Array] | None = None,
                     remat: str = "none") -> tuple[jax.Array, Any]:
        """`run_layers` from embeddings x [B, T, embed] and rotary tables cos, sin [B, T, head_dim]:
        the entry for models built on this decoder (Qwen3-VL scatters image embeddings into x, rotates by
        M-RoPE and adds DeepStack features to the first layers' outputs through `after_layer(index, x)`)."""
        def step(layer, index, state):
            x, carry = state
            window = last if self.is_final_layer(index) else None
            x, carry = call_layer(layer, remat, x, cos, sin, index, attend, carry, window)
            return (after_layer(index, x) if after_layer is not None else x), carry

        x, carry = self.for_each_layer(step, (x, carry))
        return self.final_norm(self.keep_last(x, last)), carry

    def for_each_layer(self, step: Callable[[DecoderLayer, Any, Any], Any], state: Any) -> Any:
        """`state = step(layer, index, state)` for each layer in order: unrolled with int indices, or (a config's
        `scan_layers`) as one scan over the stacked layers with a traced int32 index."""
        if self.config.scan_layers:
            return scan_stacked(self.layers, step, state)
        for index, layer in enumerate(self.layers):
            state = step(layer, index, state)
        return state

    def is_final_layer(self, index: Any) -> bool:
        """Whether an unrolled layer is the last one (whose queries may be cut to the positions wanted).
        Scanned layers all run at full length (one body for every layer), cut after the scan."""
        return isinstance(index, int) and index == self.config.num_layers - 1

    def keep_last(self, x: jax.Array, last: int | None) -> jax.Array:
        """The last `last` positions of scanned layers' output (unrolled ones were cut at the final layer)."""
        return x[:, x.shape[1] - last:] if self.config.scan_layers and last is not None else x

    def logits(self, hidden: jax.Array) -> jax.Array:
        if self.lm_head is None:
            out = jnp.einsum("bte,ve->btv", hidden, self.embed[...].astype(self.dtype),
                             preferred_element_type=jnp.float32)
        else:
            out = self.lm_head(hidden, out_dtype=jnp.float32)
        return out.astype(jnp.float32)

    def target_logprobs(self, hidden: jax.Array, targets: jax.Array) -> jax.Array:
        """log_softmax(self.logits(hidden))[targets], float32 [B, T], with a fused backward (core/models/lm_head.py)."""
        if self.lm_head is None:
            return target_logprobs(hidden, self.embed[...], targets, layout="ve")
        return target_logprobs(hidden, self.lm_head.kernel[...], targets, layout="ev")

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                 positions: jax.Array | None = None) -> jax.Array:
        return self.logits(self.hidden_states(input_ids, attention_mask, positions))


def _check_last(last: int | None, length: int) -> None:
    if last is not None and not 0 < last <= length:
        raise ValueError(f"last must be in [1, {length}], got {last}")


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """Position ids that count only real tokens, so left padding does not shift them (pads get 0)."""
    mask = attention_mask.astype(jnp.int32)
    return jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0) * mask


if TYPE_CHECKING:   # the declared protocol, checked by the type checker (pyproject.toml's [tool.mypy])
    _implements: type[SharedPrefixLM] = Decoder
