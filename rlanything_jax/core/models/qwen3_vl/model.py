"""Qwen3-VL: the project's Qwen3 `Decoder` with image embeddings, interleaved M-RoPE and DeepStack.

The model *is* a `Decoder` (a subclass): its text layers, norms, output layer, log-probabilities
and the sampler/train-step protocol (`interfaces.CausalLM`) are the decoder's own. It adds the
vision tower and overrides `run_layers` to (1) put image embeddings at the `<|image_pad|>`
positions, (2) rotate by M-RoPE when `inputs.position_ids` [3, B, T] are given (text-only input
keeps ordinary RoPE, which M-RoPE reduces to when all three axes are equal) and (3) add the
DeepStack features to the outputs of the first layers at the same positions.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlanything_jax.core.interfaces import AttendFn, ModelInputs
from rlanything_jax.core.models.attention_kernels import AttentionKernel
from rlanything_jax.core.models.decoder import Decoder, _check_last
from rlanything_jax.core.models.qwen3_vl import processor
from rlanything_jax.core.models.qwen3_vl.config import Qwen3VLConfig
from rlanything_jax.core.models.qwen3_vl.images import Qwen3VLImages, RowImages
from rlanything_jax.core.models.qwen3_vl.patches import PatchLayout, bucket_patches
from rlanything_jax.core.models.qwen3_vl.vision import VisionTower
from rlanything_jax.core.models.rope import inverse_frequencies


def mrope_axis_of_frequency(mrope_section: Sequence[int], num_frequencies: int) -> np.ndarray:
    """Which position axis (0 temporal, 1 height, 2 width) drives each rotary frequency: interleaved
    T H W T H W ..., height and width for their first `section` turns, temporal for the rest."""
    index = np.arange(num_frequencies)
    axis = np.zeros(num_frequencies, np.int32)
    axis[(index % 3 == 1) & (index < 3 * mrope_section[1])] = 1
    axis[(index % 3 == 2) & (index < 3 * mrope_section[2])] = 2
    return axis


def mrope_cos_sin(position_ids: jax.Array, inv_freq: np.ndarray,
                  mrope_section: Sequence[int]) -> tuple[jax.Array, jax.Array]:
    """cos, sin [B, T, head_dim] float32 for M-RoPE positions [3, B, T]."""
    angles = position_ids.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)   # [3, B, T, F]
    axis = jnp.asarray(mrope_axis_of_frequency(mrope_section, inv_freq.shape[0]))
    chosen = jnp.where(axis == 0, angles[0], jnp.where(axis == 1, angles[1], angles[2]))
    chosen = jnp.concatenate([chosen, chosen], axis=-1)
    return jnp.cos(chosen), jnp.sin(chosen)


def _placeholder_rows(placeholder: jax.Array, per_row: bool) -> jax.Array:
    """For each position, the index of its value among the placeholders: in row-major order over the
    batch, or (`per_row`) within its own row."""
    if per_row:
        return jnp.maximum(jnp.cumsum(placeholder.astype(jnp.int32), axis=1) - 1, 0)
    flat = placeholder.reshape(-1).astype(jnp.int32)
    return jnp.maximum(jnp.cumsum(flat) - 1, 0).reshape(placeholder.shape)


def scatter_at_placeholders(x: jax.Array, placeholder: jax.Array, rows: jax.Array, values: jax.Array) -> jax.Array:
    """x [B, T, E] with position (b, t) replaced by values[rows[b, t]] (values [N, E]) or values[b, rows[b, t]]
    (values [B, K, E], each row's own) wherever placeholder[b, t]."""
    values = values.astype(x.dtype)
    if values.ndim == 3:
        picked = jnp.take_along_axis(values, rows[..., None], axis=1)
    else:
        picked = jnp.take(values, rows, axis=0)
    return jnp.where(placeholder[..., None], picked, x)


class Qwen3VL(Decoder):
    """`model(input_ids, attention_mask=None, pixel_values=None, image_grid_thw=None) -> logits [B, T, vocab]`,
    as transformers' `Qwen3VLForConditionalGeneration` (image pads already expanded in input_ids)."""

    def __init__(self, cfg: Qwen3VLConfig, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs | None = None, attention: AttentionKernel | None = None):
        rngs = rngs if rngs is not None else nnx.Rngs(0)
        super().__init__(cfg.text, dtype=dtype, param_dtype=param_dtype, rngs=rngs, attention=attention)
        self.vl_config = cfg
        self.visual = VisionTower(cfg.vision, dtype=dtype, param_dtype=param_dtype, rngs=rngs,
                                  attention=self.attention_kernel, scan_blocks=cfg.text.scan_layers)

    def image_features(self, pixel_values: jax.Array, image_grid_thw: np.ndarray) -> tuple[jax.Array, jax.Array]:
        """Image embeddings [N, embed] (N = image tokens of all images, in order) and DeepStack features
        [levels, N, embed]. `image_grid_thw` is host data; the patches are padded to a bucket
        (`patches.bucket_patches`), so the tower compiles per bucket, not per set of grids."""
        grids = [(int(t), int(h), int(w)) for t, h, w in np.asarray(image_grid_thw).reshape(-1, 3)]
        total = sum(t * h * w for t, h, w in grids)
        layout = self.visual.layout(grids, bucket_patches(total))
        padded = jnp.pad(jnp.asarray(pixel_values), ((0, layout.size - total), (0, 0)))
        embeddings, deepstack = _vision_tower(self.visual, padded.astype(self.dtype), layout)
        tokens = total // self.vl_config.vision.spatial_merge_size ** 2
        return embeddings[:tokens], deepstack[:, :tokens]

    def run_layers(self, input_ids: jax.Array, positions: jax.Array, attend: AttendFn, carry: Any,
                   last: int | None = None, inputs: ModelInputs | None = None,
                   remat: str = "none") -> tuple[jax.Array, Any]:
        _check_last(last, input_ids.shape[1])
        inputs = inputs if inputs is not None else ModelInputs()
        x = self.embed_tokens(input_ids)
        if inputs.position_ids is not None:
            inv_freq, _ = inverse_frequencies(self.config.rope, self.config.head_dim)
            cos, sin = mrope_cos_sin(inputs.position_ids, inv_freq, self.vl_config.mrope_section)
        else:
            cos, sin = self.rope(positions)
        after_layer = None
        if inputs.embeddings is not None:
            assert inputs.placeholder is not None   # embeddings come with their placeholder
            placeholder = inputs.placeholder.astype(jnp.bool_)
            rows = _placeholder_rows(placeholder, per_row=inputs.embeddings.ndim == 3)
            x = scatter_at_placeholders(x, placeholder, rows, inputs.embeddings)
            deepstack = inputs.deepstack

            def after_layer(index: int | jax.Array, hidden: jax.Array) -> jax.Array:
                if deepstack is None or (isinstance(index, int) and index >= deepstack.shape[0]):
                    return hidden
                levels = deepstack.shape[0]
                # Scanned layers give a traced index: every layer computes the features, the later ones add 0.
                level = index if isinstance(index, int) else jnp.minimum(index, levels - 1)
                features = jax.lax.dynamic_index_in_dim(deepstack, level, axis=0, keepdims=False)
                # Features to add at the placeholders, 0 elsewhere; the final layer may keep only the last columns.
                added = scatter_at_placeholders(jnp.zeros_like(x), placeholder, rows, features)
                if not isinstance(index, int):
                    added = jnp.where(index < levels, added, jnp.zeros_like(added))
                return hidden + added[:, x.shape[1] - hidden.shape[1]:]

        return self.run_embedded(x, cos, sin, attend, carry, last, after_layer, remat)

    # The `interfaces.VisionLM` side: host-side image handling, the vision parameters, and the traced parts.
    vision_params = ("visual",)

    @property
    def image_inputs(self) -> Qwen3VLImages:
        return Qwen3VLImages(self.vl_config.image_token_id, self.vl_config.vision.spatial_merge_size)

    def encode_image(self, tower_input: tuple[jax.Array, PatchLayout]) -> tuple[jax.Array, jax.Array]:
        """Embeddings [P / merge², embed] and DeepStack features [levels, P / merge², embed] of one image's
        padded patches (`Qwen3VLImages.tower_input`)."""
        pixel_values, layout = tower_input
        return self.visual(pixel_values.astype(self.dtype), layout)

    def batch_model_inputs(self, input_ids: jax.Array, row_inputs: RowImages, remat: str = "none") -> ModelInputs:
        """`ModelInputs` of a train batch whose rows carry their own images (traceable): the rows' pixels run
        through the vision tower (all rows as one packed run, checkpointed by `remat`), or their cached
        features are read."""
        embeddings, deepstack = row_inputs.embeddings, row_inputs.deepstack
        if row_inputs.pixel_values is not None:
            embeddings, deepstack = self._tower_features(row_inputs, remat)
        return ModelInputs(embeddings=embeddings, placeholder=input_ids == self.vl_config.image_token_id,
                           position_ids=jnp.moveaxis(row_inputs.positions, 1, 0),
                           deepstack=jnp.moveaxis(deepstack, 1, 0))

    def with_image_features(self, row_inputs: RowImages) -> RowImages:
        if row_inputs.pixel_values is None:
            return row_inputs
        embeddings, deepstack = self._tower_features(row_inputs, "none")
        return row_inputs.replace(pixel_values=None, layout=None, embeddings=jax.lax.stop_gradient(embeddings),
                                  deepstack=jax.lax.stop_gradient(deepstack))

    def _tower_features(self, row_inputs: RowImages, remat: str) -> tuple[jax.Array, jax.Array]:
        """embeddings [B, K, embed] and deepstack [B, levels, K, embed] of each row's pixels [B, P, patch_dim]."""
        pixel_values, layout = row_inputs.pixel_values, row_inputs.layout
        rows, size = pixel_values.shape[:2]
        flat = pixel_values.reshape(rows * size, -1).astype(self.dtype)
        flat_layout = jax.tree.map(lambda a: jnp.reshape(a, (rows * size,) + a.shape[2:]), layout)
        image_embeddings, image_deepstack = self.visual(flat, flat_layout, remat)
        # Each row's image tokens come first in its slice, in order: what the per-row scatter reads.
        embeddings = image_embeddings.reshape(rows, -1, image_embeddings.shape[-1])
        deepstack = image_deepstack.reshape(image_deepstack.shape[0], rows, -1, image_deepstack.shape[-1])
        return embeddings, jnp.moveaxis(deepstack, 0, 1)

    def multimodal_inputs(self, input_ids: np.ndarray, attention_mask: np.ndarray | None,
                          pixel_values: jax.Array | None, image_grid_thw: np.ndarray | None) -> ModelInputs | None:
        """The `ModelInputs` of a batch whose image pads are expanded: vision features and (host-computed)
        M-RoPE positions. None for text-only input."""
        if pixel_values is None:
            return None
        assert image_grid_thw is not None   # the images' grids come with their pixels
        cfg = self.vl_config
        position_ids, _ = processor.get_rope_index(np.asarray(input_ids), np.asarray(image_grid_thw),
                                                   cfg.image_token_id, attention_mask,
                                                   cfg.vision.spatial_merge_size)
        embeddings, deepstack = self.image_features(jnp.asarray(pixel_values), image_grid_thw)
        placeholder = jnp.asarray(np.asarray(input_ids) == cfg.image_token_id)
        if int(placeholder.sum()) != embeddings.shape[0]:
            raise ValueError(f"{int(placeholder.sum())} image pad tokens for {embeddings.shape[0]} image tokens")
        return ModelInputs(embeddings=embeddings, placeholder=placeholder, position_ids=jnp.asarray(position_ids),
                           deepstack=deepstack)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                 pixel_values: jax.Array | None = None, image_grid_thw: np.ndarray | None = None) -> jax.Array:
        mask = None if attention_mask is None else np.asarray(attention_mask)
        inputs = self.multimodal_inputs(np.asarray(input_ids), mask, pixel_values, image_grid_thw)
        full_mask = jnp.ones(np.shape(input_ids), jnp.int32) if mask is None else jnp.asarray(mask, jnp.int32)
        return _forward_logits(self, jnp.asarray(input_ids, jnp.int32), full_mask, inputs)


# One compiled program per (model, patch bucket): the layout is data.
@nnx.jit
def _vision_tower(tower: VisionTower, pixel_values: jax.Array, layout: PatchLayout) -> tuple[jax.Array, jax.Array]:
    return tower(pixel_values, layout)


@nnx.jit
def _forward_logits(model: Qwen3VL, input_ids: jax.Array, attention_mask: jax.Array,
                    inputs: ModelInputs | None) -> jax.Array:
    return model.logits(model.hidden_states(input_ids, attention_mask, inputs=inputs))
