"""Qwen3-VL's `interfaces.ImageInputs`: images to patches, prompts to expanded pads, batches and prefills to
M-RoPE positions and patch layouts. Host-side (numpy); `Qwen3VL` reads what it builds."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rlanything_jax.core.interfaces import ModelInputs
from rlanything_jax.core.models.qwen3_vl.patches import PatchLayout, bucket_patches, next_segment, patch_layout
from rlanything_jax.core.models.qwen3_vl.processor import (
    ImageInput,
    expand_image_pads,
    get_rope_index,
    image_token_count,
    preprocess_images,
)


class RowImages(struct.PyTreeNode):
    """A train batch's images (`TrainBatch.model_inputs`), every array with the rows first: M-RoPE positions
    [N, 3, L] and either each row's images, pixel_values [N, P, patch_dim] (packed in order, padded to a
    bucketed patch count P) with their patch layout (per-patch arrays [N, P, ...], any grids), or their
    cached vision features, embeddings [N, K, embed] and deepstack [N, levels, K, embed] (a frozen tower)."""

    # Any: numpy arrays on the host, jax arrays in the step, ShapeDtypeStructs in the planner.
    positions: Any
    pixel_values: Any = None
    layout: PatchLayout | None = None
    embeddings: Any = None
    deepstack: Any = None


def prompt_bucket(n: int, minimum: int = 16) -> int:
    """Powers of two up to 1024, then multiples of 1024 (the sampler's prompt buckets): few prefill shapes."""
    n = max(n, minimum)
    return 1 << (n - 1).bit_length() if n <= 1024 else -(-n // 1024) * 1024


@dataclasses.dataclass(frozen=True)
class Qwen3VLImages:
    image_token_id: int
    merge_size: int = 2

    def encode(self, image: Any) -> ImageInput:
        pixel_values, grid = preprocess_images([image])
        t, h, w = (int(v) for v in grid[0])
        return ImageInput(pixel_values, (t, h, w))

    def token_count(self, image: ImageInput) -> int:
        return image_token_count(image.grid_thw, self.merge_size)

    def expand(self, token_ids: Sequence[int], images: Sequence[ImageInput]) -> list[int]:
        grids = np.asarray([image.grid_thw for image in images], np.int64).reshape(-1, 3)
        return expand_image_pads(token_ids, grids, self.image_token_id, self.merge_size)

    def batch_inputs(self, input_ids: np.ndarray, attention_mask: np.ndarray,
                     images: Sequence[Sequence[ImageInput]]) -> RowImages:
        """Images of any grids mix in a batch; the step compiles per patch bucket. Segment ids increase over
        the whole batch, so that rows flattened together (and any split into micro-batches) attend within
        their own images only."""
        rows = input_ids.shape[0]
        images = [list(row) for row in images] + [[]] * (rows - len(images))
        size = bucket_patches(max(sum(image.pixel_values.shape[0] for image in row) for row in images))
        patch_dim = next(image for row in images for image in row).pixel_values.shape[-1]
        pixel_values = np.zeros((rows, size, patch_dim), np.float32)
        positions = np.zeros((rows, 3, input_ids.shape[1]), np.int32)
        layouts, first_segment = [], 0
        for row, row_images in enumerate(images):
            if row_images:
                packed = np.concatenate([image.pixel_values for image in row_images])
                pixel_values[row, :packed.shape[0]] = packed
            layouts.append(patch_layout([image.grid_thw for image in row_images], self.merge_size, size,
                                        first_segment))
            first_segment = next_segment(layouts[-1])
            grids = np.asarray([image.grid_thw for image in row_images], np.int64).reshape(-1, 3)
            positions[row] = get_rope_index(input_ids[row:row + 1], grids, self.image_token_id,
                                            attention_mask[row:row + 1], self.merge_size)[0][:, 0]
        layout = jax.tree.map(lambda *per_row: np.stack(per_row), *layouts)
        return RowImages(positions=positions, pixel_values=pixel_values, layout=layout)

    def tower_input(self, image: ImageInput) -> tuple[np.ndarray, PatchLayout]:
        """The image's patches padded to a bucket (`patches.bucket_patches`) with its grid as arrays
        (`PatchLayout`): one vision program per bucket, whatever the image sizes in it."""
        count = int(np.prod(image.grid_thw))
        size = bucket_patches(count)
        pixel_values = np.zeros((size, image.pixel_values.shape[-1]), np.float32)
        pixel_values[:count] = image.pixel_values
        return pixel_values, patch_layout([image.grid_thw], self.merge_size, size)

    def prompt_inputs(self, features: Sequence[tuple[jax.Array, jax.Array]], input_ids: np.ndarray,
                      valid: np.ndarray, next_positions: np.ndarray,
                      images: Sequence[Sequence[ImageInput]]) -> ModelInputs:
        """Image embeddings (rows padded to a bucket, so that prefills compile per bucket) and M-RoPE
        positions continuing each row's next position."""
        flat = [image for row in images for image in row]
        tokens = [self.token_count(image) for image in flat]
        embeddings = jnp.concatenate([f[0][:n] for f, n in zip(features, tokens)], axis=0)
        deepstack = jnp.concatenate([f[1][:, :n] for f, n in zip(features, tokens)], axis=1)
        count = embeddings.shape[0]
        bucket = prompt_bucket(count)
        embeddings = jnp.pad(embeddings, ((0, bucket - count), (0, 0)))
        deepstack = jnp.pad(deepstack, ((0, 0), (0, bucket - count), (0, 0)))
        placeholder = (input_ids == self.image_token_id) & valid.astype(bool)
        if int(placeholder.sum()) != count:
            raise ValueError(f"the new tokens hold {int(placeholder.sum())} image pads for {count} image tokens")
        grids = np.asarray([image.grid_thw for image in flat], np.int64).reshape(-1, 3)
        positions, _ = get_rope_index(input_ids, grids, self.image_token_id, valid, self.merge_size)
        positions = np.where(valid[None].astype(bool), positions + next_positions[None, :, None], 0).astype(np.int32)
        return ModelInputs(embeddings=embeddings, placeholder=jnp.asarray(placeholder),
                           position_ids=jnp.asarray(positions), deepstack=deepstack)
