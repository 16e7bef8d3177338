"""Qwen3-VL's `family.VisionPlan`: the planner's image shapes and vision memory figures, from the config alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rlanything_jax.core.interfaces import ModelInputs
from rlanything_jax.core.models.image_sizes import smart_resize
from rlanything_jax.core.models.qwen3_vl.config import Qwen3VLConfig
from rlanything_jax.core.models.qwen3_vl.images import RowImages, prompt_bucket
from rlanything_jax.core.models.qwen3_vl.patches import PatchLayout, bucket_patches

sds = jax.ShapeDtypeStruct


def _abstract_layout(*leading: int) -> PatchLayout:
    i32 = jnp.int32
    shapes: dict[str, Any] = dict(coords=sds(leading + (2,), i32), grid_hw=sds(leading + (2,), i32),
                                  segments=sds(leading, i32), valid=sds(leading, jnp.bool_))
    return PatchLayout(**shapes)   # abstract shapes in the arrays' fields, for tracing


@dataclasses.dataclass(frozen=True)
class Qwen3VLPlan:
    config: Qwen3VLConfig
    vision_params: tuple[str, ...] = ("visual",)

    @property
    def distinct_layers(self) -> int:   # DeepStack adds features to the outputs of the first layers
        return len(self.config.vision.deepstack_visual_indexes)

    def screenshot_patches(self, height: int, width: int, max_pixels: int) -> int:
        patch = self.config.vision.patch_size
        height, width = smart_resize(height, width, factor=patch * self.config.vision.spatial_merge_size,
                                     max_pixels=max_pixels)
        return (height // patch) * (width // patch)

    def bucket_patches(self, patches: int) -> int:
        return bucket_patches(patches)

    def image_tokens(self, patches: int) -> int:
        return patches // self.config.vision.spatial_merge_size ** 2

    def abstract_row_inputs(self, rows: int, length: int, patches: int, frozen: bool) -> RowImages:
        positions = sds((rows, 3, length), jnp.int32)
        if frozen:   # the step reads the tower's cached features (`Qwen3VL.with_image_features`)
            tokens, embed = self.image_tokens(patches), self.config.text.hidden_size
            return RowImages(positions=positions, embeddings=sds((rows, tokens, embed), jnp.float32),
                             deepstack=sds((rows, self.distinct_layers, tokens, embed), jnp.float32))
        pixel_values = sds((rows, patches, self.config.vision.patch_dim), jnp.float32)
        return RowImages(positions=positions, pixel_values=pixel_values, layout=_abstract_layout(rows, patches))

    def abstract_prompt_inputs(self, rows: int, prompt_length: int, image_tokens: int, dtype: Any) -> ModelInputs:
        count, embed = prompt_bucket(image_tokens), self.config.text.hidden_size
        shapes: dict[str, Any] = dict(
            embeddings=sds((count, embed), dtype), placeholder=sds((rows, prompt_length), jnp.bool_),
            position_ids=sds((3, rows, prompt_length), jnp.int32),
            deepstack=sds((self.distinct_layers, count, embed), dtype))
        return ModelInputs(**shapes)   # abstract shapes in the arrays' fields, for tracing

    def abstract_tower_input(self, patches: int) -> tuple[Any, PatchLayout]:
        return sds((patches, self.config.vision.patch_dim), jnp.float32), _abstract_layout(patches)

    def train_bytes(self, rows: int, patches: int, compute_itemsize: int, frozen: bool, remat: str) -> int:
        """None of the tower's when it is frozen: the step then reads cached features, [rows, tokens, embed] x
        (1 + DeepStack levels). Under remat its blocks keep what the decoder layers keep (the block input, plus
        the projections' outputs under "dots") and recompute one block at a time."""
        v = self.config.vision
        features = rows * self.image_tokens(patches) * self.config.text.hidden_size * 4 * (1 + self.distinct_layers)
        if frozen:
            return features
        per_block = patches * (8 * v.hidden_size + 2 * v.intermediate_size) * compute_itemsize
        if remat == "none":
            return rows * v.depth * per_block + features
        kept = {"dots": 6 * v.hidden_size + v.intermediate_size, "full": v.hidden_size}[remat]
        return rows * (v.depth * patches * kept * compute_itemsize + per_block) + features

    def sampler_bytes(self, images: int, image_tokens: int, patches_per_image: int, compute_itemsize: int) -> int:
        """The images' embeddings and DeepStack features (replicated), and one image through the tower (one
        block at a time)."""
        v = self.config.vision
        features = images * image_tokens * self.config.text.hidden_size * compute_itemsize * (1 + self.distinct_layers)
        return features + patches_per_image * (4 * v.hidden_size + v.intermediate_size) * 4
