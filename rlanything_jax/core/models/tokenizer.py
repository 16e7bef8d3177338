"""Thin wrapper over a transformers tokenizer loaded from a local directory.

Only local directories are accepted: this project never reaches the
Hugging Face hub. Directories come from `python -m rlanything_jax.convert`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

# Tokens that end a turn in the chat formats we use (ChatML, SmolLM2, Qwen).
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>")
# A tokenizer directory holds at least one of these.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


_NO_TORCH_ADVISORY = "PyTorch was not found."


def _drop_no_torch_advisory(record: logging.LogRecord) -> bool:
    """transformers says at import that torch is missing; we need only its tokenizers."""
    return not str(record.msg).startswith(_NO_TORCH_ADVISORY)


# transformers logs the advisory on its root logger ("transformers") while it is
# imported, so the filter must be in place before any import of transformers.
# Only that one message is dropped: other warnings and errors still show.
logging.getLogger("transformers").addFilter(_drop_no_torch_advisory)


class Tokenizer:
    """Encode/decode text and chat conversations with a local HF tokenizer."""

    def __init__(self, hf_tokenizer: Any):
        self.hf = hf_tokenizer

    @classmethod
    def from_dir(cls, path: str | Path) -> "Tokenizer":
        directory = Path(path).expanduser()
        if not directory.is_dir():
            raise FileNotFoundError(
                f"tokenizer directory not found: {directory} (expected a local directory "
                "with tokenizer.json; create one with `python -m rlanything_jax.convert`)"
            )
        if not any((directory / name).is_file() for name in _TOKENIZER_FILES):
            raise FileNotFoundError(
                f"no tokenizer in {directory}: it has none of {', '.join(_TOKENIZER_FILES)}"
            )
        from transformers import AutoTokenizer  # deferred: slow import

        return cls(AutoTokenizer.from_pretrained(str(directory), local_files_only=True))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        # No space clean-up: decode(encode(text)) must give back text exactly.
        return self.hf.decode(
            list(ids),
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=False,
        )

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        return self.hf.apply_chat_template(
            list(messages),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **template_kwargs,
        )

    def encode_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> list[int]:
        # The template already writes the special tokens as text.
        text = self.apply_chat_template(messages, add_generation_prompt, **template_kwargs)
        return self.encode(text, add_special_tokens=False)

    @property
    def eos_id(self) -> int:
        return self.hf.eos_token_id

    @property
    def pad_id(self) -> int:
        pad = self.hf.pad_token_id
        return self.eos_id if pad is None else pad

    @property
    def bos_id(self) -> int | None:
        return self.hf.bos_token_id

    @property
    def vocab_size(self) -> int:
        """Number of tokens the tokenizer knows (the model's table may be larger)."""
        return len(self.hf)

    @property
    def stop_token_ids(self) -> list[int]:
        """eos plus end-of-turn tokens present in the vocabulary, without repeats."""
        ids = [self.eos_id] if self.eos_id is not None else []
        for token in _END_OF_TURN_TOKENS:
            token_id = self.token_to_id(token)
            if token_id is not None and token_id not in ids:
                ids.append(token_id)
        return ids

    def token_to_id(self, token: str) -> int | None:
        backend = getattr(self.hf, "backend_tokenizer", None)
        if backend is not None:
            return backend.token_to_id(token)
        return self.hf.get_vocab().get(token)


def write_tokenizer_dir(
    backend: Any, out_dir: str | Path, tokenizer_config: Mapping[str, Any]
) -> Path:
    """Writes tokenizer.json (a `tokenizers.Tokenizer`) and tokenizer_config.json.

    The chat template goes inside tokenizer_config.json, which every
    transformers version reads.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(dict(tokenizer_config), indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    return out
