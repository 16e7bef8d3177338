"""The Tokenizer wrapper on the converted Qwen tokenizer directories (no weights)."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import json  # noqa: E402
import shutil  # noqa: E402

import pytest  # noqa: E402

from rlanything_jax.core.models.tokenizer import Tokenizer  # noqa: E402

IM_START, IM_END, ENDOFTEXT = 151644, 151645, 151643


@pytest.mark.parametrize(
    "text",
    ["Hello, world!", "", "多语言 text\n\twith  spaces ", "<|im_start|>user\nhi<|im_end|>\n", "🤖 x=1;"],
)
def test_encode_decode_round_trip(qwen25_tokenizer, text):
    ids = qwen25_tokenizer.encode(text)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert qwen25_tokenizer.decode(ids) == text


def test_encode_adds_nothing(qwen25_tokenizer):
    assert qwen25_tokenizer.encode("Hello") == [9707]
    assert qwen25_tokenizer.encode("Hello", add_special_tokens=True) == [9707]


def test_decode_skip_special_tokens(qwen25_tokenizer):
    ids = [IM_START, 9707, IM_END, ENDOFTEXT]
    assert qwen25_tokenizer.decode(ids) == "<|im_start|>Hello<|im_end|><|endoftext|>"
    assert qwen25_tokenizer.decode(ids, skip_special_tokens=True) == "Hello"


def test_special_ids(qwen25_tokenizer, qwen3_tokenizer):
    for tok in (qwen25_tokenizer, qwen3_tokenizer):
        assert tok.eos_id == IM_END
        assert tok.pad_id == ENDOFTEXT
        assert tok.bos_id is None
        assert tok.stop_token_ids == [IM_END, ENDOFTEXT]
    assert qwen25_tokenizer.vocab_size == 151665
    assert qwen3_tokenizer.vocab_size == 151669


def test_token_to_id(qwen3_tokenizer):
    assert qwen3_tokenizer.token_to_id("<|im_start|>") == IM_START
    assert qwen3_tokenizer.token_to_id("</think>") == 151668
    assert qwen3_tokenizer.token_to_id("Hello") == 9707
    assert qwen3_tokenizer.token_to_id("<|no_such_token|>") is None


def test_chat_template_and_encode_chat(qwen25_tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
    text = qwen25_tokenizer.apply_chat_template(messages)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = qwen25_tokenizer.encode_chat(messages)
    assert ids == qwen25_tokenizer.encode(text)
    assert ids[0] == IM_START and ids.count(IM_END) == 2
    without_prompt = qwen25_tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    assert without_prompt.endswith("Hi<|im_end|>\n")


def test_template_kwargs_pass_through(qwen3_tokenizer):
    messages = [{"role": "user", "content": "Hi"}]
    text = qwen3_tokenizer.apply_chat_template(messages, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert qwen3_tokenizer.encode_chat(messages, enable_thinking=False)[-4:] == qwen3_tokenizer.encode(
        "<think>\n\n</think>\n\n"
    )


def test_pad_falls_back_to_eos(qwen25_tokenizer_dir, tmp_path):
    no_pad_dir = tmp_path / "no_pad"
    shutil.copytree(qwen25_tokenizer_dir, no_pad_dir)
    config_path = no_pad_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["pad_token"] = None
    config_path.write_text(json.dumps(config))
    tok = Tokenizer.from_dir(no_pad_dir)
    assert tok.hf.pad_token_id is None
    assert tok.pad_id == tok.eos_id == IM_END


def test_missing_directory_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="tokenizer directory not found.*nope"):
        Tokenizer.from_dir(missing)
    a_file = tmp_path / "file.json"
    a_file.write_text("{}")
    with pytest.raises(FileNotFoundError, match="tokenizer directory not found"):
        Tokenizer.from_dir(a_file)


def test_hub_names_are_refused():
    with pytest.raises(FileNotFoundError):
        Tokenizer.from_dir("Qwen/Qwen2.5-0.5B-Instruct")
