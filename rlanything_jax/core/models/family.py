"""What a model family is, for loading, saving and planning: one record per Hugging Face `model_type`.

`models.families` holds the records by `model_type`; `hf_io` loads and saves through them and the planner
(`system/planning/architectures`) builds abstract models and reads vision shapes through them, so no generic module
names a family. A family's package defines its record (the decoder's is `models.decoder_family.DECODER`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

from rlanything_jax.core.interfaces import ModelInputs
from rlanything_jax.core.models.model_config import DecoderConfig


class VisionPlan(Protocol):
    """A vision-language family's image shapes and memory figures for the planner, from its config alone."""

    # Read-only, so that a frozen record's fields and properties satisfy them.
    @property
    def vision_params(self) -> tuple[str, ...]:
        """Top-level parameter names of the vision part (`VisionLM.vision_params`)."""

    @property
    def distinct_layers(self) -> int:
        """The first text layers that differ from the rest (the planner compiles past them)."""

    def screenshot_patches(self, height: int, width: int, max_pixels: int) -> int:
        """Patches of one screenshot of that size, resized as the model's processor resizes it."""

    def bucket_patches(self, patches: int) -> int:
        """The padded patch count the model's programs compile for."""

    def image_tokens(self, patches: int) -> int:
        """Image pad tokens of an image with that many real patches."""

    def abstract_row_inputs(self, rows: int, length: int, patches: int, frozen: bool) -> Any:
        """A train batch's `ImageInputs.batch_inputs` as ShapeDtypeStructs (cached features when `frozen`)."""

    def abstract_prompt_inputs(self, rows: int, prompt_length: int, image_tokens: int, dtype: Any) -> ModelInputs:
        """A prefill's `ImageInputs.prompt_inputs` as ShapeDtypeStructs, for `image_tokens` tokens in all."""

    def abstract_tower_input(self, patches: int) -> Any:
        """One image's `ImageInputs.tower_input` as ShapeDtypeStructs."""

    def train_bytes(self, rows: int, patches: int, compute_itemsize: int, frozen: bool, remat: str) -> int:
        """Per-device bytes of the vision part's activations for `rows` rows of `patches` patches in a step."""

    def sampler_bytes(self, images: int, image_tokens: int, patches_per_image: int, compute_itemsize: int) -> int:
        """Bytes of a prefill's image features (`images` images of `image_tokens` tokens) and one image's pass."""


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """One model family's checkpoint and planner functions. `Config` is the family's own config record."""

    name: str
    read_config: Callable[[dict], Any]                   # config.json -> Config
    text_config: Callable[[Any], DecoderConfig]          # Config -> its decoder's (layers, KV cache, vocabulary)
    with_text: Callable[[Any, DecoderConfig], Any]       # Config with its decoder's replaced (depth, scan)
    # (Config, dtype=, param_dtype=, attention=, rngs=) -> the model (the planner builds it abstractly)
    build: Callable[..., Any]
    # (Config, hf_dir, param_dtype, compute_dtype, mesh, rules, attention) -> the model with the checkpoint's weights
    load: Callable[..., Any]
    save: Callable[..., Any]                             # (model, out_dir, dtype, max_shard_bytes) -> out_dir
    owns: Callable[[Any], bool]                          # whether a model is this family's
    vision_plan: Callable[[Any], VisionPlan | None] = lambda config: None   # None: a text model
