"""A small random Qwen3-VL and its tokenizer, for CPU runs of the desktop scenario.

The project cannot download Qwen3-VL weights, so a CPU run builds a model of the same
architecture at toy size: a byte-level BPE fitted to the run's text (with the Qwen3-VL
special tokens and chat template) and a random vision tower + Qwen3 decoder. It is saved
as an ordinary Qwen3-VL directory (config.json, model.safetensors, tokenizer files,
preprocessor_config.json), so it loads exactly as a local Qwen3-VL checkpoint does:
`models.load_pretrained(dir)`, and transformers' `Qwen3VLForConditionalGeneration`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path

from flax import nnx

from rlanything_jax.core.models.qwen3_vl.config import Qwen3VLConfig, VisionConfig, text_config
from rlanything_jax.core.models.qwen3_vl.model import Qwen3VL
from rlanything_jax.core.models.qwen3_vl.processor import ImageProcessorConfig
from rlanything_jax.core.models.qwen3_vl.weights import save
from rlanything_jax.core.models.qwen_tokenizer_io import QWEN3_VL_CHAT_TEMPLATE
from rlanything_jax.core.models.scratch import ScratchArchitecture, train_tokenizer
from rlanything_jax.core.models.tokenizer import write_tokenizer_dir

# Added after the BPE's own specials (<|endoftext|>, <|im_start|>, <|im_end|>), in this order.
VL_SPECIAL_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
                     "</tool_call>", "<think>", "</think>")


@dataclasses.dataclass(frozen=True)
class ScratchVisionArchitecture:
    depth: int = 2
    hidden_size: int = 64
    intermediate_size: int = 128
    num_heads: int = 2
    num_position_embeddings: int = 256   # a 16 x 16 learned grid
    deepstack_visual_indexes: tuple[int, ...] = (0,)


def scratch_vl_config(text: ScratchArchitecture, vision: ScratchVisionArchitecture, vocab_size: int,
                      token_ids: dict[str, int]) -> Qwen3VLConfig:
    # mrope_section splits head_dim / 2 frequencies as the released 24:20:20 does.
    half = text.head_dim // 2
    spatial = (half * 20) // 64
    decoder = text_config(vocab_size, text.hidden_size, text.intermediate_size, text.num_layers, text.num_heads,
                          text.num_kv_heads, text.head_dim, text.rope_theta, tie_word_embeddings=True,
                          max_position_embeddings=text.max_position_embeddings, pad_token_id=0,
                          eos_token_id=token_ids["<|im_end|>"])
    tower = VisionConfig(depth=vision.depth, hidden_size=vision.hidden_size, intermediate_size=vision.intermediate_size,
                         num_heads=vision.num_heads, out_hidden_size=text.hidden_size,
                         num_position_embeddings=vision.num_position_embeddings,
                         deepstack_visual_indexes=tuple(vision.deepstack_visual_indexes))
    return Qwen3VLConfig(text=decoder, vision=tower, mrope_section=(half - 2 * spatial, spatial, spatial),
                         image_token_id=token_ids["<|image_pad|>"], video_token_id=token_ids["<|video_pad|>"],
                         vision_start_token_id=token_ids["<|vision_start|>"],
                         vision_end_token_id=token_ids["<|vision_end|>"])


def _preprocessor_config(cfg: ImageProcessorConfig) -> dict:
    """The released Qwen3-VL preprocessor_config.json values (what `processor` implements)."""
    return {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": cfg.patch_size,
            "temporal_patch_size": cfg.temporal_patch_size, "merge_size": cfg.merge_size,
            "image_mean": list(cfg.image_mean), "image_std": list(cfg.image_std), "do_rescale": True,
            "do_normalize": True, "do_resize": True, "do_convert_rgb": True, "resample": 3,
            "size": {"shortest_edge": cfg.min_pixels, "longest_edge": cfg.max_pixels}}


def build_scratch_vl_model_dir(out_dir: str | Path, corpus: Iterable[str],
                               text: ScratchArchitecture = ScratchArchitecture(),
                               vision: ScratchVisionArchitecture = ScratchVisionArchitecture(),
                               seed: int = 0) -> Path:
    """Fits the tokenizer to `corpus`, initialises a random Qwen3-VL, and saves both to `out_dir`."""
    from tokenizers import AddedToken


    out = Path(out_dir)
    backend = train_tokenizer(corpus, text.vocab_size - len(VL_SPECIAL_TOKENS))
    backend.add_tokens([AddedToken(token, special=token.startswith("<|"), normalized=False)
                        for token in VL_SPECIAL_TOKENS])
    token_ids = {token: backend.token_to_id(token) for token in ("<|im_end|>",) + VL_SPECIAL_TOKENS}
    write_tokenizer_dir(backend, out, {
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": QWEN3_VL_CHAT_TEMPLATE,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
        "model_max_length": text.max_position_embeddings, "clean_up_tokenization_spaces": False})
    cfg = scratch_vl_config(text, vision, backend.get_vocab_size(), token_ids)
    save(Qwen3VL(cfg, rngs=nnx.Rngs(seed)), out)
    (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor_config(ImageProcessorConfig()),
                                                             indent=2) + "\n")
    return out
