"""A vision-language sampler's image inputs: each image through the vision tower once, and the M-RoPE
positions of the prompt tokens around its image pads (`Sampler` prefills with them)."""

from __future__ import annotations

import collections
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlanything_jax.interfaces import ModelInputs
from rlanything_jax.models.qwen3_vl.patches import bucket_patches, patch_layout
from rlanything_jax.models.qwen3_vl.processor import ImageInput, get_rope_index
from rlanything_jax.sampling.buckets import bucket_length


class VisionInputs:
    """The vision tower's programs (one per patch bucket, counted under "vision" in `compilations`)."""

    def __init__(self, vl_config: Any, graphdef: nnx.GraphDef, param_shardings: Any,
                 compilations: collections.Counter):
        self.vl_config, self.graphdef, self.param_shardings = vl_config, graphdef, param_shardings
        self.compilations = compilations
        self._programs: dict[int, Any] = {}

    def features(self, params: nnx.State, image: ImageInput) -> tuple[jax.Array, jax.Array]:
        """Embeddings and DeepStack features of one image. Its patches are padded to a bucket
        (`patches.bucket_patches`) and its grid goes in as arrays (`PatchLayout`): one vision
        program per bucket, whatever the image sizes in it."""
        tower = self.vl_config.vision
        count = int(np.prod(image.grid_thw))
        size = bucket_patches(count)
        layout = patch_layout([image.grid_thw], tower.spatial_merge_size, size)
        if size not in self._programs:
            counter, graphdef = self.compilations, self.graphdef

            def program(params, pixel_values, layout):
                counter["vision"] += 1
                model = nnx.merge(graphdef, params)
                return model.visual(pixel_values.astype(model.dtype), layout)

            self._programs[size] = jax.jit(program, in_shardings=(self.param_shardings, None, None))
        pixel_values = np.zeros((size, image.pixel_values.shape[-1]), np.float32)
        pixel_values[:count] = image.pixel_values
        embeddings, deepstack = self._programs[size](params, pixel_values, layout)
        tokens = count // tower.spatial_merge_size ** 2
        return embeddings[:tokens], deepstack[:, :tokens]

    def inputs(self, params: nnx.State, next_positions: np.ndarray, tokens: np.ndarray, valid: np.ndarray,
               images: Sequence[Sequence[ImageInput]]) -> ModelInputs:
        """Image embeddings (each image through the vision tower once, rows padded to a bucket so that
        prefills compile per bucket) and M-RoPE positions continuing each row's next position."""
        cfg = self.vl_config
        flat = [image for row in images for image in row]
        features = [self.features(params, image) for image in flat]
        embeddings = jnp.concatenate([f[0] for f in features], axis=0)
        deepstack = jnp.concatenate([f[1] for f in features], axis=1)
        count = embeddings.shape[0]
        bucket = bucket_length(count, 16)
        embeddings = jnp.pad(embeddings, ((0, bucket - count), (0, 0)))
        deepstack = jnp.pad(deepstack, ((0, 0), (0, bucket - count), (0, 0)))
        placeholder = (tokens == cfg.image_token_id) & valid.astype(bool)
        if int(placeholder.sum()) != count:
            raise ValueError(f"the new tokens hold {int(placeholder.sum())} image pads for {count} image tokens")
        grids = np.asarray([image.grid_thw for image in flat], np.int64).reshape(-1, 3)
        positions, _ = get_rope_index(tokens, grids, cfg.image_token_id, valid, cfg.vision.spatial_merge_size)
        positions = np.where(valid[None].astype(bool), positions + next_positions[None, :, None], 0).astype(np.int32)
        return ModelInputs(embeddings=embeddings, placeholder=jnp.asarray(placeholder),
                           position_ids=jnp.asarray(positions), deepstack=deepstack)
