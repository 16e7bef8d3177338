"""Training a vision-language policy or reward model (`interfaces.VisionLM`) with its vision part frozen.

The default trains every parameter, as the reference does. With `model.freeze_vision`, the
optimizer leaves the parameters the model names as its vision part alone (`freeze_vision`) and a
batch's images can go through that part once, outside the train step (`with_cached_image_features`):
every epoch and micro-batch then reads the cached features instead of re-running it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import optax
from flax import nnx

from rlanything_jax.core.interfaces import ImageInputs
from rlanything_jax.core.rl.train_step import TrainBatch


@dataclasses.dataclass(frozen=True)
class ImageTraining:
    """What a learner of a vision-language model needs for examples with images (`core/rl/phase.Learner.images`)."""

    inputs: ImageInputs                # the model's host-side image handling (`core/rl/data.DataConfig.images`)
    vision_params: tuple[str, ...]     # its vision part's top-level parameter names
    freeze_vision: bool = False        # the config's `model.freeze_vision`

    @property
    def image_token_id(self) -> int:
        return self.inputs.image_token_id

    @classmethod
    def of(cls, model: Any, freeze_vision: bool = False) -> "ImageTraining | None":
        """None for a text model (nothing to freeze, no images to read)."""
        inputs = getattr(model, "image_inputs", None)
        if inputs is None:
            return None
        return cls(inputs, tuple(model.vision_params), freeze_vision)


def freeze_vision(tx: optax.GradientTransformation, vision_params: Sequence[str]) -> optax.GradientTransformation:
    """`tx` for the parameters outside `vision_params` (top-level names); theirs get zero updates (no weight
    decay either)."""
    frozen = frozenset(vision_params)

    def label(path, _):
        first = path[0] if path else None
        return "frozen" if getattr(first, "key", None) in frozen else "trained"

    return optax.multi_transform({"trained": tx, "frozen": optax.set_to_zero()},
                                 lambda params: jax.tree_util.tree_map_with_path(label, params))


def with_cached_image_features(graphdef: nnx.GraphDef, params: nnx.State, batch: TrainBatch) -> TrainBatch:
    """The batch with its images replaced by their features (`VisionLM.with_image_features`); traceable."""
    model = nnx.merge(graphdef, params)
    return batch.replace(model_inputs=model.with_image_features(batch.model_inputs))
