"""Tiny random transformers Qwen3-VL models (PyTorch) and image prompts: the reference for the JAX port."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from rlanything_jax.core.models.qwen3_vl import processor

IMAGE, VIDEO, START, END = 500, 501, 502, 503
VOCAB = 512

# Shapes that vary DeepStack levels (including more levels than text layers), mrope sections, tied
# embeddings, GQA ratios (2, 4, 1), vision head counts and position grids.
SHAPES = {
    "untied-gqa2-deepstack2": dict(
        text=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16),
        mrope=[4, 2, 2], tied=False,
        vision=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, num_position_embeddings=64,
                    deepstack_visual_indexes=[0, 1])),
    "tied-gqa4-deepstack1": dict(
        text=dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, head_dim=16),
        mrope=[2, 3, 3], tied=True,
        vision=dict(depth=2, hidden_size=64, intermediate_size=96, num_heads=4, num_position_embeddings=36,
                    deepstack_visual_indexes=[1])),
    "untied-gqa1-deepstack3-over-2-layers": dict(
        text=dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=24),
        mrope=[6, 3, 3], tied=False,
        vision=dict(depth=3, hidden_size=48, intermediate_size=80, num_heads=3, num_position_embeddings=100,
                    deepstack_visual_indexes=[0, 1, 2])),
}


def config(shape: str) -> Qwen3VLConfig:
    spec = SHAPES[shape]
    text = dict(vocab_size=VOCAB, intermediate_size=96, max_position_embeddings=4096, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": spec["mrope"],
                                 "mrope_interleaved": True}, **spec["text"])
    vision = dict(patch_size=16, temporal_patch_size=2, spatial_merge_size=2, hidden_act="gelu_pytorch_tanh",
                  out_hidden_size=spec["text"]["hidden_size"], **spec["vision"])
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE, video_token_id=VIDEO,
                         vision_start_token_id=START, vision_end_token_id=END, tie_word_embeddings=spec["tied"])


def randomize_(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Unit-scale activations; norm scales away from 1 and biases away from 0, so that a wrong norm,
    bias or rotation shows above the tolerances."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name and param.ndim == 1 and name.endswith("weight"):
                param.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                param.copy_(0.2 * noise)
            elif name.endswith("pos_embed.weight"):
                param.copy_(noise)
            else:
                param.copy_(noise / math.sqrt(math.prod(param.shape[1:])))
    return model


def build(shape: str, out_dir: Path | None = None, seed: int = 0) -> Qwen3VLForConditionalGeneration:
    """A randomized tiny model (saved to out_dir when given), eager attention."""
    torch.manual_seed(seed)
    model = randomize_(Qwen3VLForConditionalGeneration(config(shape)).eval(), seed)
    if out_dir is not None:
        model.save_pretrained(out_dir)
    model.config._attn_implementation = "eager"
    model.config.text_config._attn_implementation = "eager"
    model.config.vision_config._attn_implementation = "eager"
    return model


def images(sizes, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def prompt_batch(image_counts: list[int], seed: int = 0, sizes=((64, 64), (80, 120), (40, 200), (96, 48))):
    """Left-padded rows of random text around images: (input_ids [B, T], attention_mask, pixel_values,
    image_grid_thw). Row r holds image_counts[r] images."""
    rng = np.random.default_rng(seed)
    rows, all_images, used = [], [], 0
    for count in image_counts:
        ids = list(rng.integers(1, 400, 3))
        row_images = images([sizes[(used + k) % len(sizes)] for k in range(count)], seed=seed + used)
        used += count
        for _ in range(count):
            ids += [START, IMAGE, END] + list(rng.integers(1, 400, 2))
        all_images += row_images
        grids = processor.preprocess_images(row_images)[1] if count else np.zeros((0, 3), np.int64)
        rows.append(processor.expand_image_pads(ids, grids, IMAGE))
    width = max(map(len, rows))
    input_ids = np.zeros((len(rows), width), np.int32)
    mask = np.zeros_like(input_ids)
    for r, ids in enumerate(rows):
        input_ids[r, width - len(ids):] = ids
        mask[r, width - len(ids):] = 1
    pixel_values, grid_thw = processor.preprocess_images(all_images) if all_images else (None, None)
    return input_ids, mask, pixel_values, grid_thw


def reference_logits(model, input_ids, mask, pixel_values=None, grid_thw=None) -> np.ndarray:
    ids = torch.tensor(input_ids, dtype=torch.long)
    kwargs = {}
    if pixel_values is not None:
        kwargs = dict(pixel_values=torch.tensor(pixel_values), image_grid_thw=torch.tensor(grid_thw),
                      mm_token_type_ids=(ids == IMAGE).int())
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.tensor(mask, dtype=torch.long), **kwargs)
    return out.logits.float().numpy()


def screenshot_examples(eos: int = 7, sizes=((64, 96),)) -> list:
    """Train examples: two rows with one and two screenshots (sizes cycled from `sizes`), one text-only row;
    responses end with `eos`."""
    from rlanything_jax.core.rl.data import Example

    rng = np.random.default_rng(0)
    out, used = [], 0
    for count, advantage in [(1, 1.0), (2, -0.5), (0, 0.8)]:
        ids = list(rng.integers(10, 400, 3))
        for _ in range(count):
            ids += [START, IMAGE, END] + list(rng.integers(10, 400, 2))
        row_sizes = [sizes[(used + k) % len(sizes)] for k in range(count)]
        used += count
        prompt, prepared = processor.prepare_prompt(ids, images(row_sizes, seed=count), IMAGE)
        response = list(rng.integers(10, 400, 5)) + [eos]
        out.append(Example(prompt, response, advantage, [-3.0] * len(response), images=prepared or None))
    return out
