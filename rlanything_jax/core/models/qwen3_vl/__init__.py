"""Qwen3-VL: the vision-language model of the desktop (OSWorld) scenario, on the project's Qwen3 decoder."""

from rlanything_jax.core.models.qwen3_vl.config import Qwen3VLConfig, VisionConfig
from rlanything_jax.core.models.qwen3_vl.model import Qwen3VL

__all__ = ["Qwen3VL", "Qwen3VLConfig", "VisionConfig"]
