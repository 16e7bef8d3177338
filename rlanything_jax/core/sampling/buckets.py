"""Shape buckets: few compiled programs, at most 2x padding."""

from __future__ import annotations


def bucket_length(n: int, minimum: int) -> int:
    """Powers of two up to 1024, then multiples of 1024: few shapes, at most 2x padding.
    (Prompts are bucketed with minimum 16, appended tokens with minimum 1.)"""
    n = max(n, minimum)
    if n <= 1024:
        return 1 << (n - 1).bit_length()
    return -(-n // 1024) * 1024
