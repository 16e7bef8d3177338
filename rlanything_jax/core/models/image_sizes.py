"""Image sizes on a patch grid: the Qwen2-VL family's `smart_resize` rule (transformers'
`Qwen2VLImageProcessor`), which Qwen2.5-VL and Qwen3-VL use for their inputs and the reference's desktop
agent for the screenshots it shows (factor 32). Numbers only, no model: a scenario may size images this way
without depending on a model family."""

from __future__ import annotations

import math


def smart_resize(height: int, width: int, factor: int = 32, min_pixels: int = 65536,
                 max_pixels: int = 16777216) -> tuple[int, int]:
    """The (height, width) nearest the image's that are multiples of `factor` with a pixel count in
    [min_pixels, max_pixels], keeping the aspect ratio as far as rounding allows."""
    aspect = max(height, width) / min(height, width)
    if aspect > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {aspect}")
    resized_h = round(height / factor) * factor
    resized_w = round(width / factor) * factor
    if resized_h * resized_w > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        resized_h = max(factor, math.floor(height / beta / factor) * factor)
        resized_w = max(factor, math.floor(width / beta / factor) * factor)
    elif resized_h * resized_w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        resized_h = math.ceil(height * beta / factor) * factor
        resized_w = math.ceil(width * beta / factor) * factor
    return resized_h, resized_w
