"""Tiny random stand-in models that read and write a real tokenizer's ids (the paper-config audit)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests import hf_reference


def stand_in_model_dir(out_dir: Path, tokenizer_dir: Path, vocab_size: int) -> Path:
    """A tiny random Qwen2 decoder over `vocab_size` ids, with the tokenizer of `tokenizer_dir` beside it."""
    hf_reference.build("qwen2", out_dir, vocab_size=vocab_size, tie_word_embeddings=True,
                       max_position_embeddings=32768)
    for path in Path(tokenizer_dir).iterdir():
        if path.is_file() and not (out_dir / path.name).exists():
            shutil.copy(path, out_dir / path.name)
    return out_dir
