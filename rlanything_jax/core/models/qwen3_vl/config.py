"""Qwen3-VL configuration: the text decoder's `DecoderConfig` plus the vision tower and M-RoPE settings.

Reads both the released (transformers 4.57-era) `config.json` form, with the text rope in
`rope_scaling` and `rope_theta`, and the transformers 5 form with `rope_parameters`; writes the
latter, which transformers' `Qwen3VLForConditionalGeneration.from_pretrained` loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from rlanything_jax.core.models.model_config import DecoderConfig, RopeConfig, UnsupportedCheckpointError

MODEL_TYPE = "qwen3_vl"
# Vision MLP activations: transformers' name -> whether it is the tanh approximation.
_VISION_ACTIVATIONS = {"gelu_pytorch_tanh": True, "gelu_new": True, "gelu": False}


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """The vision tower (ViT with 2-D RoPE, learned position grid, DeepStack mergers)."""

    depth: int = 27
    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_heads: int = 16
    out_hidden_size: int = 4096
    num_position_embeddings: int = 2304
    deepstack_visual_indexes: tuple[int, ...] = (8, 16, 24)
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    hidden_act: str = "gelu_pytorch_tanh"
    rope_theta: float = 10_000.0
    layer_norm_eps: float = 1e-6

    def __post_init__(self):
        if self.hidden_act not in _VISION_ACTIVATIONS:
            raise UnsupportedCheckpointError(f"vision hidden_act {self.hidden_act!r} is not supported "
                                             f"(supported: {', '.join(_VISION_ACTIVATIONS)})")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 4:
            raise UnsupportedCheckpointError("vision head_dim must be a multiple of 4 (2-D RoPE)")
        side = round(self.num_position_embeddings ** 0.5)
        if side * side != self.num_position_embeddings:
            raise UnsupportedCheckpointError("num_position_embeddings must be a square (a learned grid)")
        if any(not 0 <= i < self.depth for i in self.deepstack_visual_indexes):
            raise UnsupportedCheckpointError(f"deepstack_visual_indexes {self.deepstack_visual_indexes} "
                                             f"outside the {self.depth} vision blocks")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        """Length of one pixel_values row: channel x time x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def merged_dim(self) -> int:
        """Width of a merged token: merge² patches side by side."""
        return self.hidden_size * self.spatial_merge_size ** 2

    @property
    def tanh_gelu(self) -> bool:
        return _VISION_ACTIVATIONS[self.hidden_act]

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "VisionConfig":
        rope = hf.get("rope_parameters") or {}
        defaults = cls()
        return cls(
            depth=hf.get("depth", defaults.depth), hidden_size=hf.get("hidden_size", defaults.hidden_size),
            intermediate_size=hf.get("intermediate_size", defaults.intermediate_size),
            num_heads=hf.get("num_heads", defaults.num_heads),
            out_hidden_size=hf.get("out_hidden_size", defaults.out_hidden_size),
            num_position_embeddings=hf.get("num_position_embeddings", defaults.num_position_embeddings),
            deepstack_visual_indexes=tuple(hf.get("deepstack_visual_indexes", defaults.deepstack_visual_indexes)),
            patch_size=hf.get("patch_size", defaults.patch_size),
            temporal_patch_size=hf.get("temporal_patch_size", defaults.temporal_patch_size),
            spatial_merge_size=hf.get("spatial_merge_size", defaults.spatial_merge_size),
            in_channels=hf.get("in_channels", defaults.in_channels),
            hidden_act=hf.get("hidden_act", defaults.hidden_act),
            rope_theta=float(rope.get("rope_theta", defaults.rope_theta)))

    def to_hf(self) -> dict[str, Any]:
        return {"model_type": "qwen3_vl_vision", "depth": self.depth, "hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size, "num_heads": self.num_heads,
                "out_hidden_size": self.out_hidden_size, "num_position_embeddings": self.num_position_embeddings,
                "deepstack_visual_indexes": list(self.deepstack_visual_indexes), "patch_size": self.patch_size,
                "temporal_patch_size": self.temporal_patch_size, "spatial_merge_size": self.spatial_merge_size,
                "in_channels": self.in_channels, "hidden_act": self.hidden_act,
                "rope_parameters": {"rope_type": "axial", "rope_theta": self.rope_theta}}


@dataclasses.dataclass(frozen=True)
class Qwen3VLConfig:
    """`text` is an ordinary Qwen3 `DecoderConfig` (the decoder is reused); M-RoPE splits its rotary
    frequencies among the temporal, height and width axes by `mrope_section` (interleaved)."""

    text: DecoderConfig
    vision: VisionConfig = VisionConfig()
    mrope_section: tuple[int, int, int] = (24, 20, 20)
    image_token_id: int = 151655
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653

    def __post_init__(self):
        if sum(self.mrope_section) != self.text.head_dim // 2 or len(self.mrope_section) != 3:
            raise UnsupportedCheckpointError(f"mrope_section {self.mrope_section} must be 3 numbers summing to "
                                             f"head_dim / 2 = {self.text.head_dim // 2}")
        if self.text.rope.type != "default":
            raise UnsupportedCheckpointError(f"Qwen3-VL text rope type {self.text.rope.type!r} is not supported")
        if self.vision.out_hidden_size != self.text.hidden_size:
            raise UnsupportedCheckpointError("vision out_hidden_size must equal the text hidden_size")

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "Qwen3VLConfig":
        if hf.get("model_type") != MODEL_TYPE:
            raise UnsupportedCheckpointError(f"model_type {hf.get('model_type')!r} is not {MODEL_TYPE!r}")
        text = dict(hf.get("text_config") or {})
        rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
        if rope.get("rope_theta") is None:   # released configs keep theta beside rope_scaling
            rope["rope_theta"] = text.get("rope_theta") or hf.get("rope_theta") or 5_000_000.0
        rope.setdefault("rope_type", rope.pop("type", "default"))
        mrope_section = tuple(int(v) for v in rope.get("mrope_section", (24, 20, 20)))
        tied = hf.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        text.update(model_type="qwen3", rope_parameters=rope, tie_word_embeddings=tied)
        text.pop("rope_scaling", None)
        token_ids = {key: hf[key] for key in ("image_token_id", "video_token_id", "vision_start_token_id",
                                              "vision_end_token_id") if hf.get(key) is not None}
        return cls(text=DecoderConfig.from_hf(text), vision=VisionConfig.from_hf(hf.get("vision_config") or {}),
                   mrope_section=cast(tuple[int, int, int], mrope_section),   # __post_init__ checks it has 3
                   **token_ids)

    def to_hf(self, dtype: str = "float32") -> dict[str, Any]:
        text = self.text.to_hf(dtype)
        for key in ("architectures", "tie_word_embeddings", "dtype"):
            text.pop(key, None)
        text.update(model_type="qwen3_vl_text", rope_parameters={
            **self.text.rope.to_hf(), "mrope_section": list(self.mrope_section), "mrope_interleaved": True})
        return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": MODEL_TYPE,
                "text_config": text, "vision_config": self.vision.to_hf(),
                "tie_word_embeddings": self.text.tie_word_embeddings, "image_token_id": self.image_token_id,
                "video_token_id": self.video_token_id, "vision_start_token_id": self.vision_start_token_id,
                "vision_end_token_id": self.vision_end_token_id, "dtype": dtype}


def text_config(vocab_size: int, hidden_size: int, intermediate_size: int, num_layers: int, num_heads: int,
                num_kv_heads: int, head_dim: int, rope_theta: float = 5_000_000.0, **kwargs) -> DecoderConfig:
    """A Qwen3 `DecoderConfig` shaped as Qwen3-VL's text model (q/k norm, no biases)."""
    return DecoderConfig(model_type="qwen3", vocab_size=vocab_size, hidden_size=hidden_size,
                         intermediate_size=intermediate_size, num_layers=num_layers, num_heads=num_heads,
                         num_kv_heads=num_kv_heads, head_dim=head_dim, rope=RopeConfig(theta=rope_theta),
                         qk_norm=True, **kwargs)
