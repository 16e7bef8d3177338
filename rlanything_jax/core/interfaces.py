"""Declared interfaces of the core: what a model must provide to be sampled and trained here.

`CausalLM` is the boundary between a model and this project's sampler (`core/sampling/`) and
train step (`core/rl/train_step.py`), in the spirit of gemma's `TransformerLike`: a model that
implements it (the project's `models.Decoder`, or one of your own) is decoded with a KV
cache and trained with PPO through the same jitted, sharded programs, and nothing else of
the model is called. The model runs its layers and hands each layer's queries, keys and
values to an `attend` callback, so the caller decides where keys and values live (a KV
cache for sampling, the sequence itself for training) while the model keeps its own
projections, norms and position encoding.

A vision-language model is a `VisionLM`: a CausalLM that also says how its images become inputs
(`ImageInputs`, host side) and runs its vision part inside the traced programs. The sampler, the train
step and the prompt builder carry its per-image and per-batch inputs without looking inside them.

Parameters are `flax.nnx.Param`s carrying `logical_axes` metadata (names such as "embed",
"heads", "mlp", "vocab"); `core/sharding.py` maps them to the mesh through the config's rules.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import jax
from flax import struct

# attend(layer_index, q [B, T, heads, head_dim], k [B, S, kv_heads, head_dim], v [B, S, kv_heads, head_dim], carry)
#   -> (attention output [B, T, heads, head_dim], carry)
# layer_index is an int, or a traced int32 scalar when the model scans its layers (`CacheLayout.scan_layers`).
AttendFn = Callable[[int, jax.Array, jax.Array, jax.Array, Any], tuple[jax.Array, Any]]


@struct.dataclass
class ModelInputs:
    """Inputs beyond token ids, for models that take them (vision-language models).

    `embeddings` [N, embed] replace the token embeddings at the N positions where
    `placeholder` [B, T] is true (an image's features at its image pad tokens), in
    row-major order; or, as [B, K, embed], row b's placeholders take row b's values in order
    (rows padded to K). `position_ids` [3, B, T] are multi-axis positions (e.g. M-RoPE's temporal,
    height and width) that replace the per-token positions the caller computes. `deepstack`
    [levels, N, embed] (or [levels, B, K, embed]) are features added at the same positions to the
    outputs of the first `levels` layers (e.g. DeepStack). A `VisionLM` builds them (`ImageInputs.prompt_inputs`,
    `VisionLM.batch_model_inputs`); the sampler and the train step only pass them on.
    """

    embeddings: jax.Array | None = None
    placeholder: jax.Array | None = None
    position_ids: jax.Array | None = None
    deepstack: jax.Array | None = None


class CacheLayout(Protocol):
    """What a KV cache and a logits buffer need to know about a model.

    It may also say `scan_layers: bool` (`cache_is_stacked` reads it; absent means False): True when the
    model runs its layers as one scan, handing `attend` a traced layer index, so that the cache holds one
    [layers, batch, length, kv_heads, head_dim] array for keys and one for values; else one array per layer.
    """

    # Read-only properties, so that a frozen config dataclass (e.g. `models.DecoderConfig`) satisfies it.
    @property
    def num_layers(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...


def cache_is_stacked(layout: CacheLayout) -> bool:
    """Whether a model's KV cache is one stacked array (`CacheLayout`'s optional `scan_layers`)."""
    return bool(getattr(layout, "scan_layers", False))


class CausalLM(Protocol):
    """A decoder-only language model as the sampler and the train step use it. It may carry an
    `attention_kernel` (`models.attention_kernels.AttentionKernel`, a static attribute): the sampler's
    attention over its cache then runs that kernel, as the model's own full forward does."""

    @property   # read-only: a model's own config class (with more fields) satisfies it
    def config(self) -> CacheLayout: ...

    dtype: Any   # the compute dtype of activations and cached keys and values

    def run_layers(self, input_ids: jax.Array, positions: jax.Array, attend: AttendFn, carry: Any,
                   last: int | None = None, inputs: ModelInputs | None = None,
                   remat: str = "none") -> tuple[jax.Array, Any]:
        """Embeds `input_ids` [B, T] at `positions` [B, T], runs every layer with `attend` threading `carry`,
        and returns the final-norm hidden states [B, T, embed] (the last `last` positions only, when given)."""

    def hidden_states(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                      positions: jax.Array | None = None, last: int | None = None,
                      inputs: ModelInputs | None = None, remat: str = "none") -> jax.Array:
        """Final-norm hidden states of a (left-padded) batch with causal attention over itself. `remat`: the
        layers' activation checkpointing under differentiation (the train config's `remat`; a model may
        ignore it, at the cost of memory)."""

    def logits(self, hidden: jax.Array) -> jax.Array:
        """float32 [..., vocab] logits of hidden states."""

    def target_logprobs(self, hidden: jax.Array, targets: jax.Array) -> jax.Array:
        """float32 log_softmax(logits(hidden))[targets]."""


class SharedPrefixLM(CausalLM, Protocol):
    """A CausalLM that can run rows continuing shared prefixes once per prefix (`rl.train_step`'s
    `share_prompt_prefixes`); the train step needs it only for batches that carry prefixes."""

    def hidden_states_after_prefixes(self, prefix_ids: jax.Array, prefix_mask: jax.Array, prefix_index: jax.Array,
                                     input_ids: jax.Array, attention_mask: jax.Array,
                                     last: int | None = None, remat: str = "none") -> jax.Array: ...


class ImageInputs(Protocol):
    """How a vision-language model's images become its inputs, on the host (numpy): a frozen, hashable record
    (it rides in `rl.data.DataConfig`). `Image` below is whatever `encode` returns for one decoded image (e.g.
    its patches and grid); `RowInputs` is a pytree of arrays whose leaves all have the batch's rows first,
    so the train step splits, shards and micro-batches it as it does the token arrays."""

    image_token_id: int   # the pad token an image's run of placeholders is made of

    def encode(self, image: Any) -> Any:
        """One decoded image (an HWC uint8 array or a PIL image) -> the model's input for it (an `Image`)."""

    def token_count(self, image: Any) -> int:
        """How many image pads an `Image` takes in a prompt."""

    def expand(self, token_ids: Sequence[int], images: Sequence[Any]) -> list[int]:
        """`token_ids` with each single image pad (as a chat template writes it) expanded to its image's run."""

    def batch_inputs(self, input_ids: Any, attention_mask: Any, images: Sequence[Sequence[Any]]) -> Any:
        """The `RowInputs` of a left-padded train batch (input_ids, attention_mask [B, L], numpy) whose row b
        holds `images[b]` in order; rows past len(images) (a batch's filler) hold none (`rl.data.collate`;
        `VisionLM.batch_model_inputs` reads it)."""

    def tower_input(self, image: Any) -> Any:
        """One `Image` as the arrays `VisionLM.encode_image` takes, padded to a few shapes (the sampler
        compiles one vision program per shape)."""

    def prompt_inputs(self, features: Sequence[Any], input_ids: Any, valid: Any, next_positions: Any,
                      images: Sequence[Sequence[Any]]) -> ModelInputs:
        """The `ModelInputs` of a prefill of `input_ids` [B, T] (`valid` [B, T] marks real tokens; row b's
        positions continue at next_positions[b]) holding `images[b]` in row b, given `features[i]`
        (`VisionLM.encode_image` of the i-th image, row-major)."""


class VisionLM(CausalLM, Protocol):
    """A CausalLM that reads images: its `run_layers` and `hidden_states` take the `ModelInputs` it builds."""

    image_inputs: ImageInputs
    # The names of the top-level parameter collections of its vision part (`model.freeze_vision` leaves them).
    vision_params: tuple[str, ...]

    def encode_image(self, tower_input: Any) -> Any:
        """One image's features (traceable) from `ImageInputs.tower_input`; `ImageInputs.prompt_inputs` reads them."""

    def batch_model_inputs(self, input_ids: jax.Array, row_inputs: Any, remat: str = "none") -> ModelInputs:
        """The `ModelInputs` of a train batch's rows from its `RowInputs` (traceable); `remat` is the train
        step's activation checkpointing policy, for the vision part it runs."""

    def with_image_features(self, row_inputs: Any) -> Any:
        """`RowInputs` whose images are replaced by their (gradient-free) features, so that a step reading them
        does not run the vision part (a frozen one); traceable."""
