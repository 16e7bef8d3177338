"""Qwen3-VL inputs on the host (numpy and PIL only): images to patches, prompt expansion, M-RoPE positions.

The numbers equal transformers' `Qwen2VLImageProcessorPil` configured as Qwen3-VL's released
`preprocessor_config.json` (patch 16, temporal patch 2, merge 2, mean = std = 0.5, 65536 to
16777216 pixels) and `Qwen3VLModel.get_rope_index`, so a prompt prepared here gives the same
model inputs as transformers' processor.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from PIL import Image

from rlanything_jax.core.models.image_sizes import smart_resize

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"


@dataclasses.dataclass(frozen=True)
class ImageProcessorConfig:
    """The released Qwen3-VL preprocessor settings."""

    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 65536
    max_pixels: int = 16777216
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


def _to_rgb(image: Image.Image | np.ndarray) -> Image.Image:
    """An RGB PIL image; transparency is composited onto white, as transformers does."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise ValueError(f"array images must be uint8 [H, W] or [H, W, C], got {image.dtype} {image.shape}")
        image = Image.fromarray(image)
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _normalized_chw(image: Image.Image, height: int, width: int, cfg: ImageProcessorConfig) -> np.ndarray:
    # Bicubic on uint8 through PIL, then x/255 in float64 rounded to float32 and (x - mean) / std in float32:
    # the same operations in the same precision as transformers' PIL backend, hence equal bits.
    resized = np.asarray(image.resize((width, height), resample=Image.Resampling.BICUBIC))
    scaled = (resized.astype(np.float64) * (1 / 255)).astype(np.float32)
    mean = np.asarray(cfg.image_mean, np.float32)
    std = np.asarray(cfg.image_std, np.float32)
    return np.moveaxis((scaled - mean) / std, -1, 0)


def patchify(image_chw: np.ndarray, cfg: ImageProcessorConfig) -> tuple[np.ndarray, tuple[int, int, int]]:
    """[C, H, W] -> (pixel rows [gh * gw, C * T * p * p], grid (1, gh, gw)).

    Rows go in merge-block order (block row, block col, row in block, col in block), so each run of
    merge² rows is one LLM token; each row is (channel, time, y, x), the frame repeated over time."""
    channels, height, width = image_chw.shape
    p, m, t = cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size
    grid_h, grid_w = height // p, width // p
    blocks = image_chw.reshape(channels, grid_h // m, m, p, grid_w // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
    frames = np.broadcast_to(blocks[:, :, :, :, :, None], (*blocks.shape[:5], t, p, p))
    return frames.reshape(grid_h * grid_w, channels * t * p * p), (1, grid_h, grid_w)


def preprocess_images(images: Sequence[Image.Image | np.ndarray],
                      cfg: ImageProcessorConfig = ImageProcessorConfig()) -> tuple[np.ndarray, np.ndarray]:
    """Images -> (pixel_values float32 [total patches, C * T * p * p], image_grid_thw int64 [images, 3])."""
    rows, grids = [], []
    for image in images:
        rgb = _to_rgb(image)
        height, width = smart_resize(rgb.height, rgb.width, cfg.factor, cfg.min_pixels, cfg.max_pixels)
        patches, grid = patchify(_normalized_chw(rgb, height, width, cfg), cfg)
        rows.append(patches)
        grids.append(grid)
    if not rows:
        return np.zeros((0, 3 * cfg.temporal_patch_size * cfg.patch_size ** 2), np.float32), np.zeros((0, 3), np.int64)
    return np.concatenate(rows, axis=0), np.asarray(grids, np.int64).reshape(-1, 3)


def image_token_count(grid_thw: Sequence[int], merge_size: int = 2) -> int:
    """LLM tokens of one image: its patches over merge²."""
    t, h, w = (int(v) for v in grid_thw)
    return t * h * w // (merge_size * merge_size)


def image_placeholder(grid_thw: Sequence[int], merge_size: int = 2) -> str:
    """The text that stands for one image in an expanded prompt."""
    return VISION_START + IMAGE_PAD * image_token_count(grid_thw, merge_size) + VISION_END


def expand_image_pads_in_text(text: str, image_grid_thw: np.ndarray, merge_size: int = 2) -> str:
    """Repeats the k-th `<|image_pad|>` of a chat-template prompt as many times as image k has tokens."""
    pieces = text.split(IMAGE_PAD)
    if len(pieces) - 1 != len(image_grid_thw):
        raise ValueError(f"the prompt has {len(pieces) - 1} {IMAGE_PAD} markers for {len(image_grid_thw)} images")
    out = [pieces[0]]
    for grid, piece in zip(image_grid_thw, pieces[1:]):
        out.append(IMAGE_PAD * image_token_count(grid, merge_size) + piece)
    return "".join(out)


def expand_image_pads(token_ids: Sequence[int], image_grid_thw: np.ndarray, image_token_id: int,
                      merge_size: int = 2) -> list[int]:
    """The token-id form of `expand_image_pads_in_text`: each single image pad id becomes the image's run."""
    out: list[int] = []
    images = iter(image_grid_thw)
    for token in token_ids:
        if token == image_token_id:
            grid = next(images, None)
            if grid is None:
                raise ValueError("more image pad tokens than images")
            out.extend([image_token_id] * image_token_count(grid, merge_size))
        else:
            out.append(int(token))
    if next(images, None) is not None:
        raise ValueError("more images than image pad tokens")
    return out


def get_rope_index(input_ids: np.ndarray, image_grid_thw: np.ndarray | None, image_token_id: int,
                   attention_mask: np.ndarray | None = None,
                   merge_size: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE positions (temporal, height, width) [3, B, T] int32 and rope deltas [B] int32.

    Per row, over its real tokens: a text run counts up on all three axes; an image (its run of pads,
    with LLM grid t x h' x w') takes the current position plus (frame, row, col) in raster order, then
    the count moves on by max(h', w'). Pads stay 0. A decoded token at cache index i has position
    i + delta on every axis.
    """
    input_ids = np.asarray(input_ids)
    batch, length = input_ids.shape
    mask = np.ones_like(input_ids, bool) if attention_mask is None else np.asarray(attention_mask).astype(bool)
    grids = iter(np.asarray(image_grid_thw).reshape(-1, 3) if image_grid_thw is not None else ())
    positions = np.zeros((3, batch, length), np.int32)
    deltas = np.zeros((batch,), np.int32)
    for row in range(batch):
        is_image = input_ids[row][mask[row]] == image_token_id
        pieces, start, current = [], 0, 0
        while start < len(is_image):
            end = start
            while end < len(is_image) and is_image[end] == is_image[start]:
                end += 1
            if not is_image[start]:
                pieces.append(np.broadcast_to(np.arange(end - start) + current, (3, end - start)))
                current += end - start
            else:
                grid = next(grids, None)
                if grid is None:
                    raise ValueError("the prompts hold more image pad runs than image_grid_thw has images")
                t, h, w = int(grid[0]), int(grid[1]) // merge_size, int(grid[2]) // merge_size
                if t * h * w != end - start:
                    raise ValueError(f"an image of grid {tuple(grid)} needs {t * h * w} pad tokens, got {end - start}")
                tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
                pieces.append(np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + current)
                current += max(h, w)
            start = end
        if pieces:
            row_positions = np.concatenate(pieces, axis=1)
            positions[:, row, mask[row]] = row_positions
            deltas[row] = row_positions.max() + 1 - len(is_image)
    if next(grids, None) is not None:
        raise ValueError("image_grid_thw has more images than the prompts hold")
    return positions, deltas


@dataclasses.dataclass(frozen=True)
class ImageInput:
    """One preprocessed image: its patch rows [n, C * T * p * p] and grid (t, h, w)."""

    pixel_values: np.ndarray
    grid_thw: tuple[int, int, int]


def prepare_prompt(token_ids: Sequence[int], images: Sequence[Image.Image | np.ndarray], image_token_id: int,
                   cfg: ImageProcessorConfig = ImageProcessorConfig()) -> tuple[list[int], list[ImageInput]]:
    """A prompt with one image pad per image (as a chat template writes it) -> its expanded token ids and
    the preprocessed images, in order: what the sampler and the train step take."""
    prepared = []
    for image in images:
        pixel_values, grid = preprocess_images([image], cfg)
        prepared.append(ImageInput(pixel_values, (int(grid[0][0]), int(grid[0][1]), int(grid[0][2]))))
    grids = np.asarray([item.grid_thw for item in prepared], np.int64).reshape(-1, 3)
    return expand_image_pads(token_ids, grids, image_token_id, cfg.merge_size), prepared
