"""Decoder models and their Hugging Face / GGUF input and output."""

from rlanything_jax.core.models.decoder import Decoder, positions_from_mask
from rlanything_jax.core.models.hf_io import load_pretrained, save_pretrained
from rlanything_jax.core.models.model_config import DecoderConfig, RopeConfig, UnsupportedCheckpointError

__all__ = ["Decoder", "DecoderConfig", "RopeConfig", "UnsupportedCheckpointError", "load_pretrained",
           "positions_from_mask", "save_pretrained"]
