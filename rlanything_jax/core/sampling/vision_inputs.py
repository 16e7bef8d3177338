"""A vision-language sampler's image inputs (`interfaces.VisionLM`): each image through the model's vision part
once, then the model's own `ModelInputs` for the prompt tokens around its image pads (`Sampler` prefills with
them). What an image is, and what its features are, only the model knows."""

from __future__ import annotations

import collections
from typing import Any, Sequence

import jax
import numpy as np
from flax import nnx

from rlanything_jax.core.interfaces import ImageInputs, ModelInputs


class VisionInputs:
    """The vision programs (one per shape of `ImageInputs.tower_input`, counted under "vision" in
    `compilations`)."""

    def __init__(self, image_inputs: ImageInputs, graphdef: nnx.GraphDef, param_shardings: Any,
                 compilations: collections.Counter):
        self.image_inputs, self.graphdef, self.param_shardings = image_inputs, graphdef, param_shardings
        self.compilations = compilations
        self._programs: dict[tuple, Any] = {}

    def features(self, params: nnx.State, image: Any) -> Any:
        """One image's features (`VisionLM.encode_image`), by the program of its padded shape."""
        tower_input = self.image_inputs.tower_input(image)
        key = tuple((np.shape(x), np.asarray(x).dtype.str) for x in jax.tree.leaves(tower_input))
        if key not in self._programs:
            counter, graphdef = self.compilations, self.graphdef

            def program(params, tower_input):
                counter["vision"] += 1
                return nnx.merge(graphdef, params).encode_image(tower_input)

            self._programs[key] = jax.jit(program, in_shardings=(self.param_shardings, None))
        return self._programs[key](params, tower_input)

    def inputs(self, params: nnx.State, next_positions: np.ndarray, tokens: np.ndarray, valid: np.ndarray,
               images: Sequence[Sequence[Any]]) -> ModelInputs:
        """The model's inputs for a prefill of `tokens` [B, T] holding `images[b]` in row b, its positions
        continuing each row's next position."""
        features = [self.features(params, image) for row in images for image in row]
        return self.image_inputs.prompt_inputs(features, tokens, valid, next_positions, images)
