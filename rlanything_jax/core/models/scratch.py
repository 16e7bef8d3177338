"""Small models built from scratch: a byte-level BPE tokenizer trained on a corpus and a random decoder.

The embedded CPU run cannot afford a pretrained LLM, so it makes its own: a tokenizer
fitted to the run's text (prompts, observations, actions) and a small decoder, saved
as an ordinary Hugging Face directory (config.json, model.safetensors, tokenizer.json,
chat template), which every other part of the system loads like any checkpoint.
Everything is a pure function of the corpus, the architecture and the seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from flax import nnx

from rlanything_jax.core.models.decoder import Decoder
from rlanything_jax.core.models.decoder_family import save as save_decoder
from rlanything_jax.core.models.model_config import DecoderConfig, RopeConfig
from rlanything_jax.core.models.tokenizer import write_tokenizer_dir

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclasses.dataclass(frozen=True)
class ScratchArchitecture:
    num_layers: int = 4
    hidden_size: int = 128
    intermediate_size: int = 384
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    vocab_size: int = 2048          # BPE vocabulary, special tokens included
    max_position_embeddings: int = 16384
    rope_theta: float = 1e6


def train_tokenizer(corpus: Iterable[str], vocab_size: int):
    """A byte-level BPE (`tokenizers.Tokenizer`) with ChatML special tokens; decode(encode(x)) == x."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(list(corpus), trainer=trainer)
    return tokenizer


def decoder_config(arch: ScratchArchitecture, vocab_size: int) -> DecoderConfig:
    return DecoderConfig(model_type="qwen3", vocab_size=vocab_size, hidden_size=arch.hidden_size,
                         intermediate_size=arch.intermediate_size, num_layers=arch.num_layers,
                         num_heads=arch.num_heads, num_kv_heads=arch.num_kv_heads, head_dim=arch.head_dim,
                         qk_norm=True, tie_word_embeddings=True, rope=RopeConfig(theta=arch.rope_theta),
                         max_position_embeddings=arch.max_position_embeddings,
                         pad_token_id=SPECIAL_TOKENS.index("<|endoftext|>"),
                         eos_token_id=SPECIAL_TOKENS.index("<|im_end|>"))


def build_scratch_model_dir(out_dir: str | Path, corpus: Iterable[str],
                            arch: ScratchArchitecture = ScratchArchitecture(),
                            seed: int = 0) -> Path:
    """Trains the tokenizer on `corpus`, initialises a decoder, and saves both to `out_dir`."""
    out = Path(out_dir)
    backend = train_tokenizer(corpus, arch.vocab_size)
    write_tokenizer_dir(backend, out, {
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML_TEMPLATE,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
        "model_max_length": arch.max_position_embeddings, "clean_up_tokenization_spaces": False})
    model = Decoder(decoder_config(arch, backend.get_vocab_size()), rngs=nnx.Rngs(seed))
    save_decoder(model, out)
    return out
