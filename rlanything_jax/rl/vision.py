"""Training a vision-language policy or reward model with its vision tower frozen.

The default trains every parameter, as the reference does. With `model.freeze_vision`, the
optimizer leaves the tower alone (`freeze_vision`) and a batch's images can go through the
tower once, outside the train step (`with_cached_image_features`): every epoch and
micro-batch then reads the cached features instead of re-running the tower.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from rlanything_jax.rl.train_step import TrainBatch

VISION_TOWER = "visual"   # the vision tower's attribute name in `models.qwen3_vl.Qwen3VL`


@dataclasses.dataclass(frozen=True)
class ImageTraining:
    """What a learner of a vision-language model needs for examples with images (`rl/phase.Learner.images`)."""

    image_token_id: int
    merge_size: int
    freeze_vision: bool = False   # the config's `model.freeze_vision`

    @classmethod
    def of(cls, model: Any, freeze_vision: bool = False) -> "ImageTraining | None":
        """None for a text model (nothing to freeze, no images to read)."""
        vl_config = getattr(model, "vl_config", None)
        if vl_config is None:
            return None
        return cls(vl_config.image_token_id, vl_config.vision.spatial_merge_size, freeze_vision)


def _in_vision_tower(path) -> bool:
    first = path[0] if path else None
    return getattr(first, "key", None) == VISION_TOWER


def freeze_vision(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx` for the parameters outside the vision tower; the tower's updates are zero (no weight decay either)."""

    def labels(params):
        return jax.tree_util.tree_map_with_path(lambda path, _: "frozen" if _in_vision_tower(path) else "trained",
                                                params)

    return optax.multi_transform({"trained": tx, "frozen": optax.set_to_zero()}, labels)


def with_cached_image_features(graphdef: nnx.GraphDef, params: nnx.State, batch: TrainBatch) -> TrainBatch:
    """The batch with its pixel_values [N, P, patch_dim] (and layout) replaced by their vision features
    (image_embeddings [N, P / merge², embed], image_deepstack [N, levels, P / merge², embed]); traceable."""
    model = nnx.merge(graphdef, params)
    inputs = model.row_inputs(batch.input_ids, batch.mrope_positions, batch.pixel_values, batch.image_layout)
    return batch.replace(pixel_values=None, image_layout=None,
                         image_embeddings=jax.lax.stop_gradient(inputs.embeddings),
                         image_deepstack=jax.lax.stop_gradient(jnp.moveaxis(inputs.deepstack, 0, 1)))
