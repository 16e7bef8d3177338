"""Qwen3-VL's `ModelFamily` (`models.families` registers it for `model_type: qwen3_vl`)."""

from __future__ import annotations

import dataclasses

from rlanything_jax.core.models.family import ModelFamily
from rlanything_jax.core.models.qwen3_vl import weights
from rlanything_jax.core.models.qwen3_vl.config import Qwen3VLConfig
from rlanything_jax.core.models.qwen3_vl.model import Qwen3VL
from rlanything_jax.core.models.qwen3_vl.plan import Qwen3VLPlan
from rlanything_jax.core.models.qwen3_vl.scratch import ScratchVisionArchitecture
from rlanything_jax.core.models.qwen3_vl.scratch import scratch_vl_config as _scratch_vl_config
from rlanything_jax.core.models.scratch import ScratchArchitecture


def scratch_vl_config(arch: ScratchArchitecture) -> Qwen3VLConfig:
    """The config of a scratch Qwen3-VL of `arch`'s text shape (the "scratch_vl" model path), its special tokens'
    ids as the scratch tokenizer assigns them (last); only their count matters to the planner."""
    names = ("<|im_end|>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    token_ids = {name: arch.vocab_size - 1 - i for i, name in enumerate(names)}
    return _scratch_vl_config(arch, ScratchVisionArchitecture(), arch.vocab_size, token_ids)


QWEN3_VL = ModelFamily(
    name="Qwen3-VL", read_config=Qwen3VLConfig.from_hf, text_config=lambda cfg: cfg.text,
    with_text=lambda cfg, text: dataclasses.replace(cfg, text=text),
    build=lambda cfg, **kwargs: Qwen3VL(cfg, **kwargs), load=weights.load, save=weights.save,
    owns=lambda model: isinstance(model, Qwen3VL), vision_plan=Qwen3VLPlan)
