"""Per-patch tables of the vision tower, built on the host: what makes a program depend on a patch count only.

An image's grid decides three things in the tower: each patch's (row, col) for the 2-D RoPE, its
bilinear taps into the learned position-embedding grid (from its (row, col) and its image's size),
and which patches attend to each other (one block per frame). `patch_layout` turns the grids of a
run of images into arrays of those, padded to a patch count, so that one compiled tower serves
every set of grids of that count (`bucket_patches` keeps the counts few). Padding patches get zero
pixels, no position embedding, a segment of their own and `valid = False`; callers drop their outputs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from flax import struct

Grid = tuple[int, int, int]   # (frames, patch rows, patch cols) of one image


def bucket_patches(n: int, minimum: int = 256, step: int = 1024) -> int:
    """Powers of two from `minimum` up to `step`, then multiples of `step`: at most 2x padding for small
    images (the released processor never makes fewer than 256 patches) and under `step` patches for
    screenshots (a 1920x1088 one, 8160 patches, pads to 8192), whose MLP work grows with the padding.
    The attention skips padding tiles (`vision.segment_attention`), so it costs little there."""
    n = max(n, minimum)
    if n <= step:
        return 1 << (n - 1).bit_length()
    return -(-n // step) * step


@struct.dataclass
class PatchLayout:
    """Per-patch arrays [..., P] of a run of images padded to P patches (merge-block order, frames in turn).
    The tower derives the RoPE angles and the bilinear position-embedding taps from `coords` and `grid_hw`,
    so a layout depends on the merge size only, not on the model."""

    coords: np.ndarray     # [P, 2] int32 (row, col) of each patch within its image
    grid_hw: np.ndarray    # [P, 2] int32 (patch rows, patch cols) of the patch's image (1, 1 for padding)
    segments: np.ndarray   # [P] int32 frame index, non-decreasing; padding is one more segment at the end
    valid: np.ndarray      # [P] bool: a real patch

    @property
    def size(self) -> int:
        return self.segments.shape[-1]


def _patch_coordinates(grid: Grid, merge: int) -> np.ndarray:
    """(row, col) of every patch [t*h*w, 2], in merge-block order, frames repeated."""
    t, h, w = grid
    within = np.arange(h * w)
    in_col, in_row = within % merge, (within // merge) % merge
    block_col = (within // (merge * merge)) % (w // merge)
    block_row = within // (merge * merge * (w // merge))
    coords = np.stack([block_row * merge + in_row, block_col * merge + in_col], axis=-1)
    return np.tile(coords, (t, 1))


def patch_layout(grids: Sequence[Grid], merge: int, size: int | None = None, first_segment: int = 0) -> PatchLayout:
    """The layout of `grids`' patches, in order, padded to `size` patches (default: exactly theirs). Segments
    start at `first_segment`, so that rows of a batch packed one after another (`next_segment`) keep
    them increasing, as `vision.segment_attention` needs."""
    grids = [(int(t), int(h), int(w)) for t, h, w in grids]
    total = sum(t * h * w for t, h, w in grids)
    size = total if size is None else size
    if size < total or size % (merge * merge):
        raise ValueError(f"{total} patches do not fit a layout of {size} (a multiple of {merge * merge})")
    pad = size - total
    frames = sum(t for t, _, _ in grids)
    coords = [_patch_coordinates(grid, merge) for grid in grids] + [np.zeros((pad, 2), np.int64)]
    grid_hw = [np.tile([h, w], (t * h * w, 1)) for t, h, w in grids] + [np.ones((pad, 2), np.int64)]
    lengths = [h * w for t, h, w in grids for _ in range(t)] + [pad]
    segments = np.repeat(np.arange(first_segment, first_segment + frames + 1), lengths)
    return PatchLayout(coords=np.concatenate(coords).astype(np.int32), grid_hw=np.concatenate(grid_hw).astype(np.int32),
                       segments=segments.astype(np.int32), valid=np.arange(size) < total)


def next_segment(layout: PatchLayout) -> int:
    """The first segment id free after `layout` (for the next row's `first_segment`)."""
    return int(layout.segments[-1]) + 1 if layout.size else 0
